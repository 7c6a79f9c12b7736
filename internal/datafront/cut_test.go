package datafront

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/httpserve"
)

// cutPut sends a chunked PUT of chunks to rawURL over a raw connection,
// then half of the chunk half (when half is not nil) and cuts the
// connection without the last (zero-length) chunk.
func cutPut(t *testing.T, rawURL string, chunks [][]byte, half []byte) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n", u.RequestURI(), u.Host)
	for _, ch := range chunks {
		fmt.Fprintf(c, "%x\r\n%s\r\n", len(ch), ch)
	}
	if half != nil {
		fmt.Fprintf(c, "%x\r\n%s", len(half), half[:len(half)/2])
	}
}

// TestDataCutChunkedPutIsNotCommitted: a chunked PUT whose connection is
// cut before its last chunk, in the middle of a chunk or between two, is
// an aborted upload in every layout: never committed, no stripe left.
func TestDataCutChunkedPutIsNotCommitted(t *testing.T) {
	fx := start(t)
	piece := make([]byte, 300000)
	rand.Read(piece)
	fid := uint64(200)
	for _, tc := range []struct {
		layout string
		n      int
	}{{"plain", 1}, {"replica:3", 3}, {"ec:4+2:65536", 6}} {
		for _, cut := range []string{"mid-chunk", "between chunks"} {
			fid++
			w := fx.writeCap(fid, tc.layout, tc.n)
			var half []byte
			if cut == "mid-chunk" {
				half = piece
			}
			cutPut(t, fx.dataURL(w), [][]byte{piece, piece}, half)
			line := fmt.Sprintf("method=PUT path=%s%x ", httpserve.DataPath, fid)
			deadline := time.Now().Add(20 * time.Second)
			for !strings.Contains(fx.log.String(), line) {
				if time.Now().After(deadline) {
					t.Fatalf("%s, cut %s: the storage server did not finish the request within 20 s:\n%s", tc.layout, cut, fx.log.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if c, ok := fx.ns.Committed(fid); ok {
				t.Fatalf("%s, cut %s: an upload cut before its last chunk was committed with %d bytes", tc.layout, cut, c.Size)
			}
			for _, root := range fx.roots {
				if _, err := os.Stat(posix.PhysPath(root, fid)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s, cut %s: stripe left in %s (%v)", tc.layout, cut, root, err)
				}
			}
		}
	}
}

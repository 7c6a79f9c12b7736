package xrootd_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/xrootd"
)

// TestClientRead: the client opens a file at the manager, follows the
// redirect to the data listener with its capability, reads it with
// concurrent requests (out of order, ranges larger than one answer) and
// closes it; a missing file is kXR_NotFound.
func TestClientRead(t *testing.T) {
	c := startCluster(t)
	data := make([]byte, 20<<20+17)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(c.Root, "f.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := xrootd.Dial(ctx, "tester@"+c.MgrAddr, xrootd.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	f, err := cl.OpenRead(ctx, "/f.bin")
	if err != nil {
		t.Fatal(err)
	}
	if f.Size != int64(len(data)) {
		t.Fatalf("size %d, want %d", f.Size, len(data))
	}
	got := make([]byte, len(data))
	const chunk = 9 << 20 // more than the server's largest answer
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for off := int64(0); off < int64(len(data)); off += chunk {
		wg.Add(1)
		go func(off int64) {
			defer wg.Done()
			end := min(off+chunk, int64(len(data)))
			if n, err := f.ReadAt(ctx, got[off:end], off); err != nil || int64(n) != end-off {
				errs <- errors.Join(err, errors.New("short read"))
			}
		}(off)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the bytes read differ from the file")
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f.Conn().Close()
	_, err = cl.OpenRead(ctx, "/missing")
	var se *xrootd.ServerError
	if !errors.As(err, &se) || !se.NotFound() {
		t.Fatalf("open of a missing file: %v", err)
	}
}

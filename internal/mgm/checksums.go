package mgm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// EnsureChecksum returns the inode at p with a value for checksum type typ.
// Types the upload did not compute (md5 and sha256 by default) are
// computed now from the stored data, read through a storage server like
// any client read, and recorded in the namespace so later requests are
// answered from the record. The same pass recomputes the types stored at
// write time and refuses to answer if they no longer match: a checksum is
// never derived from silently damaged data.
func (s *Server) EnsureChecksum(ctx context.Context, c namespace.Caller, p, typ string) (*namespace.Inode, error) {
	n, err := s.ns.Stat(c, p)
	if err != nil {
		return nil, err
	}
	if n.IsDir {
		return nil, kerr.New(kerr.IsDir, "checksum", p, "is a directory")
	}
	if n.Checksums[typ] != "" {
		return n, nil
	}
	if !checksum.Valid(typ) {
		return nil, kerr.New(kerr.Unsupported, "checksum", p, fmt.Sprintf("unknown checksum type %q", typ))
	}
	var body io.Reader = bytes.NewReader(nil)
	if n.Size > 0 {
		rc, err := s.openData(ctx, c, p)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		body = rc
	}
	v, bad, got, err := checksum.Recompute(body, typ, n.Checksums)
	if err == nil && got != n.Size {
		err = fmt.Errorf("short read")
	}
	if err != nil {
		return nil, kerr.New(kerr.IO, "checksum", p, fmt.Sprintf("read %d of %d bytes from the storage server", got, n.Size))
	}
	if bad != "" {
		s.log.Error("stored data does not match its checksum", "path", p, "type", bad, "recorded", n.Checksums[bad])
		return nil, kerr.New(kerr.IO, "checksum", p, "stored data does not match the "+bad+" recorded at write time")
	}
	if err := s.ns.AddChecksums(n.ID, map[string]string{typ: v}); err != nil {
		return nil, err
	}
	if n.Checksums == nil {
		n.Checksums = map[string]string{}
	}
	n.Checksums[typ] = v
	return n, nil
}

// openData opens the file at p for reading through a storage server.
func (s *Server) openData(ctx context.Context, c namespace.Caller, p string) (io.ReadCloser, error) {
	red, _, err := s.OpenRead(c, p)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, red.URL(), nil)
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, "read", p, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil { // not wrapped: the error text holds the capability
		return nil, kerr.New(kerr.IO, "read", p, "storage server unreachable")
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, kerr.New(kerr.IO, "read", p, "storage server answered "+resp.Status)
	}
	return resp.Body, nil
}

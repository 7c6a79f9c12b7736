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
	if !n.Permits(c, 4) { // a checksum tells about the content
		return nil, kerr.New(kerr.Permission, "checksum", p, "read permission denied")
	}
	if n.Checksums[typ] != "" {
		return n, nil
	}
	if !checksum.Valid(typ) {
		return nil, kerr.New(kerr.Unsupported, "checksum", p, fmt.Sprintf("unknown checksum type %q", typ))
	}
	// One computation per file and type: concurrent requests (many clients
	// verifying the same new file) wait for it and share its outcome.
	key := fmt.Sprintf("%x/%s", n.ID, typ)
	s.sumMu.Lock()
	if call, busy := s.sumPending[key]; busy {
		s.sumMu.Unlock()
		select {
		case <-call.done:
		case <-ctx.Done():
			return nil, kerr.New(kerr.IO, "checksum", p, "request cancelled while the checksum was computed")
		}
		if call.err != nil {
			return nil, call.err
		}
		return s.EnsureChecksum(ctx, c, p, typ) // now answered from the record
	}
	if s.sumPending == nil {
		s.sumPending = map[string]*sumCall{}
	}
	call := &sumCall{done: make(chan struct{})}
	s.sumPending[key] = call
	s.sumMu.Unlock()
	defer func() {
		s.sumMu.Lock()
		delete(s.sumPending, key)
		s.sumMu.Unlock()
		close(call.done)
	}()
	// Not cancelled with this request: others may be waiting for it.
	n, call.err = s.computeChecksum(context.WithoutCancel(ctx), c, p, n, typ)
	return n, call.err
}

// sumCall is one checksum computation other requests may wait for.
type sumCall struct {
	done chan struct{}
	err  error
}

// computeChecksum reads the file at p (inode n) and records typ.
func (s *Server) computeChecksum(ctx context.Context, c namespace.Caller, p string, n *namespace.Inode, typ string) (*namespace.Inode, error) {
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

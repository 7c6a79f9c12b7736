package nsserver

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Checksum returns the entry at path with a value for checksum type typ.
// A checksum describes the content, so it needs the read permission.
// Types the upload did not compute (md5 and sha256 by default) are
// computed now from the stored data, read through a storage server like
// any client read, and recorded in the namespace so later requests are
// answered from the record. The same pass recomputes the types stored at
// write time and refuses to answer if they no longer match: a checksum is
// never derived from silently damaged data.
func (s *Server) Checksum(ctx context.Context, pr auth.Principal, p, typ string) (e nsapi.Entry, err error) {
	defer func() { err = s.refused(ctx, pr, "checksum", p, err) }()
	n, err := s.checksum(ctx, pr, p, typ)
	if err != nil {
		return nsapi.Entry{}, err
	}
	return entryOf(clean(p), n), nil
}

func (s *Server) checksum(ctx context.Context, pr auth.Principal, p, typ string) (*namespace.Inode, error) {
	_, n, err := s.follow(pr, auth.ScopeRead, p, "checksum")
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, kerr.New(kerr.NotFound, "checksum", p, "no such file or directory")
	}
	if n.IsDir {
		return nil, kerr.New(kerr.IsDir, "checksum", p, "is a directory")
	}
	if !s.canRead(pr, n) {
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
		return s.checksum(ctx, pr, p, typ) // now answered from the record
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
	n, call.err = s.computeChecksum(context.WithoutCancel(ctx), pr, p, n, typ)
	return n, call.err
}

// sumCall is one checksum computation other requests may wait for.
type sumCall struct {
	done chan struct{}
	err  error
}

// computeChecksum reads the file at p (inode n) and records typ.
func (s *Server) computeChecksum(ctx context.Context, pr auth.Principal, p string, n *namespace.Inode, typ string) (*namespace.Inode, error) {
	var body io.Reader = bytes.NewReader(nil)
	if n.Size > 0 {
		g, err := s.openRead(pr, p, "", "checksum")
		if err != nil {
			return nil, err
		}
		if s.data == nil {
			return nil, kerr.New(kerr.Unsupported, "checksum", p, "this namespace server cannot read file data")
		}
		rc, err := s.data.ReadFile(ctx, g.Server.HTTP, g.Token)
		if err != nil {
			return nil, kerr.WithOp(err, "checksum")
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
	if err := s.ns.AddChecksums(n.ID, n.DataVersion, map[string]string{typ: v}); err != nil {
		return nil, err
	}
	if n.Checksums == nil {
		n.Checksums = map[string]string{}
	}
	n.Checksums[typ] = v
	return n, nil
}

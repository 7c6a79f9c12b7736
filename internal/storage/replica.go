package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Reading a plain or replicated file: its copies are tried in order,
// those on this server's filesystems first. Every local read is verified
// block by block by the store (backend.Reader), and a remote copy is read
// through the peer holding it, which verifies its own; so a range that
// fails on one copy (a block that rotted, an I/O error, a peer gone) is
// read from the next one, and the client gets the good bytes. A local
// copy whose block failed is repaired in the background (heal.go,
// openLocal); a peer repairs its own. A copy marked damaged is never read. A file
// whose every copy is marked damaged fails at once, naming itself; one
// where no copy can serve a range fails that read with every copy's
// reason, and no byte of a block that failed is ever returned.
//
// Stripes written before block sums existed cannot be verified: a file
// whose first copy is one of them is read as before (a local one handed
// to the kernel with sendfile).

// replicaFile is a plain or replicated file read through this server.
type replicaFile struct {
	s     *Server
	c     *capability.Capability
	token string
	ctx   context.Context
	srcs  []*replicaSrc // in the order tried
	cur   atomic.Int32  // the source reads start with
}

// replicaSrc is one copy of the file.
type replicaSrc struct {
	idx int         // stripe index
	fs  *filesystem // nil: on another storage server

	mu     sync.Mutex
	opened bool
	r      io.ReaderAt    // the copy, once opened
	local  backend.Reader // the same, when local (closed with the file)
	err    error          // why it cannot be read at all
}

func (src *replicaSrc) name(c *capability.Capability) string {
	return fmt.Sprintf("replica %d (fs %d)", src.idx, c.Targets[src.idx].FsID)
}

// open opens the copy once; a copy that fails to open stays failed for
// this file.
func (f *replicaFile) open(src *replicaSrc) (io.ReaderAt, error) {
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.opened {
		return src.r, src.err
	}
	src.opened = true
	t := f.c.Targets[src.idx]
	if f.c.IsStale(src.idx) {
		src.err = errors.New("stale (it missed an update)")
		return nil, src.err
	}
	if src.fs == nil {
		p, err := f.s.peers("open", f.c.Path)
		if err != nil {
			src.err = err
			return nil, err
		}
		src.r = p.StripeReader(f.ctx, t.Addr, f.c.Fid, src.idx, f.token)
		return src.r, nil
	}
	r, err := f.s.openLocal(src.fs, f.c, f.token, src.idx)
	var de *damagedError
	switch {
	case errors.As(err, &de):
		src.err = de
	case err != nil:
		src.err = errors.New(reason(err))
	case r.Size() != f.c.Size:
		src.err = fmt.Errorf("holds %d bytes, the file has %d", r.Size(), f.c.Size)
	default:
		src.r, src.local = r, r
		return r, nil
	}
	if r != nil {
		r.Close()
	}
	return nil, src.err
}

// openReplicas opens a plain or replicated file. The first copy that
// opens is where reads start; a file none of whose copies opens fails
// here, before a client is told anything.
func (s *Server) openReplicas(ctx context.Context, c *capability.Capability, token string) (File, error) {
	f := &replicaFile{s: s, c: c, token: token, ctx: ctx}
	for i, t := range c.Targets {
		if fs := s.local(t.FsID); fs != nil {
			f.srcs = append(f.srcs, &replicaSrc{idx: i, fs: fs})
		}
	}
	for i, t := range c.Targets {
		if s.local(t.FsID) == nil {
			f.srcs = append(f.srcs, &replicaSrc{idx: i})
		}
	}
	var reasons []string
	damaged := 0
	for k, src := range f.srcs {
		if _, err := f.open(src); err != nil {
			var de *damagedError
			if errors.As(err, &de) {
				damaged++
			}
			reasons = append(reasons, fmt.Sprintf("%s: %v", src.name(c), err))
			continue
		}
		if k == 0 && src.local != nil && !src.local.BlockSums() {
			// Written before block sums: nothing to verify, and nothing
			// to fail over on; read it as before (sendfile).
			return src.local, nil
		}
		f.cur.Store(int32(k))
		return f, nil
	}
	if damaged == len(f.srcs) {
		return nil, kerr.New(kerr.IO, "open", c.Path, "damaged beyond repair: "+strings.Join(reasons, "; "))
	}
	return nil, kerr.New(kerr.Unavailable, "open", c.Path, "no readable replica: "+strings.Join(reasons, "; "))
}

func (f *replicaFile) Size() int64 { return f.c.Size }

// ReadAt reads from the current copy; what it cannot give is read from
// the next ones in turn (a copy that failed at one block may serve the
// next ones), until every copy failed in a row; the copy that served
// last becomes the current one.
func (f *replicaFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, kerr.New(kerr.Invalid, "read", f.c.Path, "negative offset")
	}
	if off >= f.c.Size {
		return 0, io.EOF
	}
	want := int(min(int64(len(p)), f.c.Size-off))
	n := 0
	var reasons []string
	start := int(f.cur.Load())
	for k, failures := 0, 0; n < want && failures < len(f.srcs); k++ {
		i := (start + k) % len(f.srcs)
		src := f.srcs[i]
		r, err := f.open(src)
		if err == nil {
			var m int
			m, err = r.ReadAt(p[n:want], off+int64(n))
			n += m
			if m > 0 {
				failures = 0
				reasons = reasons[:0]
			}
			if n == want {
				if i != start {
					f.cur.Store(int32(i))
				}
				break
			}
			if err == nil || err == io.EOF {
				err = fmt.Errorf("ends at byte %d, the file has %d", off+int64(n), f.c.Size)
			}
		}
		failures++
		reasons = append(reasons, fmt.Sprintf("%s: %s", src.name(f.c), reason(err)))
	}
	if n < want {
		clear(p[n:want])
		return n, kerr.New(kerr.IO, "read", f.c.Path, fmt.Sprintf("bytes %d-%d: no copy could serve them (%s)",
			off+int64(n), off+int64(want)-1, strings.Join(reasons, "; ")))
	}
	if want < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *replicaFile) Close() error {
	for _, src := range f.srcs {
		src.mu.Lock()
		if src.local != nil {
			src.local.Close()
			src.local = nil
		}
		src.mu.Unlock()
	}
	return nil
}

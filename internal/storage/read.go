package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// File is an open committed file: a ReaderAt over its logical bytes,
// whatever the layout.
type File interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// remoteStripeReader reads a byte range of a stripe held by another server.
type remoteStripeReader struct {
	s   *Server
	ctx context.Context
	url string
}

func (r *remoteStripeReader) ReadAt(p []byte, off int64) (int, error) {
	req, _ := http.NewRequestWithContext(r.ctx, http.MethodGet, r.url, nil)
	req.Header.Set("Authorization", "Bearer "+r.s.cfg.Key.Internal())
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
	resp, err := r.s.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent, http.StatusOK:
	case http.StatusNotFound:
		return 0, syscall.ENOENT
	case http.StatusRequestedRangeNotSatisfiable:
		return 0, io.EOF
	default:
		return 0, fmt.Errorf("stripe read %s: HTTP %d", resp.Request.URL.Host, resp.StatusCode)
	}
	n, err := io.ReadFull(resp.Body, p)
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	return n, err
}

func (s *Server) stripeURL(t capability.Target, fid uint64, idx int, token string) string {
	return fmt.Sprintf("%s/kaon/v1/stripe/%x/%d?cap=%s", t.Addr, fid, idx, token)
}

// plainFile is a replica read from one physical file.
type plainFile struct {
	io.ReaderAt
	size  int64
	close func() error
}

func (p *plainFile) Size() int64  { return p.size }
func (p *plainFile) Close() error { return p.close() }

// Open opens the committed file a read capability names. Replicas are tried
// local first; an EC file is decoded from any K healthy stripes, once the
// memory its decoding needs is free (waiting up to wait).
func (s *Server) Open(ctx context.Context, c *capability.Capability, token string, wait time.Duration) (File, error) {
	l, err := layout.Parse(c.Layout)
	if err != nil {
		return nil, err
	}
	if len(c.Targets) == 0 && c.Size == 0 {
		return &plainFile{ReaderAt: strings.NewReader(""), close: func() error { return nil }}, nil
	}
	if l.Kind == layout.EC {
		release, err := s.budget.acquire(ctx, readMemory(l), wait, "read", c.Path)
		if err != nil {
			return nil, err
		}
		f, err := s.openEC(ctx, c, token, l)
		if err != nil {
			release()
			return nil, err
		}
		f.release = release
		return f, nil
	}
	// Replicas: local copies first, then remote ones.
	order := make([]int, 0, len(c.Targets))
	for i, t := range c.Targets {
		if s.local(t.FsID) != nil {
			order = append([]int{i}, order...)
		} else {
			order = append(order, i)
		}
	}
	var reasons []string
	for _, i := range order {
		t := c.Targets[i]
		if f := s.local(t.FsID); f != nil {
			file, err := os.Open(PhysPath(f.root, c.Fid))
			if err != nil {
				reasons = append(reasons, fmt.Sprintf("fs %d: %v", t.FsID, err))
				continue
			}
			if st, err := file.Stat(); err != nil || st.Size() != c.Size {
				file.Close()
				reasons = append(reasons, fmt.Sprintf("fs %d: size mismatch", t.FsID))
				continue
			}
			return &plainFile{ReaderAt: file, size: c.Size, close: file.Close}, nil
		}
		return &plainFile{ReaderAt: &remoteStripeReader{s: s, ctx: ctx, url: s.stripeURL(t, c.Fid, i, token)},
			size: c.Size, close: func() error { return nil }}, nil
	}
	return nil, kerr.New(kerr.Unavailable, "open", c.Path, "no readable replica: "+strings.Join(reasons, "; "))
}

// openEC opens the stripes of an erasure-coded file. Fewer than K
// reachable stripes fail here, before a client is told anything, rather
// than in the middle of a transfer.
func (s *Server) openEC(ctx context.Context, c *capability.Capability, token string, l layout.Layout) (*ecFile, error) {
	shards := make([]erasure.ShardReader, len(c.Targets))
	e := &ecFile{s: s, c: c}
	var reasons []string
	var remote []int
	avail := 0
	for i, t := range c.Targets {
		f := s.local(t.FsID)
		if f == nil {
			remote = append(remote, i)
			continue
		}
		file, err := os.Open(PhysPath(f.root, c.Fid))
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("stripe %d (fs %d): %v", i, t.FsID, errors.Unwrap(err)))
			continue
		}
		e.files = append(e.files, file)
		shards[i] = file
		avail++
	}
	if avail < l.K && len(remote) > 0 {
		// Not enough here: find out which remote stripes exist before
		// promising the file.
		errs := make([]error, len(c.Targets))
		var wg sync.WaitGroup
		for _, i := range remote {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = s.probeStripe(ctx, c.Targets[i], c.Fid, i, token) }()
		}
		wg.Wait()
		for _, i := range remote {
			if errs[i] != nil {
				reasons = append(reasons, fmt.Sprintf("stripe %d (fs %d): %v", i, c.Targets[i].FsID, errs[i]))
				remote = slices.DeleteFunc(remote, func(j int) bool { return j == i })
			}
		}
	}
	for _, i := range remote {
		shards[i] = &remoteStripeReader{s: s, ctx: ctx, url: s.stripeURL(c.Targets[i], c.Fid, i, token)}
		avail++
	}
	if avail < l.K {
		e.closeFiles()
		return nil, kerr.New(kerr.Unavailable, "open", c.Path, fmt.Sprintf("unrecoverable: %d of %d stripes readable, need %d (%s)",
			avail, len(c.Targets), l.K, strings.Join(reasons, "; ")))
	}
	r, err := erasure.NewReader(ecLayout(l), c.Size, shards)
	if err != nil {
		e.closeFiles()
		return nil, kerr.Wrap(kerr.IO, "open", c.Path, err)
	}
	r.SetName(c.Path)
	e.Reader = r
	return e, nil
}

// probeStripe asks the server holding stripe idx whether it has it.
func (s *Server) probeStripe(ctx context.Context, t capability.Target, fid uint64, idx int, token string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodHead, s.stripeURL(t, fid, idx, token), nil)
	req.Header.Set("Authorization", "Bearer "+s.cfg.Key.Internal())
	resp, err := s.http.Do(req)
	if err != nil {
		return errors.New("storage server unreachable")
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

type ecFile struct {
	*erasure.Reader
	s       *Server
	c       *capability.Capability
	files   []*os.File
	release func() // returns the decoding memory to the budget
}

// Close records stripes found missing or damaged while the file was read
// (and served by reconstruction): nothing else would notice them.
func (e *ecFile) Close() error {
	e.Reader.Close()
	e.closeFiles()
	e.release()
	if dmg := e.Damage(); len(dmg) > 0 {
		var parts []string
		for i := range e.c.Targets {
			if why, bad := dmg[i]; bad {
				parts = append(parts, fmt.Sprintf("stripe %d (fs %d): %s", i, e.c.Targets[i].FsID, why))
			}
		}
		e.s.log.Warn("erasure-coded file has damaged stripes; data was reconstructed", "path", e.c.Path,
			"fid", e.c.Fid, "damage", strings.Join(parts, "; "))
	}
	return nil
}

func (e *ecFile) closeFiles() {
	for _, f := range e.files {
		f.Close()
	}
	e.files = nil
}

package storage

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
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
// local first; an EC file is decoded from any K healthy stripes.
func (s *Server) Open(ctx context.Context, c *capability.Capability, token string) (File, error) {
	l, err := namespace.ParseLayout(c.Layout)
	if err != nil {
		return nil, err
	}
	if len(c.Targets) == 0 && c.Size == 0 {
		return &plainFile{ReaderAt: strings.NewReader(""), close: func() error { return nil }}, nil
	}
	if l.Kind == "ec" {
		shards := make([]erasure.ShardReader, len(c.Targets))
		var files []*os.File
		for i, t := range c.Targets {
			if f := s.local(t.FsID); f != nil {
				if file, err := os.Open(PhysPath(f.root, c.Fid)); err == nil {
					files = append(files, file)
					shards[i] = file
				}
				continue
			}
			shards[i] = &remoteStripeReader{s: s, ctx: ctx, url: s.stripeURL(t, c.Fid, i, token)}
		}
		r, err := erasure.NewReader(erasure.Layout{K: l.K, M: l.M, Unit: l.Unit}, c.Size, shards)
		if err != nil {
			return nil, kerr.Wrap(kerr.IO, "open", c.Path, err)
		}
		r.SetName(c.Path)
		return &ecFile{Reader: r, files: files}, nil
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
	return nil, kerr.New(kerr.IO, "open", c.Path, "no readable replica: "+strings.Join(reasons, "; "))
}

type ecFile struct {
	*erasure.Reader
	files []*os.File
}

func (e *ecFile) Close() error {
	e.Reader.Close()
	for _, f := range e.files {
		f.Close()
	}
	return nil
}

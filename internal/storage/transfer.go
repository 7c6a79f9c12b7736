package storage

import (
	"context"
	"io"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// Kaon's ends of a third-party copy (package transfer moves the bytes):
// a committed file read through this storage server, an upload through
// it as its entry (checksums computed while the bytes stream, nothing
// visible before commit), and an upload a root:// client already opened.
// They act on a capability the namespace service granted: the caller has
// been authorized there, never here.

// FileSource is the committed file a verified read capability c names
// (token: its signed form, for stripes on other servers) as a transfer
// source; it vouches for the checksums recorded at write time. wait
// bounds the wait for stream memory (EC reads).
func (s *Server) FileSource(c *capability.Capability, token string, wait time.Duration) transfer.Source {
	return fileSource{s: s, c: c, token: token, wait: wait}
}

type fileSource struct {
	s     *Server
	c     *capability.Capability
	token string
	wait  time.Duration
}

func (f fileSource) String() string { return "kaon:" + f.c.Path }

func (f fileSource) Open(ctx context.Context) (transfer.Reader, error) {
	sf, err := f.s.Open(ctx, f.c, f.token, f.wait)
	if err != nil {
		return nil, err
	}
	return &fileReader{Reader: io.NewSectionReader(sf, 0, f.c.Size), f: sf, c: f.c}, nil
}

type fileReader struct {
	io.Reader
	f File
	c *capability.Capability
}

func (r *fileReader) Close() error                 { return r.f.Close() }
func (r *fileReader) Size() int64                  { return r.c.Size }
func (r *fileReader) Checksums() map[string]string { return r.c.Sums }

// UploadDest is the new file a verified write capability c names as a
// transfer destination; its Create starts the upload (claiming the
// capability: it is good for one).
func (s *Server) UploadDest(c *capability.Capability, token string, wait time.Duration) transfer.Destination {
	return uploadDest{s: s, c: c, token: token, wait: wait}
}

type uploadDest struct {
	s     *Server
	c     *capability.Capability
	token string
	wait  time.Duration
}

func (u uploadDest) String() string { return "kaon:" + u.c.Path }

func (u uploadDest) Create(ctx context.Context, size int64) (transfer.Writer, error) {
	up, err := u.s.NewUpload(ctx, u.c, u.token, u.wait)
	if err != nil {
		return nil, err
	}
	return uploadWriter{up}, nil
}

type uploadWriter struct{ u *Upload }

var _ transfer.Hasher = uploadWriter{}

func (w uploadWriter) Write(p []byte) (int, error)      { return w.u.Write(p) }
func (w uploadWriter) Commit(ctx context.Context) error { return w.u.Commit(ctx) }
func (w uploadWriter) Abort(ctx context.Context)        { w.u.Abort(ctx) }
func (w uploadWriter) Computes(typ string) bool         { return w.u.Computes(typ) }
func (w uploadWriter) Sum(typ string) string            { return w.u.Sums()[typ] }

// CopyDest is u, an upload of path a client opened (root://: written at
// offsets, committed by the client's close), as the destination of a
// third-party copy the client asked for: the copy writes it from offset
// 0, and its Commit only ends the copy.
func (u *Upload) CopyDest(path string) transfer.Destination { return filledUpload{u: u, path: path} }

type filledUpload struct {
	u    *Upload
	path string
}

func (d filledUpload) String() string { return "kaon:" + d.path }
func (d filledUpload) Create(context.Context, int64) (transfer.Writer, error) {
	return &offsetWriter{u: d.u}, nil
}

type offsetWriter struct {
	u   *Upload
	off int64
}

var _ transfer.Hasher = (*offsetWriter)(nil)

func (w *offsetWriter) Write(p []byte) (int, error) {
	n, err := w.u.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}
func (w *offsetWriter) Commit(context.Context) error { return nil }
func (w *offsetWriter) Abort(context.Context)        {}
func (w *offsetWriter) Computes(typ string) bool     { return w.u.Computes(typ) }
func (w *offsetWriter) Sum(typ string) string        { return w.u.Sums()[typ] }

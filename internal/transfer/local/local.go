// Package local is the Kaon end of a transfer: a committed file read
// through a storage server, and an upload through a storage server as its
// entry (checksums computed while the bytes stream, nothing visible before
// commit). Both act on a capability the namespace service granted: the
// caller has been authorized there, never here.
package local

import (
	"context"
	"io"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/storage"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// File is a committed Kaon file as a transfer source.
type File struct {
	S     *storage.Server
	Cap   *capability.Capability // a verified read capability
	Token string                 // its signed form (for stripes on other servers)
	Wait  time.Duration          // how long to wait for stream memory (EC reads)
}

var _ transfer.Source = File{}

func (f File) String() string { return "kaon:" + f.Cap.Path }

// Open opens the file; it vouches for the checksums recorded at write time.
func (f File) Open(ctx context.Context) (transfer.Reader, error) {
	sf, err := f.S.Open(ctx, f.Cap, f.Token, f.Wait)
	if err != nil {
		return nil, err
	}
	return &fileReader{Reader: io.NewSectionReader(sf, 0, f.Cap.Size), f: sf, c: f.Cap}, nil
}

type fileReader struct {
	io.Reader
	f storage.File
	c *capability.Capability
}

func (r *fileReader) Close() error                 { return r.f.Close() }
func (r *fileReader) Size() int64                  { return r.c.Size }
func (r *fileReader) Checksums() map[string]string { return r.c.Sums }

// Upload is a new Kaon file as a transfer destination.
type Upload struct {
	S     *storage.Server
	Cap   *capability.Capability // a verified write capability
	Token string
	Wait  time.Duration // how long to wait for stream memory
}

var _ transfer.Destination = Upload{}

func (u Upload) String() string { return "kaon:" + u.Cap.Path }

// Create starts the upload (claiming the capability: it is good for one).
func (u Upload) Create(ctx context.Context, size int64) (transfer.Writer, error) {
	up, err := u.S.NewUpload(ctx, u.Cap, u.Token, u.Wait)
	if err != nil {
		return nil, err
	}
	return uploadWriter{up}, nil
}

type uploadWriter struct{ u *storage.Upload }

var _ transfer.Hasher = uploadWriter{}

func (w uploadWriter) Write(p []byte) (int, error)      { return w.u.Write(p) }
func (w uploadWriter) Commit(ctx context.Context) error { return w.u.Commit(ctx) }
func (w uploadWriter) Abort(ctx context.Context)        { w.u.Abort(ctx) }
func (w uploadWriter) Computes(typ string) bool         { return w.u.Computes(typ) }
func (w uploadWriter) Sum(typ string) string            { return w.u.Sums()[typ] }

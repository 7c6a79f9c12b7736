package storage

import (
	"context"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// background lets copies that give way to clients (a rebuild at its
// default rate: message.MoveOrder.Yield) do their I/O. While no client
// stream (a read or an upload) is open on this storage server they run
// at full speed, as many as they are. While one is, their calls (each
// read and write of a piece, each frame of a decoded stripe, each
// finish) run one at a time on this server, each followed by a pause
// twice as long as it took: background copies take at most a third of
// the time, and the clients' streams have the rest of the devices
// (Ceph's mClock profiles reserve a share for clients the same way; a
// pause as long as the call left clients about half their rate on a
// loaded machine, docs/DESIGN-NOTES.md).
type background struct {
	clients atomic.Int64 // client streams open now
	slot    chan struct{}
	now     func() time.Time
	pause   func(ctx context.Context, d time.Duration)
}

func newBackground() *background {
	return &background{slot: make(chan struct{}, 1), now: time.Now, pause: func(ctx context.Context, d time.Duration) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}}
}

// client counts a client stream until the returned function is called
// (more calls do nothing).
func (b *background) client() func() {
	b.clients.Add(1)
	var once sync.Once
	return func() { once.Do(func() { b.clients.Add(-1) }) }
}

// yieldPause is how many times as long as its call a copy that gives
// way pauses while a client stream is open.
const yieldPause = 2

// do runs one I/O call of a copy that gives way (above).
func (b *background) do(ctx context.Context, fn func() error) error {
	if b.clients.Load() == 0 {
		return fn()
	}
	select {
	case b.slot <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	defer func() { <-b.slot }()
	start := b.now()
	err := fn()
	b.pause(ctx, yieldPause*b.now().Sub(start))
	return err
}

// yieldingReader is a copy's source reading through b.
type yieldingReader struct {
	transfer.Reader
	ctx context.Context
	b   *background
}

func (r yieldingReader) Read(p []byte) (n int, err error) {
	err = r.b.do(r.ctx, func() error {
		var rerr error
		n, rerr = r.Reader.Read(p)
		return rerr
	})
	return n, err
}

// yieldingShard is a shard a decoder reads through b.
type yieldingShard struct {
	erasure.ShardReader
	ctx context.Context
	b   *background
}

func (r yieldingShard) ReadAt(p []byte, off int64) (n int, err error) {
	err = r.b.do(r.ctx, func() error {
		var rerr error
		n, rerr = r.ShardReader.ReadAt(p, off)
		return rerr
	})
	return n, err
}

// yieldingDest is a copy's destination writing through b.
type yieldingDest struct {
	transfer.Destination
	b *background
}

func (d yieldingDest) Create(ctx context.Context, size int64) (transfer.Writer, error) {
	w, err := d.Destination.Create(ctx, size)
	if err != nil {
		return nil, err
	}
	return &yieldingWriter{Writer: w, ctx: ctx, b: d.b}, nil
}

type yieldingWriter struct {
	transfer.Writer
	ctx context.Context
	b   *background
}

func (w *yieldingWriter) Write(p []byte) (n int, err error) {
	err = w.b.do(w.ctx, func() error {
		var werr error
		n, werr = w.Writer.Write(p)
		return werr
	})
	return n, err
}

func (w *yieldingWriter) Commit(ctx context.Context) error {
	return w.b.do(ctx, func() error { return w.Writer.Commit(ctx) })
}

var _ io.ReaderAt = yieldingShard{}

// Open opens the committed file a read capability names (open) for a
// client: a client stream until it is closed, which background copies
// give way to.
func (s *Server) Open(ctx context.Context, c *capability.Capability, token string, wait time.Duration) (File, error) {
	f, err := s.open(ctx, c, token, wait)
	if err != nil {
		return nil, err
	}
	cf := &clientFile{File: f, done: s.bg.client()}
	if of, ok := f.(backend.OSFile); ok {
		return clientOSFile{cf, of}, nil // sendfile still applies
	}
	return cf, nil
}

// clientFile is a File a client reads.
type clientFile struct {
	File
	done func()
}

func (f *clientFile) Close() error {
	f.done()
	return f.File.Close()
}

type clientOSFile struct {
	*clientFile
	os backend.OSFile
}

func (f clientOSFile) OSFile() *os.File { return f.os.OSFile() }

// unwrapClient is the File a client's File reads.
func unwrapClient(f File) File {
	switch c := f.(type) {
	case *clientFile:
		return c.File
	case clientOSFile:
		return c.File
	}
	return f
}

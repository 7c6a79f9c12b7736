package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// DefaultStreamMemory bounds the buffers of all client streams of one
// storage server together: 85 plain uploads or 13 ec:4+2 uploads at once
// by default; more wait for a place (on two cores more would not go
// faster, only use more memory).
const DefaultStreamMemory = 256 << 20

// budget admits streams while their buffers fit in a fixed amount of
// memory; the others wait in arrival order (back-pressure, not growth).
// Memory beyond a stream's minimum (extra) is lent only to one of the
// first few streams (extraStreams) and only while half the budget stays
// free: streams that came first must neither take what later ones need to
// run at all nor get a bigger share of the device than them.
//
// Stripe transfers this server serves for other servers' streams (stripes
// received, verified stripes sent) are charged without waiting: they may
// overdraw the budget (debt), which the next releases pay back before
// anyone else is admitted. Waiting there could deadlock: an entry stream
// whose stripe waits here for memory stalls all its stripes (the erasure
// writer keeps only a few rows in flight), including those other servers
// hold memory for while their own streams wait on it.
type budget struct {
	sem     *semaphore.Weighted
	total   int64
	used    atomic.Int64 // reserved and charged now
	peak    atomic.Int64 // most used has been (tests)
	streams atomic.Int64 // holding memory now
	mu      sync.Mutex
	debt    int64 // charged beyond the semaphore, paid back by releases
}

// extraStreams is how many streams at once may hold extra memory. Extra
// buffers (a second write in flight) keep the device busy for a stream
// that is alone on it; with more streams the others keep it busy, and a
// stream with two writes in flight would get twice the share of one with
// one (measured: 32 streams onto RADOS, about a third of them with
// overlapped writers: p99/avg 1.09–1.11; the first two only: 1.05–1.06;
// the same streams straight into ceph-fuse: 1.01–1.04).
const extraStreams = 2

func newBudget(total int64) *budget {
	if total <= 0 {
		total = DefaultStreamMemory
	}
	return &budget{sem: semaphore.NewWeighted(total), total: total}
}

// acquire reserves n bytes for one stream, waiting at most wait (and
// while ctx lives). The release function is safe to call more than once.
func (b *budget) acquire(ctx context.Context, n int64, wait time.Duration, op, path string) (func(), error) {
	n = min(max(n, 1), b.total) // a stream bigger than the budget runs alone
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := b.sem.Acquire(ctx, n); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, kerr.New(kerr.Busy, op, path, fmt.Sprintf("server busy: the stream memory budget (%d MiB) is in use, try again", b.total>>20))
		}
		return nil, kerr.New(kerr.Busy, op, path, "request cancelled while waiting for stream memory")
	}
	b.streams.Add(1)
	release := b.held(n)
	return func() {
		if release != nil {
			b.streams.Add(-1)
			release()
			release = nil
		}
	}, nil
}

// extra reserves n more bytes for a stream that holds its minimum, if at
// most extraStreams streams hold memory, that leaves at least half the
// budget free and no stream waits; ok is false otherwise (the stream then
// runs with its minimum).
func (b *budget) extra(n int64) (release func(), ok bool) {
	if n <= 0 || b.streams.Load() > extraStreams || b.used.Load()+n > b.total/2 || !b.sem.TryAcquire(n) {
		return nil, false
	}
	return b.held(n), true
}

// charge counts n bytes of a stripe transfer at once, overdrawing the
// budget if it is full (see budget).
func (b *budget) charge(n int64) func() {
	if n <= 0 {
		return func() {}
	}
	if b.sem.TryAcquire(n) {
		return b.held(n)
	}
	b.mu.Lock()
	b.debt += n
	b.mu.Unlock()
	return b.held(n)
}

func (b *budget) held(n int64) func() {
	b.addUsed(n)
	released := false
	return func() {
		if released {
			return
		}
		released = true
		b.addUsed(-n)
		b.mu.Lock()
		pay := min(n, b.debt)
		b.debt -= pay
		b.mu.Unlock()
		if n > pay {
			b.sem.Release(n - pay)
		}
	}
}

func (b *budget) addUsed(n int64) {
	v := b.used.Add(n)
	for p := b.peak.Load(); v > p && !b.peak.CompareAndSwap(p, v); p = b.peak.Load() {
	}
}

// StreamMemory is the budget of the server's client streams in bytes.
func (s *Server) StreamMemory() int64 { return s.budget.total }

// connMemory is what the connection of a client stream holds beside the
// stream's own buffers, counted with them: the HTTP/1.1 connection's
// reader and writer (4 KiB each), an HTTP/2 stream's write buffer and
// frames, the handler goroutine's stack, the capability and headers.
const connMemory = 64 << 10

// stripeMemory is what serving a stripe transfer holds: a stripe received
// for another server's upload (its writer's buffers and the copy buffer),
// or a verified stripe sent (a piece read whole before it is sent).
func stripeMemory(writer int64) int64 { return writer + copyBufSize }

// copyBufSize is the piece size uploads are copied in (copyFull).
const copyBufSize = 1 << 20

// uploadMemory is what one upload through this server as its entry holds:
// the copy buffer, the buffers of its local stripe writers (stripes, as
// their stores report) and, for EC, the rows in the encoding pipeline.
func uploadMemory(l layout.Layout, stripes int64) int64 {
	if l.Kind == layout.EC {
		return connMemory + copyBufSize + stripes + erasure.WriterMemory(ecLayout(l))
	}
	return connMemory + copyBufSize + stripes
}

// createOptions is how the stripes of layout l are written: the erasure
// writer already runs one goroutine per stripe; replicas and plain files
// are written from the client's goroutine and overlap device and network.
// Erasure-coded stripes are framed (a crc32c per frame): their stores
// keep no block sums.
func createOptions(l layout.Layout) backend.CreateOptions {
	return backend.CreateOptions{Overlap: l.Kind != layout.EC, Framed: l.Kind == layout.EC}
}

// framed is how a stripe of a file of layout layoutText is written when
// it is copied or rebuilt (overlapped; erasure-coded stripes framed).
func framed(layoutText string) backend.CreateOptions {
	l, _ := layout.Parse(layoutText)
	return backend.CreateOptions{Overlap: true, Framed: l.Kind == layout.EC}
}

// admitUpload reserves the memory of an upload whose local stripes are on
// stores, in arrival order with the other streams. Streams share the
// budget: an upload waits only for the memory of lean stripe writers, and
// gets overlapped ones (more buffers: a RADOS writer keeps writes in
// flight) only when the budget lends it the difference. Waiting for the
// larger amount instead made late streams wait for whole earlier uploads
// (measured: 32 streams onto RADOS, 13 MiB each against the 256 MiB
// budget, p99/avg 1.22–1.34 where the same streams straight into
// ceph-fuse had 1.01–1.04), while the device is shared by every admitted
// stream anyway.
func (s *Server) admitUpload(ctx context.Context, l layout.Layout, stores []backend.Store, wait time.Duration, path string) (func(), backend.CreateOptions, error) {
	mem := func(o backend.CreateOptions) int64 {
		var n int64
		for _, st := range stores {
			n += st.WriteMemory(o)
		}
		return uploadMemory(l, n)
	}
	opts := createOptions(l)
	lean := backend.CreateOptions{Framed: opts.Framed}
	full, least := mem(opts), mem(lean)
	if !opts.Overlap || least >= full {
		release, err := s.budget.acquire(ctx, full, wait, "write", path)
		return release, opts, err
	}
	release, err := s.budget.acquire(ctx, least, wait, "write", path)
	if err != nil {
		return nil, opts, err
	}
	more, ok := s.budget.extra(full - least)
	if !ok {
		return release, lean, nil
	}
	return func() { more(); release() }, opts, nil
}

// readMemory is what one EC read holds: the decoded rows it caches (data
// frames; parity only when repairing), the piece a range is served in
// (cluster.ServeContent) and its connection. Replica reads stream from
// the file.
func readMemory(l layout.Layout) int64 {
	if l.Kind != layout.EC {
		return 0
	}
	return erasure.ReaderMemory(ecLayout(l)) + pieceSize + connMemory
}

func ecLayout(l layout.Layout) erasure.Layout { return erasure.FromLayout(l) }

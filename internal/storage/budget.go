package storage

import (
	"context"
	"errors"
	"fmt"
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
type budget struct {
	sem   *semaphore.Weighted
	total int64
}

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
	released := false
	return func() {
		if !released {
			released = true
			b.sem.Release(n)
		}
	}, nil
}

// StreamMemory is the budget of the server's client streams in bytes.
func (s *Server) StreamMemory() int64 { return s.budget.total }

// copyBufSize is the piece size uploads are copied in (copyFull).
const copyBufSize = 1 << 20

// uploadMemory is what one upload through this server as its entry holds:
// the copy buffer, the buffers of its local stripe writers (stripes, as
// their stores report) and, for EC, the rows in the encoding pipeline.
func uploadMemory(l layout.Layout, stripes int64) int64 {
	if l.Kind == layout.EC {
		return copyBufSize + stripes + erasure.WriterMemory(ecLayout(l))
	}
	return copyBufSize + stripes
}

// createOptions is how the stripes of layout l are written: the erasure
// writer already runs one goroutine per stripe; replicas and plain files
// are written from the client's goroutine and overlap device and network.
func createOptions(l layout.Layout) backend.CreateOptions {
	return backend.CreateOptions{Overlap: l.Kind != layout.EC}
}

// readMemory is what one EC read holds: the decoded rows it caches (data
// frames; parity only when repairing). Replica reads stream from the file.
func readMemory(l layout.Layout) int64 {
	if l.Kind != layout.EC {
		return 0
	}
	return erasure.ReaderMemory(ecLayout(l))
}

func ecLayout(l layout.Layout) erasure.Layout { return erasure.FromLayout(l) }

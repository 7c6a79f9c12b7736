package storage

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/memstore"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/layout"
)

// gatedStore is a slow backend: every stripe write waits for a token from
// the test, and stripe writers with Overlap claim a RADOS writer's buffers
// (8 MiB) while lean ones claim none.
type gatedStore struct {
	*memstore.Store
	gate    chan struct{}
	arrived chan uint64 // a write is waiting at the gate (its fid)
	wrote   chan uint64 // a write went through (its fid)

	mu      sync.Mutex
	overlap map[uint64]bool
}

const gatedOverlapMemory = 8 << 20

func (g *gatedStore) WriteMemory(o backend.CreateOptions) int64 {
	if o.Overlap {
		return gatedOverlapMemory
	}
	return 0
}

func (g *gatedStore) Create(fid uint64, o backend.CreateOptions) (backend.Writer, error) {
	w, err := g.Store.Create(fid, o)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.overlap[fid] = o.Overlap
	g.mu.Unlock()
	return &gatedWriter{Writer: w, g: g, fid: fid}, nil
}

type gatedWriter struct {
	backend.Writer
	g   *gatedStore
	fid uint64
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	w.g.arrived <- w.fid
	<-w.g.gate
	n, err := w.Writer.Write(p)
	w.g.wrote <- w.fid
	return n, err
}

// TestStreamsShareBudgetFairly: more parallel uploads than the stream
// memory budget holds with overlapped writers all run at once (all but the
// first few with lean writers) instead of queueing behind whole uploads,
// and a slow backend then serves them in turn: their progress never
// drifts apart by more than a piece or two. Before uploads fell back to
// lean writers, only the four the budget held with overlapped writers
// reached the store until those had committed.
func TestStreamsShareBudgetFairly(t *testing.T) {
	const streams, pieces = 8, 4
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	g := &gatedStore{Store: memstore.New("slow"), gate: make(chan struct{}), arrived: make(chan uint64, streams),
		wrote: make(chan uint64), overlap: map[uint64]bool{}}
	s, err := New(Config{Node: "n", Addr: "http://unused", Key: key, Namespace: &fakeNS{}, Paths: []string{"slow"},
		Store: func(string) (backend.Store, error) { return g, nil }})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the first heartbeat reply initializes the filesystem
		if _, _, err := s.beat(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := layout.Parse("plain")
	full := uploadMemory(l, gatedOverlapMemory)
	s.budget = newBudget(4 * full) // four uploads with overlapped writers, or many lean ones

	errs := make(chan error, streams)
	start := func(fid uint64) {
		go func() {
			c := writeCap(fid, "plain", 1)
			u, err := s.NewUpload(context.Background(), c, key.Sign(c), time.Minute)
			if err != nil {
				errs <- err
				return
			}
			for k := 0; k < pieces; k++ {
				if _, err := u.Write([]byte(fmt.Sprintf("piece %d of %d", k, fid))); err != nil {
					errs <- err
					return
				}
			}
			errs <- u.Commit(context.Background())
		}()
	}
	// Every stream is admitted and reaches the store before any byte is
	// written (the gate is closed until then); the first, alone, with
	// overlapped writers.
	waiting := map[uint64]bool{}
	deadline := time.After(20 * time.Second)
	arrive := func(n int) {
		for len(waiting) < n {
			select {
			case fid := <-g.arrived:
				waiting[fid] = true
			case err := <-errs:
				t.Fatalf("a stream ended before every stream was admitted: %v", err)
			case <-deadline:
				t.Fatalf("waiting for %d streams to reach the store: only %d did (the others were not admitted while the first held the budget)", n, len(waiting))
			}
		}
	}
	start(100)
	arrive(1)
	for i := 1; i < streams; i++ {
		start(uint64(100 + i))
	}
	arrive(streams)
	g.mu.Lock()
	overlapped := 0
	for _, o := range g.overlap {
		if o {
			overlapped++
		}
	}
	alone := g.overlap[100]
	g.mu.Unlock()
	if !alone || overlapped > extraStreams {
		t.Errorf("overlapped writers: the first stream %v (want true), %d in all (want at most %d: more would take a bigger share of the device)", alone, overlapped, extraStreams)
	}
	// The slow backend takes one write at a time; count each stream's.
	progress := map[uint64]int{}
	for step := 0; step < streams*pieces; step++ {
		select {
		case g.gate <- struct{}{}:
		case <-time.After(20 * time.Second):
			t.Fatalf("step %d: no stream waiting at the store (progress %v)", step, progress)
		}
		// Wait for the write let through and for its stream to be back at
		// the store (or done), so that the order of the streams at the gate
		// is theirs and not the Go scheduler's (a goroutine woken by a
		// channel send runs before others that are ready).
		var fid uint64
		select {
		case fid = <-g.wrote:
			progress[fid]++
		case <-time.After(20 * time.Second):
			t.Fatalf("step %d: the write let through did not complete", step)
		}
		if progress[fid] < pieces {
			select {
			case <-g.arrived:
			case <-time.After(20 * time.Second):
				t.Fatalf("step %d: stream %d did not come back to the store after its write %d", step, fid, progress[fid])
			}
		}
		lo, hi := pieces, 0
		for i := 0; i < streams; i++ {
			lo, hi = min(lo, progress[uint64(100+i)]), max(hi, progress[uint64(100+i)])
		}
		if hi-lo > 2 {
			t.Fatalf("after %d writes the streams' progress drifted apart: %v", step+1, progress)
		}
	}
	for i := 0; i < streams; i++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("waiting for the commits: %d of %d streams ended", i, streams)
		}
	}
	if release, ok := s.budget.extra(s.budget.total / 2); !ok || s.budget.used.Load() != s.budget.total/2 {
		t.Fatal("the budget was not given back after every upload committed")
	} else {
		release()
	}
}

package pebblekv

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/kvtest"
)

func TestSuite(t *testing.T) {
	dirs := map[kv.Engine]string{}
	open := func(t *testing.T) kv.Engine {
		dir := t.TempDir()
		e, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		dirs[e] = dir
		return e
	}
	reopen := func(t *testing.T, e kv.Engine) kv.Engine {
		dir := dirs[e]
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e2, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e2.Close() })
		return e2
	}
	kvtest.Run(t, open, reopen)
}

// History starts at Open: a watcher holding a revision from before a
// restart is told to reload instead of silently missing commits.
func TestWatchFromBeforeReopenIsCompacted(t *testing.T) {
	dir := t.TempDir()
	e, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := e.NewBatch()
	b.Put([]byte("k"), []byte("v"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	s, _ := e.Snapshot(context.Background())
	rev := s.Revision()
	s.Close()
	e.Close()
	if e, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, ok := <-e.Watch(ctx, nil, rev)
	if !ok || !errors.Is(r.Err, kv.ErrCompacted) {
		t.Fatalf("watch from %d after reopen: %+v (open %v), want ErrCompacted", rev, r, ok)
	}
}

func BenchmarkEngine(b *testing.B) {
	for _, c := range []struct {
		name string
		opts Options
	}{{"sync", Options{}}, {"nosync", Options{NoSync: true}}} {
		b.Run(c.name, func(b *testing.B) {
			kvtest.Bench(b, func(b *testing.B) kv.Engine {
				e, err := Open(b.TempDir(), c.opts)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { e.Close() })
				return e
			}, !c.opts.NoSync)
		})
	}
}

// Barrier after a batch applied without sync returns (the log synced:
// that it reaches the disk needs a power cut to show, not done here) and
// the batch is there after a reopen; a closed engine's barrier says so.
func TestBarrier(t *testing.T) {
	dir := t.TempDir()
	e, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := e.NewBatch()
	b.Put([]byte("k"), []byte("v"))
	if _, err := b.Apply(false); err != nil {
		t.Fatal(err)
	}
	if err := e.Barrier(context.Background()); err != nil {
		t.Fatalf("barrier: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Barrier(context.Background()); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("barrier of a closed engine: %v, want closed", err)
	}
	e, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if v, err := e.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("after the barrier and a reopen: %q, %v", v, err)
	}
}

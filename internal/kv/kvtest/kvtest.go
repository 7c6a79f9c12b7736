// Package kvtest is the shared conformance suite every kv.Engine must pass:
// basic reads and batches (this file), transactions (txn.go), snapshots,
// conditional commits and the change feed (feed.go), and a benchmark that
// compares engines (bench.go).
package kvtest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/kaon-storage/kaon/internal/kv"
)

// Run runs the suite; open returns a fresh, empty engine. reopen, when not
// nil, closes and reopens the same store (persistence check).
func Run(t *testing.T, open func(t *testing.T) kv.Engine, reopen func(t *testing.T, e kv.Engine) kv.Engine) {
	t.Run("GetMissing", func(t *testing.T) {
		e := open(t)
		if _, err := e.Get([]byte("nope")); !errors.Is(err, kv.ErrNotFound) {
			t.Fatalf("Get missing: %v, want ErrNotFound", err)
		}
	})
	t.Run("BatchAtomicVisibility", func(t *testing.T) {
		e := open(t)
		b := e.NewBatch()
		b.Put([]byte("a"), []byte("1"))
		b.Put([]byte("b"), []byte("2"))
		if _, err := e.Get([]byte("a")); !errors.Is(err, kv.ErrNotFound) {
			t.Fatal("uncommitted write visible")
		}
		if err := b.Commit(false); err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]string{"a": "1", "b": "2"} {
			v, err := e.Get([]byte(k))
			if err != nil || string(v) != want {
				t.Fatalf("Get %s = %q, %v", k, v, err)
			}
		}
		b = e.NewBatch()
		b.Put([]byte("c"), []byte("3"))
		b.Discard()
		if _, err := e.Get([]byte("c")); !errors.Is(err, kv.ErrNotFound) {
			t.Fatal("discarded batch visible")
		}
	})
	t.Run("OverwriteDelete", func(t *testing.T) {
		e := open(t)
		put(t, e, "k", "v1")
		put(t, e, "k", "v2")
		if v, _ := e.Get([]byte("k")); string(v) != "v2" {
			t.Fatalf("overwrite: %q", v)
		}
		b := e.NewBatch()
		b.Delete([]byte("k"))
		b.Delete([]byte("never-existed"))
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Get([]byte("k")); !errors.Is(err, kv.ErrNotFound) {
			t.Fatal("deleted key still present")
		}
	})
	t.Run("ApplyThenWait", func(t *testing.T) {
		e := open(t)
		b := e.NewBatch()
		b.Put([]byte("x"), []byte("1"))
		wait, err := b.Apply(true)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := e.Get([]byte("x")); err != nil || string(v) != "1" {
			t.Fatalf("applied batch not visible before wait: %q %v", v, err)
		}
		if err := wait(); err != nil {
			t.Fatal(err)
		}
		b.Discard() // no-op after Apply
	})
	t.Run("GetReturnsCopy", func(t *testing.T) {
		e := open(t)
		put(t, e, "k", "value")
		v, _ := e.Get([]byte("k"))
		v[0] = 'X'
		if v2, _ := e.Get([]byte("k")); string(v2) != "value" {
			t.Fatal("Get result aliases engine memory")
		}
	})
	t.Run("ScanOrderAndBounds", func(t *testing.T) {
		e := open(t)
		for _, k := range []string{"p/c", "p/a", "q", "p/b", "o", "p/\xff"} {
			put(t, e, k, "v"+k)
		}
		var got []string
		if err := e.Scan([]byte("p/"), kv.PrefixEnd([]byte("p/")), func(k, v []byte) bool {
			if !bytes.Equal(v, append([]byte("v"), k...)) {
				t.Errorf("value of %q = %q", k, v)
			}
			got = append(got, string(k))
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint([]string{"p/a", "p/b", "p/c", "p/\xff"}) {
			t.Fatalf("scan = %q", got)
		}
		n := 0
		_ = e.Scan([]byte("a"), nil, func(k, v []byte) bool { n++; return n < 2 })
		if n != 2 {
			t.Fatalf("early stop: %d callbacks", n)
		}
	})
	t.Run("ConcurrentBatches", func(t *testing.T) {
		e := open(t)
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					b := e.NewBatch()
					b.Put([]byte(fmt.Sprintf("g%d/%04d", g, i)), []byte("x"))
					b.Put([]byte(fmt.Sprintf("h%d/%04d", g, i)), []byte("y"))
					if err := b.Commit(false); err != nil {
						t.Error(err)
						return
					}
				}
			}(g)
		}
		wg.Wait()
		n := 0
		_ = e.Scan(nil, nil, func(k, v []byte) bool { n++; return true })
		if n != 8*200*2 {
			t.Fatalf("got %d keys, want %d", n, 8*200*2)
		}
	})
	t.Run("BatchRevision", func(t *testing.T) {
		e := open(t)
		w := e.Watch(testCtx(t), []byte("r/"), 0)
		var revs []uint64
		for i := 0; i < 3; i++ {
			b := e.NewBatch()
			b.Put([]byte(fmt.Sprintf("r/%d", i)), []byte("x"))
			if b.Rev() != 0 {
				t.Fatalf("revision %d before commit", b.Rev())
			}
			if err := b.Commit(false); err != nil {
				t.Fatal(err)
			}
			revs = append(revs, b.Rev())
		}
		if !(revs[0] > 0 && revs[0] < revs[1] && revs[1] < revs[2]) {
			t.Fatalf("batch revisions %v: not increasing", revs)
		}
		if got := revision(t, e); got < revs[2] {
			t.Fatalf("snapshot revision %d is below the last batch's %d", got, revs[2])
		}
		for i, ev := range collect(t, w, 3, "events of the three batches") {
			if ev.Rev != revs[i] {
				t.Fatalf("event %d has revision %d, its batch said %d", i, ev.Rev, revs[i])
			}
		}
		b := e.NewBatch()
		if err := b.Commit(false); err != nil || b.Rev() != 0 {
			t.Fatalf("empty batch: revision %d, %v; want 0", b.Rev(), err)
		}
	})
	runTxn(t, open)
	runFeed(t, open)
	if reopen != nil {
		t.Run("Persistence", func(t *testing.T) {
			e := open(t)
			put(t, e, "durable", "yes")
			before := revision(t, e)
			e = reopen(t, e)
			if v, err := e.Get([]byte("durable")); err != nil || string(v) != "yes" {
				t.Fatalf("after reopen: %q, %v", v, err)
			}
			// Revisions keep growing across restarts: a watcher holding
			// one never mistakes later commits for ones it has seen.
			if after := revision(t, e); after < before {
				t.Fatalf("revision went back from %d to %d on reopen", before, after)
			}
			w := e.Watch(testCtx(t), nil, 0)
			put(t, e, "later", "1")
			if evs := collect(t, w, 1, "commit after reopen"); evs[0].Rev <= before {
				t.Fatalf("commit after reopen has revision %d, not above %d", evs[0].Rev, before)
			}
		})
	}
}

func put(t *testing.T, e kv.Engine, k, v string) {
	t.Helper()
	b := e.NewBatch()
	b.Put([]byte(k), []byte(v))
	if err := b.Commit(false); err != nil {
		t.Fatal(err)
	}
}

package kvtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kv"
)

func runFeed(t *testing.T, open func(t *testing.T) kv.Engine) {
	t.Run("SnapshotIsolation", func(t *testing.T) {
		e := open(t)
		ctx := testCtx(t)
		put(t, e, "a", "1")
		put(t, e, "c", "1")
		s, err := e.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		put(t, e, "a", "2")
		put(t, e, "b", "1")
		del(t, e, "c")
		if v, err := s.Get([]byte("a")); err != nil || string(v) != "1" {
			t.Fatalf("snapshot Get a = %q %v, want 1", v, err)
		}
		if _, err := s.Get([]byte("b")); !errors.Is(err, kv.ErrNotFound) {
			t.Fatalf("snapshot sees a later insert: %v", err)
		}
		if got := scanAll(t, s, "", ""); got != "a=1 c=1" {
			t.Fatalf("snapshot scan %q, want a=1 c=1", got)
		}
		if got := scanAll(t, e, "", ""); got != "a=2 b=1" {
			t.Fatalf("engine scan %q, want a=2 b=1", got)
		}
		s2, err := e.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer s2.Close()
		if s2.Revision() <= s.Revision() {
			t.Fatalf("revision did not grow over 3 commits: %d then %d", s.Revision(), s2.Revision())
		}
	})

	// A writer keeps p and q equal in every batch; no snapshot, engine scan
	// or transaction may see them differ.
	t.Run("SnapshotConsistentUnderWrites", func(t *testing.T) {
		e := open(t)
		ctx := testCtx(t)
		put(t, e, "p", "0")
		put(t, e, "q", "0")
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= 2000; i++ { // bounded: overwrites slow LSM scans down
				select {
				case <-stop:
					return
				default:
				}
				b := e.NewBatch()
				b.Put([]byte("p"), []byte(fmt.Sprint(i)))
				b.Put([]byte("q"), []byte(fmt.Sprint(i)))
				if err := b.Commit(false); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		defer func() { close(stop); wg.Wait() }()
		for i := 0; i < 50; i++ {
			s, err := e.Snapshot(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p, err1 := s.Get([]byte("p"))
			q, err2 := s.Get([]byte("q"))
			s.Close()
			if err := errors.Join(err1, err2); err != nil || string(p) != string(q) {
				t.Fatalf("snapshot saw p=%s q=%s (%v)", p, q, err)
			}
			if got := scanAll(t, e, "p", ""); !pairEqual(got) {
				t.Fatalf("engine scan saw %q", got)
			}
			if err := e.Txn(ctx, func(tx kv.Tx) error {
				p, _ := tx.Get([]byte("p"))
				time.Sleep(100 * time.Microsecond) // let the writer commit in between
				q, _ := tx.Get([]byte("q"))
				if string(p) != string(q) {
					return fmt.Errorf("transaction read p=%s q=%s", p, q)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("WatchOrderAndRevisions", func(t *testing.T) {
		e := open(t)
		ctx := testCtx(t)
		put(t, e, "w/c", "0")
		r0 := revision(t, e)
		w := e.Watch(ctx, []byte("w/"), r0+1)
		b := e.NewBatch()
		b.Put([]byte("w/b"), []byte("2"))
		b.Put([]byte("w/a"), []byte("1"))
		b.Delete([]byte("w/c"))
		b.Put([]byte("x/out"), []byte("9")) // outside the prefix
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
		if err := e.Txn(ctx, func(tx kv.Tx) error { tx.Put([]byte("w/d"), []byte("4")); return nil }); err != nil {
			t.Fatal(err)
		}
		del(t, e, "w/a")
		evs := collect(t, w, 5, "events of 3 commits")
		want := "put w/a=1, put w/b=2, del w/c | put w/d=4 | del w/a"
		if got := render(evs); got != want {
			t.Fatalf("events %q\nwant   %q", got, want)
		}
		r1, r2, r3 := evs[0].Rev, evs[3].Rev, evs[4].Rev
		if !(r0 < r1 && r1 < r2 && r2 < r3) {
			t.Fatalf("revisions not increasing: snapshot %d, commits %d %d %d", r0, r1, r2, r3)
		}
		if s := revision(t, e); s < r3 {
			t.Fatalf("snapshot revision %d below the last commit's %d", s, r3)
		}
		// From a past revision: only what came at or after it.
		if got := render(collect(t, e.Watch(ctx, []byte("w/"), r2), 2, "watch from r2")); got != "put w/d=4 | del w/a" {
			t.Fatalf("watch from %d: %q", r2, got)
		}
		// From now on (0), in order, over many commits.
		w0 := e.Watch(ctx, []byte("w/s"), 0)
		for i := 0; i < 30; i++ {
			put(t, e, fmt.Sprintf("w/s%02d", i), "v")
		}
		evs = collect(t, w0, 30, "30 single puts")
		for i, ev := range evs {
			if string(ev.Key) != fmt.Sprintf("w/s%02d", i) || (i > 0 && ev.Rev <= evs[i-1].Rev) || ev.Rev <= r3 {
				t.Fatalf("event %d: %s at %d (previous %d)", i, ev.Key, ev.Rev, evs[max(i-1, 0)].Rev)
			}
		}
	})

	t.Run("WatchEndsWithContext", func(t *testing.T) {
		e := open(t)
		ctx, cancel := context.WithCancel(context.Background())
		w := e.Watch(ctx, []byte("k"), 0)
		cancel()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case _, ok := <-w:
				if !ok {
					return
				}
			case <-deadline:
				t.Fatal("watch channel not closed 30s after its context was canceled")
			}
		}
	})

	t.Run("CondCommit", func(t *testing.T) {
		e := open(t)
		ctx := testCtx(t)
		guard := []byte("leader")
		put(t, e, "leader", "node1/term1")
		held := []kv.Cond{{Key: guard, Value: []byte("node1/term1")}}
		if err := e.TxnIf(ctx, held, func(tx kv.Tx) error { tx.Put([]byte("data"), []byte("1")); return nil }); err != nil {
			t.Fatalf("guard holds: %v", err)
		}
		put(t, e, "leader", "node2/term2") // node1 is deposed
		calls := 0
		err := e.TxnIf(ctx, held, func(tx kv.Tx) error {
			calls++
			tx.Put([]byte("data"), []byte("2"))
			tx.Delete([]byte("leader"))
			return nil
		})
		if !errors.Is(err, kv.ErrCondFailed) || calls != 1 {
			t.Fatalf("deposed leader's txn: %v after %d calls, want ErrCondFailed after 1", err, calls)
		}
		if got := scanAll(t, e, "", ""); got != "data=1 leader=node2/term2" {
			t.Fatalf("state after refused txn: %q", got)
		}
		if err := e.TxnIf(ctx, held, func(tx kv.Tx) error { _, _ = tx.Get([]byte("data")); return nil }); !errors.Is(err, kv.ErrCondFailed) {
			t.Fatalf("read-only txn with a failing guard: %v", err)
		}
		for _, c := range []struct {
			cond kv.Cond
			ok   bool
		}{
			{kv.Cond{Key: []byte("nokey"), Absent: true}, true},
			{kv.Cond{Key: guard, Absent: true}, false},
			{kv.Cond{Key: []byte("nokey"), Value: []byte{}}, false}, // absent is not empty
			{kv.Cond{Key: []byte("data"), Value: []byte("1")}, true},
		} {
			err := e.TxnIf(ctx, []kv.Cond{c.cond}, func(tx kv.Tx) error { tx.Put([]byte("probe"), c.cond.Key); return nil })
			if c.ok != (err == nil) || (!c.ok && !errors.Is(err, kv.ErrCondFailed)) {
				t.Fatalf("cond %+v: %v", c.cond, err)
			}
		}
		b := e.NewBatch()
		b.If(held...)
		b.Put([]byte("data"), []byte("3"))
		b.Delete([]byte("probe"))
		if err := b.Commit(true); !errors.Is(err, kv.ErrCondFailed) {
			t.Fatalf("guarded batch of a deposed leader: %v", err)
		}
		if v, _ := e.Get([]byte("data")); string(v) != "1" {
			t.Fatalf("refused batch applied: data = %q", v)
		}
		if _, err := e.Get([]byte("probe")); err != nil {
			t.Fatalf("refused batch applied its delete: %v", err)
		}
		b = e.NewBatch()
		b.If(kv.Cond{Key: guard, Value: []byte("node2/term2")})
		b.Put([]byte("data"), []byte("4"))
		if err := b.Commit(true); err != nil {
			t.Fatalf("guarded batch of the leader: %v", err)
		}
		if v, _ := e.Get([]byte("data")); string(v) != "4" {
			t.Fatalf("data = %q, want 4", v)
		}
	})

	t.Run("CloseEndsWatch", func(t *testing.T) {
		e := open(t)
		w := e.Watch(testCtx(t), []byte("k"), 0)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(30 * time.Second)
		for {
			select {
			case r, ok := <-w:
				if !ok {
					return
				}
				if r.Err == nil {
					t.Fatalf("event after close: %+v", r)
				}
			case <-deadline:
				t.Fatal("watch channel not closed 30s after the engine was closed")
			}
		}
	})
}

func pairEqual(scan string) bool {
	f := strings.Fields(scan)
	return len(f) == 2 && strings.TrimPrefix(f[0], "p=") == strings.TrimPrefix(f[1], "q=")
}

func revision(t *testing.T, e kv.Engine) uint64 {
	t.Helper()
	s, err := e.Snapshot(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return s.Revision()
}

// collect reads n events from w, failing with step if they do not come.
func collect(t *testing.T, w <-chan kv.WatchResponse, n int, step string) []kv.Event {
	t.Helper()
	var evs []kv.Event
	deadline := time.After(60 * time.Second)
	for len(evs) < n {
		select {
		case r, ok := <-w:
			if !ok {
				t.Fatalf("%s: watch closed after %d of %d events", step, len(evs), n)
			}
			if r.Err != nil {
				t.Fatalf("%s: watch failed after %d of %d events: %v", step, len(evs), n, r.Err)
			}
			evs = append(evs, r.Events...)
		case <-deadline:
			t.Fatalf("%s: got %d of %d events in 60s: %s", step, len(evs), n, render(evs))
		}
	}
	if len(evs) > n {
		t.Fatalf("%s: %d events, want %d: %s", step, len(evs), n, render(evs))
	}
	return evs
}

// render shows events as "put k=v, del k | ..." with "|" between commits.
func render(evs []kv.Event) string {
	var sb strings.Builder
	for i, ev := range evs {
		if i > 0 {
			if ev.Rev != evs[i-1].Rev {
				sb.WriteString(" | ")
			} else {
				sb.WriteString(", ")
			}
		}
		if ev.Delete {
			fmt.Fprintf(&sb, "del %s", ev.Key)
		} else {
			fmt.Fprintf(&sb, "put %s=%s", ev.Key, ev.Value)
		}
	}
	return sb.String()
}

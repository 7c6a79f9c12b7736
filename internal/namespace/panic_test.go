package namespace

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
)

// panicky is a store whose batches panic at Apply while boom is set, as
// Pebble does on some write errors (seen with a full disk).
type panicky struct {
	kv.Store
	boom atomic.Bool
}

type panickyBatch struct {
	kv.Batch
	s *panicky
}

func (p *panicky) NewBatch() kv.Batch { return panickyBatch{p.Store.NewBatch(), p} }

func (b panickyBatch) Apply(sync bool) (func() error, error) {
	if b.s.boom.Load() {
		panic("store: write failed")
	}
	return b.Batch.Apply(sync)
}

// TestPanicInCommitReleasesLock: a panic inside a mutation's commit
// (the HTTP server recovers a handler's panic and goes on serving) must
// not leave the namespace lock held — every later request hung behind it.
// The panic still reaches the caller; the next mutation works.
func TestPanicInCommitReleasesLock(t *testing.T) {
	st := &panicky{Store: memkv.New()}
	ns, err := Open(st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.boom.Store(true)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the store's panic did not reach the caller")
			}
		}()
		ns.Mkdir(Root, "/a", 0o755, false)
	}()
	st.boom.Store(false)
	done := make(chan error, 1)
	go func() { done <- ns.Mkdir(Root, "/b", 0o755, false) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("mkdir /b after the panic: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mkdir /b after a panic in /a's commit: no answer in 10 s (the namespace lock is still held)")
	}
	if _, err := ns.Stat(Root, "/a"); err == nil {
		t.Error("/a exists: its commit panicked")
	}
}

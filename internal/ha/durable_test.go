package ha

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// unreachableEngine refuses every commit as an etcd out of reach does
// (unavailable: the pipeline sends the group again until its retry ends)
// while down is set.
type unreachableEngine struct {
	*memkv.Engine
	down atomic.Bool
}

type unreachableBatch struct {
	kv.Batch
	e *unreachableEngine
}

func (e *unreachableEngine) NewBatch() kv.Batch { return &unreachableBatch{e.Engine.NewBatch(), e} }
func (b *unreachableBatch) Commit(sync bool) error {
	if b.e.down.Load() {
		return kerr.New(kerr.Unavailable, "commit", "", "shared engine unreachable")
	}
	return b.Batch.Commit(sync)
}

// place puts every file on fs 1.
func place(layout.Layout, string) ([]uint32, error) { return []uint32{1}, nil }

// activeNamespace is a namespace over an active server's pipeline (its
// replica fed by its commits) whose shared engine can be cut off.
func activeNamespace(t *testing.T) (*unreachableEngine, *namespace.Namespace) {
	t.Helper()
	remote := &unreachableEngine{Engine: memkv.New()}
	r := NewReplica(remote, memkv.New(), testLog)
	r.Pause() // as while active: the pipeline's commits feed it
	p := newPipeline(remote, r, kv.Cond{Key: []byte("lead"), Absent: true}, time.Second)
	t.Cleanup(p.Close)
	ns, err := namespace.Open(p, namespace.Options{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	return remote, ns
}

// A stripe is handed to its storage server for removal only once the
// mutation that queued it is committed to the shared engine. The active
// server sees its own mutations at once (the overlay), before their
// group is committed; a deletion handed out from there, by a server then
// cut from etcd, removed a stripe of a file the next active server still
// has — a replacing upload's commit lost with the failover, the file it
// replaced left with a replica gone (the chaos suite, seed 718141766).
func TestDeletionsWaitForTheirCommit(t *testing.T) {
	remote, ns := activeNamespace(t)
	create := func(path string) {
		t.Helper()
		f, err := ns.BeginCreate(namespace.Root, path, namespace.CreateOptions{Layout: "plain"}, place)
		if err == nil {
			_, err = ns.Commit(f.ID, 3, map[string]string{"adler32": "024d0127"})
		}
		if err != nil {
			t.Fatalf("create %s: %v", path, err)
		}
	}
	// Committed: handed out (the check below is not vacuous).
	create("/kept-gone")
	if err := ns.Remove(namespace.Root, "/kept-gone", namespace.RemoveOptions{NoRecycle: true}); err != nil {
		t.Fatal(err)
	}
	ds, err := ns.Deletions(1, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("deletions after a committed removal: %v (%v), want one", ds, err)
	}
	if err := ns.AckDeletions(ds); err != nil {
		t.Fatal(err)
	}

	create("/f")
	remote.down.Store(true)
	removed := make(chan error, 1)
	go func() { removed <- ns.Remove(namespace.Root, "/f", namespace.RemoveOptions{NoRecycle: true}) }()
	within(t, "the removal of /f applied to the active server's view", func() bool {
		_, err := ns.Stat(namespace.Root, "/f")
		return kerr.Is(err, kerr.NotFound)
	})
	ds, err = ns.Deletions(1, 10)
	if len(ds) != 0 {
		t.Fatalf("deletions while the removal is not committed: %v (%v), want none", ds, err)
	}
	if err == nil {
		t.Fatal("deletions of a pipeline that ended: no error")
	}
	select {
	case err := <-removed:
		if err == nil {
			t.Fatal("the removal that never reached the shared engine succeeded")
		}
	case <-time.After(time.Minute):
		t.Fatal("the removal did not end within a minute of the pipeline's end")
	}
}

// A commit sent again (its storage server lost the answer) is answered
// success only once the first is committed to the shared engine: the
// active server sees the file at once, and an answer from there, by a
// server then cut from etcd, acknowledged an upload the next active
// server never had.
func TestRepeatedCommitWaitsForTheFirst(t *testing.T) {
	remote, ns := activeNamespace(t)
	f, err := ns.BeginCreate(namespace.Root, "/f", namespace.CreateOptions{Layout: "plain"}, place)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{"adler32": "024d0127"}
	remote.down.Store(true)
	first := make(chan error, 1)
	go func() { _, err := ns.Commit(f.ID, 3, sums); first <- err }()
	within(t, "the first commit applied to the active server's view", func() bool {
		_, err := ns.Stat(namespace.Root, "/f")
		return err == nil
	})
	if _, err := ns.Commit(f.ID, 3, sums); err == nil {
		t.Fatal("a commit repeated while the first never reached the shared engine succeeded")
	}
	if err := <-first; err == nil {
		t.Fatal("the first commit, never in the shared engine, succeeded")
	}
}

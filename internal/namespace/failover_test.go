package namespace

import (
	"fmt"
	"testing"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
)

// A storage server that lost the answer to its commit (the namespace
// server died after committing) asks again, possibly a new active server:
// the same commit succeeds without counting the file twice; a different
// one is refused.
func TestCommitRepeated(t *testing.T) {
	ns := newNS(t)
	f, err := ns.BeginCreate(Root, "/f", CreateOptions{}, place)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{"adler32": "01020304", "crc32c": "0a0b0c0d"}
	for i := 0; i < 2; i++ {
		g, err := ns.Commit(f.ID, 42, sums)
		if err != nil || g.ID != f.ID || g.Size != 42 {
			t.Fatalf("commit %d: %+v %v", i+1, g, err)
		}
	}
	root, err := ns.Stat(Root, "/")
	if err != nil || root.TreeFiles != 1 || root.TreeSize != 42 {
		t.Fatalf("root after a repeated commit: files %d size %d (%v), want 1 and 42", root.TreeFiles, root.TreeSize, err)
	}
	_, err = ns.Commit(f.ID, 42, map[string]string{"adler32": "ffffffff", "crc32c": "0a0b0c0d"})
	mustKind(t, err, kerr.NotFound)
	_, err = ns.Commit(f.ID+1000, 42, sums)
	mustKind(t, err, kerr.NotFound)
}

// Uploads left behind by a dead server are aborted in bounded commits (a
// replicated store refuses huge ones), all of them, stripes queued.
func TestAbortStaleInChunks(t *testing.T) {
	// An abort writes 2 keys here (pending record, one stripe queued).
	ns, err := Open(limitedStore{memkv.New(), 200}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 207
	for i := 0; i < n; i++ {
		if _, err := ns.BeginCreate(Root, fmt.Sprintf("/p%03d", i), CreateOptions{}, place); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ns.AbortStale(ns.opts.Now().Add(1))
	if err != nil || got != n {
		t.Fatalf("AbortStale: %d, %v; want %d", got, err, n)
	}
	left := 0
	_ = ns.eng.Scan([]byte{'P'}, []byte{'Q'}, func(_, _ []byte) bool { left++; return true })
	ds, err := ns.Deletions(1, 10*n)
	if left != 0 || err != nil || len(ds) != n {
		t.Fatalf("after AbortStale: %d pending, %d deletions queued (%v); want 0 and %d", left, len(ds), err, n)
	}
}

// limitedStore refuses batches of more than max writes, as etcd does.
type limitedStore struct {
	kv.Store
	max int
}

type limitedBatch struct {
	kv.Batch
	n, max int
}

func (s limitedStore) NewBatch() kv.Batch {
	return &limitedBatch{Batch: s.Store.NewBatch(), max: s.max}
}
func (b *limitedBatch) Put(k, v []byte) { b.n++; b.Batch.Put(k, v) }
func (b *limitedBatch) Delete(k []byte) { b.n++; b.Batch.Delete(k) }
func (b *limitedBatch) Apply(sync bool) (func() error, error) {
	if b.n > b.max {
		b.Batch.Discard()
		return nil, kerr.Wrap(kerr.Invalid, "commit", "", kv.ErrTooLarge)
	}
	return b.Batch.Apply(sync)
}
func (b *limitedBatch) Commit(sync bool) error {
	wait, err := b.Apply(sync)
	if err != nil {
		return err
	}
	return wait()
}

// failingStore applies nothing: every batch fails with err.
type failingStore struct {
	kv.Store
	err error
}

type failingBatch struct {
	kv.Batch
	err error
}

func (s failingStore) NewBatch() kv.Batch               { return failingBatch{s.Store.NewBatch(), s.err} }
func (b failingBatch) Apply(bool) (func() error, error) { b.Batch.Discard(); return nil, b.err }

// A store that says why a commit failed (a replicated one without quorum)
// is heard: the caller sees that kind, not an internal error.
func TestStoreErrorKeepsKind(t *testing.T) {
	eng := memkv.New()
	if _, err := Open(eng, Options{}); err != nil {
		t.Fatal(err)
	}
	down := kerr.New(kerr.Unavailable, "commit", "etcd", "no quorum")
	ns, err := Open(failingStore{eng, down}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = ns.Mkdir(Root, "/d", 0o755, false)
	mustKind(t, err, kerr.Unavailable)
}

package namespace

import (
	"fmt"
	"testing"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// A storage server that lost the answer to its commit (the namespace
// server died after committing) asks again, possibly a new active server:
// the same commit succeeds without counting the file twice; a different
// one is refused as an upload no longer pending (aborted: sent again, it
// gets a new one).
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
	mustKind(t, err, kerr.Aborted)
	_, err = ns.Commit(f.ID+1000, 42, sums)
	mustKind(t, err, kerr.Aborted)
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

func (s limitedStore) Limits() kv.Limits { return kv.Limits{Ops: s.max} }
func (b *limitedBatch) Put(k, v []byte)  { b.n++; b.Batch.Put(k, v) }
func (b *limitedBatch) Delete(k []byte)  { b.n++; b.Batch.Delete(k) }
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

// On a store that bounds its commits, rm -r of a tree too large for one
// commit empties it in steps: everything goes, accounting and the
// deletion queue stay right, and no commit is refused.
func TestRemoveLargeTreeInSteps(t *testing.T) {
	ns, err := Open(limitedStore{memkv.New(), 64}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Mkdir(Root, "/keep", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if err := ns.SetXAttr(Root, "/", nsapi.AttrLayout, "replica:3"); err != nil {
		t.Fatal(err)
	}
	files := 0
	for d := 0; d < 4; d++ {
		for e := 0; e < 3; e++ {
			dir := fmt.Sprintf("/big/d%d/e%d", d, e)
			if err := ns.Mkdir(Root, dir, 0o755, true); err != nil {
				t.Fatal(err)
			}
			for f := 0; f < 25; f++ {
				create(t, ns, fmt.Sprintf("%s/f%02d", dir, f), 10)
				files++
			}
		}
	}
	create(t, ns, "/keep/f", 7)
	if err := ns.Remove(Root, "/big", RemoveOptions{Recursive: true}); err != nil {
		t.Fatalf("rm -r of %d files: %v", files, err)
	}
	if _, err := ns.Stat(Root, "/big"); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("/big after rm -r: %v", err)
	}
	root, err := ns.Stat(Root, "/")
	if err != nil || root.TreeFiles != 1 || root.TreeSize != 7 || root.TreeDirs != 1 {
		t.Fatalf("root after rm -r: files %d size %d dirs %d (%v), want 1, 7, 1", root.TreeFiles, root.TreeSize, root.TreeDirs, err)
	}
	queued := 0
	for fs := uint32(1); fs <= 3; fs++ {
		ds, _ := ns.Deletions(fs, 10*files)
		queued += len(ds)
	}
	if queued != 3*files {
		t.Fatalf("%d stripes queued for deletion, want %d", queued, 3*files)
	}
}

// A heartbeat acknowledging more deletions than one commit may hold is
// taken in steps.
func TestAckManyDeletions(t *testing.T) {
	ns, err := Open(limitedStore{memkv.New(), 128}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ds []Deletion
	for i := 0; i < 150; i++ {
		f, err := ns.BeginCreate(Root, fmt.Sprintf("/p%03d", i), CreateOptions{}, place)
		if err != nil {
			t.Fatal(err)
		}
		if err := ns.Abort(f.ID); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, Deletion{FsID: 1, Fid: f.ID, Stripe: 0})
	}
	if err := ns.AckDeletions(ds); err != nil {
		t.Fatal(err)
	}
	if left, _ := ns.Deletions(1, 1000); len(left) != 0 {
		t.Fatalf("%d deletions left after acknowledging all", len(left))
	}
}

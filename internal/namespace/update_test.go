package namespace

import (
	"context"
	"slices"
	"testing"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
)

// TestCommitUpdate: an update gives the file its next data version, size,
// out-of-date checksums and stale stripes, in the record (across a
// reopen), in the subtree's size and in one "modified" event; an update
// from an older version, one with moved stripes, or one that leaves too
// few current stripes is refused and changes nothing.
func TestCommitUpdate(t *testing.T) {
	eng := memkv.New()
	ns, err := Open(eng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Mkdir(Root, "/d", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if err := ns.SetXAttr(Root, "/d", "sys.forced.layout", "replica:3"); err != nil {
		t.Fatal(err)
	}
	f := create(t, ns, "/d/f", 100)
	rev := ns.Revision()
	got, err := ns.CommitUpdate(DataUpdate{Fid: f.ID, Base: 0, Size: 150, Locations: f.Locations, Stale: []int{2}})
	if err != nil {
		t.Fatal(err)
	}
	if got.DataVersion != 1 || got.Size != 150 || !slices.Equal(got.Stale, []int{2}) || got.Checksums["adler32"] != "" {
		t.Fatalf("after the update: %+v", got)
	}
	evs, err := ns.Changes(context.Background(), rev, 10)
	if err != nil || len(evs) != 1 || evs[0].Kind != Modified || evs[0].DataVersion != 1 || evs[0].Size != 150 || evs[0].Ino != f.ID {
		t.Fatalf("events of the update: %+v %v", evs, err)
	}
	// An update from version 0 again: another one committed first.
	mustKind(t, errOf(ns.CommitUpdate(DataUpdate{Fid: f.ID, Base: 0, Size: 1, Locations: f.Locations})), kerr.Busy)
	// Stripes moved meanwhile.
	mustKind(t, errOf(ns.CommitUpdate(DataUpdate{Fid: f.ID, Base: 1, Size: 1, Locations: []uint32{9, 8, 7}})), kerr.Busy)
	// No current stripe would be left.
	mustKind(t, errOf(ns.CommitUpdate(DataUpdate{Fid: f.ID, Base: 1, Size: 1, Locations: f.Locations, Stale: []int{0, 1}})), kerr.Unavailable)
	// A stripe that could not take version 2 after its commit.
	if _, err := ns.CommitUpdate(DataUpdate{Fid: f.ID, Base: 1, Size: 10, Locations: f.Locations}); err != nil {
		t.Fatal(err)
	}
	if err := ns.MarkStale(f.ID, 1, 0); err != nil { // an older version: ignored
		t.Fatal(err)
	}
	if err := ns.MarkStale(f.ID, 2, 1); err != nil {
		t.Fatal(err)
	}
	d, err := ns.Stat(Root, "/d")
	if err != nil || d.TreeSize != 10 {
		t.Fatalf("the directory's subtree size after updates: %+v %v", d, err)
	}
	ns2, err := Open(eng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := ns2.Stat(Root, "/d/f")
	if err != nil || n.DataVersion != 2 || n.Size != 10 || !slices.Equal(n.Stale, []int{1, 2}) {
		t.Fatalf("after a reopen: %+v %v", n, err)
	}
	if err := ns2.ClearStale(f.ID, 2, 1); err != nil {
		t.Fatal(err)
	}
	if n, _ := ns2.Stat(Root, "/d/f"); !slices.Equal(n.Stale, []int{2}) {
		t.Fatalf("stale stripes after one was rebuilt: %v", n.Stale)
	}
	// A checksum computed for an older version is not recorded.
	mustKind(t, ns2.AddChecksums(f.ID, 1, map[string]string{"adler32": "00000001"}), kerr.Busy)
	if err := ns2.AddChecksums(f.ID, 2, map[string]string{"adler32": "00000002"}); err != nil {
		t.Fatal(err)
	}
}

// TestCommitUpdateQuota: a file grows by an update only within its
// owner's quota; shrinking gives the bytes back.
func TestCommitUpdateQuota(t *testing.T) {
	ns := newNS(t)
	ns.Mkdir(Root, "/q", 0o777, false)
	qk := QuotaKey{QuotaUser, 0}
	if err := ns.SetQuota(Root, "/q", qk, Amount{Bytes: 1000, Files: 10}); err != nil {
		t.Fatal(err)
	}
	f := create(t, ns, "/q/f", 600)
	mustKind(t, errOf(ns.CommitUpdate(DataUpdate{Fid: f.ID, Size: 1001, Locations: f.Locations})), kerr.Quota)
	if _, err := ns.CommitUpdate(DataUpdate{Fid: f.ID, Size: 1000, Locations: f.Locations}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.CommitUpdate(DataUpdate{Fid: f.ID, Base: 1, Size: 100, Locations: f.Locations}); err != nil {
		t.Fatal(err)
	}
	qs, err := ns.Quotas(Root, "/")
	if err != nil || len(qs) != 1 || qs[0].Used[qk] != (Amount{100, 1}) {
		t.Fatalf("usage after updates: %+v %v", qs, err)
	}
}

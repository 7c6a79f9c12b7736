package fsck

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster/message"
)

// TestCheckFile: a registered stripe missing from a later scan's
// inventory, not from an earlier one; too many locations.
func TestCheckFile(t *testing.T) {
	now := time.Now()
	f := &File{Fid: 7, Path: "/f", Layout: "replica:2", Size: 1, Locations: []uint32{1, 2}, Changed: now}
	invs := map[uint32]*Inventory{
		1: NewInventory(now.Add(time.Second), []uint64{9, 7, 3}),
		2: NewInventory(now.Add(time.Second), []uint64{9, 3}),
	}
	inv := func(id uint32) *Inventory { return invs[id] }
	got := CheckFile(f, inv)
	if len(got) != 1 || got[0].Class != Missing || got[0].FsID != 2 || got[0].Stripe != 1 {
		t.Fatalf("missing stripe: %+v", got)
	}
	invs[2].Add(7) // rebuilt since
	if got := CheckFile(f, inv); len(got) != 0 {
		t.Fatalf("after a rebuild: %+v", got)
	}
	invs[2] = NewInventory(now.Add(-time.Second), nil) // scanned before the file changed
	if got := CheckFile(f, inv); len(got) != 0 {
		t.Fatalf("scan older than the file: %+v", got)
	}
	f.Locations = []uint32{1, 2, 3}
	if got := CheckFile(f, inv); len(got) != 1 || got[0].Class != ReplicaDiff {
		t.Fatalf("three locations for replica:2: %+v", got)
	}
}

// TestBook: scans confirm or drop their findings; scrub findings survive
// scans that do not re-read, unless their stripe is gone; the pass's
// findings are replaced by each pass.
func TestBook(t *testing.T) {
	b := NewBook()
	t0 := time.Now()
	sum := Finding{Class: DiskSum, Fid: 1, FsID: 1, Stripe: 0}
	size := Finding{Class: DiskSize, Fid: 2, FsID: 1, Stripe: 0}
	other := Finding{Class: DiskSize, Fid: 2, FsID: 2, Stripe: 1}
	b.Note([]Finding{sum, size, other}, 1, false, t0)
	b.Note([]Finding{{Class: Missing, Fid: 3, FsID: 1, Stripe: 0}}, 5, true, t0)
	// A scan of fs 1 that re-read nothing and found neither.
	b.ScanDone(1, 2, false, NewInventory(t0, []uint64{1, 2, 3}))
	if !b.Has(sum.Key()) || b.Has(size.Key()) || !b.Has(other.Key()) {
		t.Fatalf("after a plain scan: %v", b.List(nil))
	}
	if b.Has(Key{Missing, 3, 1, 0}) {
		t.Fatal("a missing stripe the scan found is still reported")
	}
	// Found again later: the first-seen time stays.
	b.Note([]Finding{sum}, 3, false, t0.Add(time.Hour))
	if fs := b.ForFile(1); len(fs) != 1 || !fs[0].First.Equal(t0) || !fs[0].Last.Equal(t0.Add(time.Hour)) {
		t.Fatalf("refound: %+v", fs)
	}
	b.ScanDone(1, 4, false, NewInventory(t0, []uint64{2}))
	if b.Has(sum.Key()) {
		t.Fatal("a scrub finding whose stripe is gone is still reported")
	}
	b.Note([]Finding{{Class: Missing, Fid: 8, FsID: 2}}, 6, true, t0)
	b.PassDone(7)
	if c := b.Counts(); c[Missing] != 0 || c[DiskSize] != 1 || len(c) != len(Classes) {
		t.Fatalf("counts after a pass: %v", c)
	}
}

// TestPlanRepair: what a repair does with each kind of finding.
func TestPlanRepair(t *testing.T) {
	now := time.Now()
	rep := &File{Fid: 1, Path: "/r", Layout: "replica:2", Size: 10, Locations: []uint32{1, 2}}
	ec := &File{Fid: 2, Path: "/e", Layout: "ec:4+2", Size: 10, Locations: []uint32{1, 2, 3, 4, 5, 6}}
	plain := &File{Fid: 3, Path: "/p", Layout: "plain", Size: 10, Locations: []uint32{1}}
	f := func(c Class, fsid uint32, idx int) Finding {
		return Finding{Class: c, FsID: fsid, Stripe: idx, First: now.Add(-time.Minute)}
	}
	for _, tc := range []struct {
		name    string
		file    *File
		todo    []Finding
		others  []Finding
		rebuild []int
		drop    int
		skip    string
	}{
		{"replica missing", rep, []Finding{f(Missing, 2, 1)}, nil, []int{1}, 0, ""},
		{"both replicas bad", rep, []Finding{f(DiskSum, 1, 0)}, []Finding{f(Missing, 2, 1)}, nil, 0, "no healthy copy"},
		{"only copy", plain, []Finding{f(DiskSize, 1, 0)}, nil, nil, 0, "only copy"},
		{"namespace disagrees with every copy", rep, []Finding{f(NSSum, 1, 0), f(NSSum, 2, 1)}, nil, nil, 0, "inspect by hand"},
		{"ec two stripes", ec, []Finding{f(BlockSum, 1, 0), f(Missing, 6, 5)}, nil, []int{0, 5}, 0, ""},
		{"ec three stripes", ec, []Finding{f(BlockSum, 1, 0), f(Missing, 6, 5), f(DiskSize, 3, 2)}, nil, nil, 0, "unrecoverable"},
		{"stale finding", rep, []Finding{f(Missing, 7, 1)}, nil, nil, 0, "elsewhere now"},
		{"unregistered copy", rep, []Finding{f(Unreg, 5, 0), f(ReplicaDiff, 5, 0)}, nil, nil, 2, ""},
		{"unregistered copy of a damaged file", rep, []Finding{f(Unreg, 5, 0)}, []Finding{f(DiskSum, 1, 0)}, nil, 0, "repair them first"},
		{"unregistered copy, damage rebuilt too", rep, []Finding{f(Unreg, 5, 0), f(DiskSum, 1, 0)}, nil, []int{0}, 1, ""},
		{"too many locations", rep, []Finding{f(ReplicaDiff, 0, -1)}, nil, nil, 0, "not repairable"},
		{"young orphan", nil, []Finding{{Class: Orphan, FsID: 1, First: now.Add(-time.Second)}}, nil, nil, 0, "grace time"},
		{"old orphan", nil, []Finding{{Class: Orphan, FsID: 1, First: now.Add(-time.Hour)}}, nil, nil, 1, ""},
		{"orphan with a file again", rep, []Finding{{Class: Orphan, FsID: 1, First: now.Add(-time.Hour)}}, nil, nil, 0, "scan again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanRepair(tc.file, tc.todo, append(slices.Clone(tc.todo), tc.others...), time.Minute/2, now)
			if !slices.Equal(p.Rebuild, tc.rebuild) || len(p.Drop) != tc.drop {
				t.Fatalf("rebuild %v drop %v, want %v and %d (skipped %+v)", p.Rebuild, p.Drop, tc.rebuild, tc.drop, p.Skip)
			}
			if tc.skip == "" && len(p.Skip) > 0 || tc.skip != "" && (len(p.Skip) == 0 || !strings.Contains(p.Skip[0].Why, tc.skip)) {
				t.Fatalf("skipped %+v, want %q", p.Skip, tc.skip)
			}
		})
	}
}

// TestCheckStaleStripe: a stripe at an older data version than its file
// (or recorded stale) is found as stale_n, and only that (its size and
// checksums are the older content's); a repair rebuilds it from the
// others.
func TestCheckStaleStripe(t *testing.T) {
	f := &File{Fid: 7, Path: "/f", Layout: "replica:2", Size: 20, Locations: []uint32{1, 2}, DataVersion: 3,
		Checksums: map[string]string{"adler32": ""}}
	old := message.FsckStripe{Fid: 7, Stripe: 1, Layout: "replica:2", Size: 10, DiskSize: 10, Version: 2,
		Checksums: map[string]string{"adler32": "00000001"}}
	got := CheckStripe(2, old, Lookup{File: f})
	if len(got) != 1 || got[0].Class != Stale || got[0].Stripe != 1 {
		t.Fatalf("a stripe one update behind: %+v", got)
	}
	cur := old
	cur.Size, cur.DiskSize, cur.Version, cur.Stripe, cur.Checksums = 20, 20, 3, 0, nil
	if got := CheckStripe(1, cur, Lookup{File: f}); len(got) != 0 {
		t.Fatalf("a current stripe: %+v", got)
	}
	f.Stale = []int{0}
	if got = CheckStripe(1, cur, Lookup{File: f}); len(got) != 1 || got[0].Class != Stale {
		t.Fatalf("a stripe the namespace records stale: %+v", got)
	}
	p := PlanRepair(f, got, got, time.Hour, time.Now())
	if !slices.Equal(p.Rebuild, []int{0}) {
		t.Fatalf("repair plan of a stale stripe: %+v", p)
	}
}

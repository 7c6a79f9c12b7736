package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/layout"
)

// testRegistry is a registry of rw, booted filesystems: one per entry
// of fss, "node" or "node@location".
func testRegistry(fss ...string) *Registry {
	r := &Registry{fs: map[uint32]*FsState{}, nodes: map[string]*node{}, interval: time.Second}
	for i, spec := range fss {
		id := uint32(i + 1)
		nodeName, loc := spec, ""
		if n, l, ok := strings.Cut(spec, "@"); ok {
			nodeName, loc = n, l
		}
		r.nodes[nodeName] = &node{lastBeat: time.Now()}
		f := &FsState{BootStatus: "booted", Health: "ok", Capacity: 1 << 30, LastBeat: time.Now()}
		f.ID, f.Node, f.ConfigStatus, f.Space, f.Group, f.Location = id, nodeName, "rw", DefaultSpace, "default.0", loc
		r.fs[id] = f
	}
	return r
}

// perDomain counts the stripes ids puts on each node and each location.
func perDomain(r *Registry, ids []uint32) (nodes, locs map[string]int) {
	nodes, locs = map[string]int{}, map[string]int{}
	for _, id := range ids {
		nodes[r.fs[id].Node]++
		locs[r.fs[id].Location]++
	}
	return nodes, locs
}

// TestPlacementFailureDomains: a file's stripes never share a storage
// server while the group has one without a stripe of the file, are
// spread evenly when there are more stripes than servers, and are
// spread over locations (each level of the tag) as far as that allows.
func TestPlacementFailureDomains(t *testing.T) {
	type want struct {
		layout   string
		maxNode  int // most stripes on one storage server
		maxLoc   int // most stripes at one location (0: not checked)
		minNodes int // storage servers used at least
	}
	for _, tc := range []struct {
		name  string
		fss   []string
		wants []want
	}{
		{"three servers of two filesystems", []string{"a", "a", "b", "b", "c", "c"},
			[]want{{"replica:3", 1, 0, 3}, {"ec:2+1", 1, 0, 3}, {"replica:2", 1, 0, 2}, {"ec:4+2", 2, 0, 3}}},
		{"two racks of two servers", []string{"a@s::r1", "a@s::r1", "b@s::r1", "c@s::r2", "d@s::r2", "d@s::r2"},
			[]want{{"replica:2", 1, 1, 2}, {"ec:2+2", 1, 2, 4}, {"ec:2+1", 1, 2, 3}}},
		{"one rack with one server, one with three", []string{"a@r1", "a@r1", "a@r1", "b@r2", "c@r2", "d@r2"},
			[]want{{"ec:2+2", 1, 3, 4}, {"replica:2", 1, 1, 2}}},
		{"two sites", []string{"a@x::r1", "b@x::r2", "c@y::r1", "d@y::r2"},
			[]want{{"replica:2", 1, 0, 2}}},
	} {
		r := testRegistry(tc.fss...)
		for _, w := range tc.wants {
			for range 200 {
				ids, err := r.Place(layoutOf(t, w.layout), "")
				if err != nil {
					t.Fatalf("%s, %s: %v", tc.name, w.layout, err)
				}
				nodes, locs := perDomain(r, ids)
				most := func(m map[string]int) int {
					n := 0
					for _, v := range m {
						n = max(n, v)
					}
					return n
				}
				if most(nodes) > w.maxNode || len(nodes) < w.minNodes || (w.maxLoc > 0 && most(locs) > w.maxLoc) {
					t.Fatalf("%s, %s: placed on %v: per server %v, per location %v", tc.name, w.layout, ids, nodes, locs)
				}
				if tc.name == "two sites" {
					if site := func(id uint32) byte { return r.fs[id].Location[0] }; site(ids[0]) == site(ids[1]) {
						t.Fatalf("replica:2 over two sites placed both in one: %v", ids)
					}
				}
			}
		}
	}
}

// TestSpreadCompare: a storage server already holding a stripe of the
// file ranks after any that holds none, whatever the locations; among
// servers holding as many, the emptier location ranks first.
func TestSpreadCompare(t *testing.T) {
	r := testRegistry("a@r1", "a@r1", "b@r1", "c@r2", "d@r2")
	held := Spread{}
	held.Add(r.fs[1]) // a@r1
	held.Add(r.fs[4]) // c@r2
	held.Add(r.fs[5]) // d@r2
	// fs 2 (server a, holding one) vs fs 3 (server b, none, but r1): b.
	if held.Compare(r.fs[3], r.fs[2]) >= 0 {
		t.Fatal("a server holding a stripe ranked before one holding none")
	}
	held.Remove(r.fs[4])
	held.Remove(r.fs[5])
	held.Add(r.fs[3]) // now r1 holds two, r2 none
	if held.Compare(r.fs[4], r.fs[2]) >= 0 || held.Compare(r.fs[4], r.fs[5]) != 0 {
		t.Fatalf("location ranking: %v", held)
	}
	for _, bad := range []string{"a::", "::a", "a b", "a:b", "a::b::c::d::e::f::g::h::i"} {
		if CheckLocation(bad) == nil {
			t.Errorf("location %q accepted", bad)
		}
	}
	for _, good := range []string{"", "site", "site::rack-1", "cern.ch::b513::r_1"} {
		if err := CheckLocation(good); err != nil {
			t.Errorf("location %q: %v", good, err)
		}
	}
}

// TestPlaceLateOnlyWhenNeeded: filesystems whose heartbeats are late are
// drawn only when too few report on time, and not past lateGrace.
func TestPlaceLateOnlyWhenNeeded(t *testing.T) {
	r := testRegistry("a", "b", "c")
	late := time.Now().Add(-10 * time.Second)
	r.nodes["b"].lastBeat, r.fs[2].LastBeat = late, late
	r.nodes["c"].lastBeat, r.fs[3].LastBeat = late, late
	plain, _ := layout.Parse("plain")
	for range 20 {
		if locs, err := r.Place(plain, ""); err != nil || locs[0] != 1 {
			t.Fatalf("plain with fs 1 on time: %v %v, want [1]", locs, err)
		}
	}
	three, _ := layout.Parse("replica:3")
	if locs, err := r.Place(three, ""); err != nil || len(locs) != 3 {
		t.Fatalf("replica:3 with 2 of 3 late: %v %v, want all three", locs, err)
	}
	gone := time.Now().Add(-lateGrace - time.Second)
	r.nodes["c"].lastBeat, r.fs[3].LastBeat = gone, gone
	if locs, err := r.Place(three, ""); err == nil {
		t.Fatalf("replica:3 with one server silent past lateGrace: placed on %v", locs)
	}
}

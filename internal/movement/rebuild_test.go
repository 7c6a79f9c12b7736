package movement

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// TestRebuildSettings: fs config ID rebuild.rate= and rebuild.parallel=
// set what each of the rebuild's moves is told: by default it gives way
// to client streams, with a rate it is capped (shared by the moves in
// parallel), with 0 it is neither; a drain never gives way.
func TestRebuildSettings(t *testing.T) {
	for _, c := range []struct {
		rate, parallel string
		wantParallel   int
		want           pace
	}{
		{"default", "", DefaultRebuildParallel, pace{yield: true}},
		{"100M", "", DefaultRebuildParallel, pace{rate: 100 << 20 / DefaultRebuildParallel}},
		{"100M", "2", 2, pace{rate: 50 << 20}},
		{"0", "8", 8, pace{}},
	} {
		f := namespace.Filesystem{ID: 1, Node: "n", Group: "default.0", ConfigStatus: "lost", UUID: "u1"}
		for _, kv := range [][2]string{{"rebuild.rate", c.rate}, {"rebuild.parallel", c.parallel}} {
			if kv[1] == "" {
				continue
			}
			i := slices.IndexFunc(rebuildKeys, func(k fleet.FsKey) bool { return k.Name == kv[0] })
			if err := rebuildKeys[i].Set(&f, kv[1]); err != nil {
				t.Fatalf("%s=%s: %v", kv[0], kv[1], err)
			}
		}
		reg, err := fleet.Load(&regStore{fss: []namespace.Filesystem{f}}, fleet.Config{})
		if err != nil {
			t.Fatal(err)
		}
		m := New(Config{Fleet: reg})
		parallel, p, _ := m.drainSettings(1, true)
		if parallel != c.wantParallel || p != c.want {
			t.Errorf("rebuild.rate=%s rebuild.parallel=%s: %d moves paced %+v, want %d paced %+v", c.rate, c.parallel, parallel, p, c.wantParallel, c.want)
		}
		if _, p, _ := m.drainSettings(1, false); p.yield {
			t.Errorf("rebuild.rate=%s: a drain gives way to clients", c.rate)
		}
	}
}

// TestRebuildTargetKeepsFailureDomains: a stripe rebuilt off a lost
// filesystem goes where placement would put it: not to a storage server
// holding another stripe of the file, nor to the rack of one, while
// another filesystem of the group is neither, even if those are emptier.
func TestRebuildTargetKeepsFailureDomains(t *testing.T) {
	// Servers a and b in rack r1, c in r2; fs 1 (a) is lost, the file's
	// other copy is on fs 3 (b); fs 2 (a, r1) and fs 4 (b, r1) are the
	// emptiest.
	type fs struct {
		node, loc string
		used      uint64
	}
	fss := []fs{{"a", "s::r1", 0}, {"a", "s::r1", 0}, {"b", "s::r1", 0}, {"b", "s::r1", 0}, {"c", "s::r2", 500 << 20}, {"c", "s::r2", 600 << 20}}
	st := &regStore{}
	for i, f := range fss {
		st.fss = append(st.fss, namespace.Filesystem{ID: uint32(i + 1), Node: f.node, Path: fmt.Sprintf("/fs%d", i+1), Group: "default.0",
			Space: fleet.DefaultSpace, ConfigStatus: "rw", Location: f.loc, UUID: fmt.Sprintf("u%d", i+1), Initialized: true})
	}
	st.fss[0].ConfigStatus = "lost"
	reg, err := fleet.Load(st, fleet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"a", "b", "c"} {
		hb := message.Heartbeat{Node: node, Addr: "http://" + node}
		for i, f := range fss {
			if f.node == node && i > 0 {
				hb.Filesystems = append(hb.Filesystems, message.FsReport{ID: uint32(i + 1), Path: fmt.Sprintf("/fs%d", i+1),
					Capacity: 1 << 30, Used: f.used, Health: "ok"})
			}
		}
		if _, err := reg.Heartbeat(hb); err != nil {
			t.Fatal(err)
		}
	}
	m := New(Config{Fleet: reg})
	f := &namespace.Inode{ID: 7, Layout: "replica:2", Locations: []uint32{1, 3}}
	to, why := m.target(f, 0, 1, "default.0", 1<<20, nil)
	if to != 5 {
		t.Fatalf("stripe 0 of a file whose other copy is on fs 3 (server b, rack r1) rebuilt onto fs %d (%s), want fs 5 (server c, rack r2: the emptiest there)", to, why)
	}
	// With rack r2 gone, another server than b, even in b's rack.
	reg.Heartbeat(message.Heartbeat{Node: "c", Addr: "http://c", Filesystems: []message.FsReport{
		{ID: 5, Path: "/fs5", Offline: "gone"}, {ID: 6, Path: "/fs6", Offline: "gone"}}})
	if to, why := m.target(f, 0, 1, "default.0", 1<<20, nil); to != 2 {
		t.Fatalf("with server c offline, rebuilt onto fs %d (%s), want fs 2 (server a: not b, which holds the other copy)", to, why)
	}
}

package movement

import (
	"slices"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// TestRankByRisk: the stripes of a lost filesystem are moved the files
// with the fewest readable stripes beyond what they need first (ec:4+2
// missing two before ec:4+2 missing one, replica:2 with one copy and
// replica:3 with one before replica:3 with two), whatever order the
// namespace lists them in; a file with fewer readable stripes than it
// needs is left out, and each is counted in its class.
func TestRankByRisk(t *testing.T) {
	var fss []fleet.FsState
	for id := uint32(1); id <= 8; id++ {
		f := fleet.FsState{}
		f.ID, f.ConfigStatus = id, "rw"
		if id <= 2 {
			f.DownSince = time.Now().Add(-time.Hour) // fs 1 and 2 cannot be read
		}
		fss = append(fss, f)
	}
	file := func(id uint64, lay string, size int64, locs ...uint32) stripe {
		return stripe{f: &namespace.Inode{ID: id, Layout: lay, Size: size, Locations: locs}, idx: 0, bytes: size}
	}
	items := []stripe{
		file(1, "replica:3", 10, 1, 3, 4),         // one copy unreadable: margin 1
		file(2, "ec:4+2", 20, 1, 3, 4, 5, 6, 7),   // one stripe missing: margin 1
		file(3, "plain", 30, 1),                   // its only copy: unreadable
		file(4, "ec:4+2", 40, 1, 2, 3, 4, 5, 6),   // two missing: margin 0
		file(5, "replica:2", 50, 1, 3),            // one copy left: margin 0
		file(6, "replica:3", 60, 1, 2, 3),         // one of three left: margin 0
		file(7, "ec:4+2", 70, 1, 2, 8, 3, 4, 100), // fs 100 unknown: three missing, unreadable
	}
	movable, stuck, risk := rank(items, fss)
	var order []uint64
	for _, it := range movable {
		order = append(order, it.f.ID)
	}
	if want := []uint64{4, 5, 6, 1, 2}; !slices.Equal(order, want) {
		t.Fatalf("moved in the order %v, want %v", order, want)
	}
	if len(stuck) != 2 || stuck[0].f.ID != 3 || stuck[1].f.ID != 7 {
		t.Fatalf("stuck: %v", stuck)
	}
	want := RiskCounts{Unreadable: FileCount{2, 100}, Critical: FileCount{3, 150}, Degraded: FileCount{2, 30}}
	if risk != want {
		t.Fatalf("risk %+v, want %+v", risk, want)
	}
	// A healthy file on a readable filesystem being drained runs no risk.
	_, _, risk = rank([]stripe{file(8, "replica:2", 5, 3, 4)}, fss)
	if risk != (RiskCounts{}) {
		t.Fatalf("healthy file counted at risk: %+v", risk)
	}
}

// regStore keeps registrations in memory (fleet.Store).
type regStore struct{ fss []namespace.Filesystem }

func (s *regStore) Filesystems() ([]namespace.Filesystem, error) { return s.fss, nil }
func (s *regStore) SaveFilesystem(f namespace.Filesystem) error {
	for i := range s.fss {
		if s.fss[i].ID == f.ID {
			s.fss[i] = f
			return nil
		}
	}
	s.fss = append(s.fss, f)
	return nil
}
func (s *regStore) Spaces() ([]namespace.Space, error) { return nil, nil }
func (s *regStore) SaveSpace(namespace.Space) error    { return nil }
func (s *regStore) Groups() ([]namespace.Group, error) { return nil, nil }
func (s *regStore) SaveGroup(namespace.Group) error    { return nil }

// TestSettleLostSource: a stripe moved off a lost filesystem leaves no
// adjustment waiting for its deletion to be acknowledged (a dead disk
// never acknowledges: one per stripe rebuilt would pile up, walked by
// every choice of a target); one moved off a drained filesystem does,
// until the acknowledgement.
func TestSettleLostSource(t *testing.T) {
	st := &regStore{fss: []namespace.Filesystem{
		{ID: 1, Node: "n", Group: "default.0", ConfigStatus: "lost", Drain: DrainRebuilding, UUID: "u1"},
		{ID: 2, Node: "n", Group: "default.0", ConfigStatus: "rw", UUID: "u2"},
		{ID: 3, Node: "n", Group: "default.0", ConfigStatus: "drain", Drain: DrainDraining, UUID: "u3"},
	}}
	reg, err := fleet.Load(st, fleet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{Fleet: reg})
	for fid := range uint64(1000) {
		m.settle(namespace.Move{Fid: fid, From: 1, To: 2}, 10)
	}
	waiting := func() (n int) {
		for _, a := range m.adjust {
			if a.del != nil {
				n++
			}
		}
		return n
	}
	if n := waiting(); n != 0 {
		t.Fatalf("%d adjustments wait for a lost filesystem to acknowledge deletions", n)
	}
	m.settle(namespace.Move{Fid: 5, From: 3, To: 2}, 10)
	if n := waiting(); n != 1 {
		t.Fatalf("%d adjustments wait for the drained filesystem's deletion, want 1", n)
	}
	m.Acked([]namespace.Deletion{{FsID: 3, Fid: 5}})
	if n := waiting(); n != 0 {
		t.Fatalf("%d adjustments after the acknowledgement", n)
	}
}

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

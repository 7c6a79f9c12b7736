package fleet

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/layout"
)

// TestSlowness: a filesystem whose p90 stands out from the median of its
// group's filesystems on other backends (and the floor) is slow; it
// recovers under half the limit; without samples, alone in its group or
// among directories of its own disk, nothing is decided.
func TestSlowness(t *testing.T) {
	pol := SlowPolicy{}.resolved()
	disk := 0
	fs := func(p90 time.Duration, n int64) *FsState {
		disk++
		return &FsState{Backend: fmt.Sprintf("dev:8:%d", disk), Latency: &message.Latency{SmallN: n, SmallP90: p90}}
	}
	group := []*FsState{fs(2*time.Millisecond, 50), fs(3*time.Millisecond, 50), fs(4*time.Millisecond, 50), fs(2*time.Second, 50)}
	if why, ok := slowness(group[3], group, "default.0", pol); !ok || !strings.Contains(why, "small-op p90 2s") || !strings.Contains(why, "median 3ms") {
		t.Fatalf("slow one: %q %v", why, ok)
	}
	if why, ok := slowness(group[1], group, "default.0", pol); !ok || why != "" {
		t.Fatalf("healthy one: %q %v", why, ok)
	}
	// Above five times the median but under the floor: not slow.
	g2 := []*FsState{fs(time.Millisecond, 50), fs(time.Millisecond, 50), fs(50*time.Millisecond, 50)}
	if why, _ := slowness(g2[2], g2, "g", pol); why != "" {
		t.Fatalf("under the floor: %q", why)
	}
	// Recovery needs half the limit.
	group[3].Slow = "was"
	group[3].Latency.SmallP90 = 80 * time.Millisecond
	if why, _ := slowness(group[3], group, "g", pol); why == "" {
		t.Fatal("recovered above half the limit")
	}
	group[3].Latency.SmallP90 = 40 * time.Millisecond
	if why, ok := slowness(group[3], group, "g", pol); why != "" || !ok {
		t.Fatalf("not recovered under half the limit: %q", why)
	}
	if _, ok := slowness(fs(time.Hour, slowSamples-1), group, "g", pol); ok {
		t.Fatal("judged on too few samples")
	}
	alone := []*FsState{fs(time.Hour, 50)}
	if _, ok := slowness(alone[0], alone, "g", pol); ok {
		t.Fatal("judged alone in its group")
	}
	// Directories of one disk are not compared with each other.
	one := []*FsState{fs(time.Millisecond, 50), fs(time.Millisecond, 50), fs(time.Second, 50)}
	for _, f := range one {
		f.Backend = "dev:8:99"
	}
	if _, ok := slowness(one[2], one, "g", pol); ok {
		t.Fatal("judged against directories of its own disk")
	}
}

// TestPlacementAvoidsSlow: placement leaves slow filesystems out unless
// told to keep placing on them.
func TestPlacementAvoidsSlow(t *testing.T) {
	r := &Registry{fs: map[uint32]*FsState{}, nodes: map[string]*node{"n": {lastBeat: time.Now()}}, interval: time.Second, avoidSlow: true}
	for id := uint32(1); id <= 3; id++ {
		r.fs[id] = &FsState{BootStatus: "booted", Health: "ok", Capacity: 1 << 30, LastBeat: time.Now()}
		r.fs[id].ID, r.fs[id].Node, r.fs[id].ConfigStatus, r.fs[id].Space = id, "n", "rw", DefaultSpace
	}
	r.fs[3].Slow = "small-op p99 2s"
	for range 50 {
		ids, err := r.Place(layoutOf(t, "replica:2"), "")
		if err != nil || slices.Contains(ids, 3) {
			t.Fatalf("placement %v %v", ids, err)
		}
	}
	if _, err := r.Place(layoutOf(t, "replica:3"), ""); err == nil || !strings.Contains(err.Error(), "2 available") {
		t.Fatalf("replica:3 with one of three slow: %v", err)
	}
	r.avoidSlow = false
	if ids, err := r.Place(layoutOf(t, "replica:3"), ""); err != nil || !slices.Contains(ids, 3) {
		t.Fatalf("keep placing on slow ones: %v %v", ids, err)
	}
}

func layoutOf(t *testing.T, s string) layout.Layout {
	t.Helper()
	l, err := layout.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

package fleet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// Place picks one writable filesystem of space ("" is the default one),
// not a slow one (slow.go), per stripe, all in one scheduling group (as EOS does: a group is the
// unit drain and balance work in, so a file's stripes never span two),
// never two on one filesystem, spreading over nodes first, weighted
// towards free space. The group is drawn among those with enough
// writable filesystems, in proportion to their free space. Filesystems
// that share a backend share its free space: six directories in one
// CephFS weigh together what the CephFS has free, not six times that.
func (r *Registry) Place(l layout.Layout, space string) ([]uint32, error) {
	if space == "" {
		space = DefaultSpace
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	groups := map[string][]*FsState{}
	shared := map[string]int{} // candidates per backend
	total := 0
	for _, f := range r.fs {
		if f.ConfigStatus == "rw" && f.Health == "ok" && r.alive(f) && f.Space == space && (f.Slow == "" || !r.avoidSlow) {
			groups[f.Group] = append(groups[f.Group], f)
			shared[f.BackendID()]++
			total++
		}
	}
	free := func(f *FsState) float64 {
		return float64(f.Capacity-min(f.Used, f.Capacity))/float64(shared[f.BackendID()]) + 1
	}
	need := l.Stripes()
	var names []string
	largest := 0
	for g, cands := range groups {
		largest = max(largest, len(cands))
		if len(cands) >= need {
			names = append(names, g)
		}
	}
	if len(names) == 0 {
		if r.awaiting() {
			return nil, kerr.New(kerr.Busy, "", "", fmt.Sprintf("layout %s needs %d writable filesystems, %d reported so far: the namespace server just started and storage servers are still reporting; retry", l, need, total))
		}
		if total >= need {
			return nil, kerr.New(kerr.NoSpace, "", "", fmt.Sprintf("layout %s needs %d writable filesystems in one group, the largest group of space %s has %d", l, need, space, largest))
		}
		return nil, kerr.New(kerr.NoSpace, "", "", fmt.Sprintf("layout %s needs %d writable filesystems, %d available in space %s", l, need, total, space))
	}
	// Weighted sampling: the largest log(u)/weight wins.
	sort.Strings(names)
	best, bestKey := "", math.Inf(-1)
	for _, g := range names {
		w := 0.0
		for _, f := range groups[g] {
			w += free(f)
		}
		if k := math.Log(1-rand.Float64()) / w; k > bestKey {
			best, bestKey = g, k
		}
	}
	return spread(groups[best], need, free), nil
}

// spread orders cands (the caller's own slice) randomly, each coming
// first in proportion to its free space, then takes need of them
// spreading over nodes: a node already given a stripe comes after those
// given fewer.
func spread(cands []*FsState, need int, free func(*FsState) float64) []uint32 {
	key := make(map[uint32]float64, len(cands))
	for _, f := range cands {
		key[f.ID] = math.Log(1-rand.Float64()) / free(f)
	}
	sort.Slice(cands, func(i, j int) bool { return key[cands[i].ID] > key[cands[j].ID] })
	perNode := map[string]int{}
	out := make([]uint32, 0, need)
	for round := 0; len(out) < need && round < 2*layout.MaxStripes+need; round++ {
		for _, f := range cands {
			if len(out) == need {
				break
			}
			if perNode[f.Node] == round && !slices.Contains(out, f.ID) {
				perNode[f.Node]++
				out = append(out, f.ID)
			}
		}
	}
	return out
}

package nsserver

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// place picks one writable filesystem of space ("" is the default one)
// per stripe, never two on one filesystem, spreading over nodes first,
// weighted towards free space. Filesystems that share a backend share its
// free space: six directories in one CephFS weigh together what the
// CephFS has free, not six times that.
func (r *registry) place(l layout.Layout, space string) ([]uint32, error) {
	if space == "" {
		space = DefaultSpace
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var cands []*FsState
	shared := map[string]int{} // candidates per backend
	for _, f := range r.fs {
		if f.ConfigStatus == "rw" && f.Health == "ok" && r.alive(f) && f.Space == space && (f.Slow == "" || !r.avoidSlow) {
			cands = append(cands, f)
			shared[f.backend()]++
		}
	}
	need := l.Stripes()
	if len(cands) < need {
		return nil, kerr.New(kerr.NoSpace, "", "", fmt.Sprintf("layout %s needs %d writable filesystems, %d available in space %s", l, need, len(cands), space))
	}
	// A random order in which each filesystem comes first in proportion
	// to its free space (weighted sampling: the largest log(u)/weight
	// wins), then stable-partition by how many stripes each node holds.
	key := make(map[uint32]float64, len(cands))
	for _, f := range cands {
		free := float64(f.Capacity-min(f.Used, f.Capacity))/float64(shared[f.backend()]) + 1
		key[f.ID] = math.Log(1-rand.Float64()) / free
	}
	sort.Slice(cands, func(i, j int) bool { return key[cands[i].ID] > key[cands[j].ID] })
	perNode := map[string]int{}
	out := make([]uint32, 0, need)
	for round := 0; len(out) < need; round++ {
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
	return out, nil
}

package nsserver

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// place picks one writable filesystem per stripe, never two on one
// filesystem, spreading over nodes first, weighted towards free space.
func (r *registry) place(l layout.Layout) ([]uint32, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var cands []*FsState
	for _, f := range r.fs {
		if f.ConfigStatus == "rw" && f.Health == "ok" && r.alive(f) && f.Space == "default" {
			cands = append(cands, f)
		}
	}
	need := l.Stripes()
	if len(cands) < need {
		return nil, kerr.New(kerr.NoSpace, "", "", fmt.Sprintf("layout %s needs %d writable filesystems, %d available", l, need, len(cands)))
	}
	// Random order biased by free space, then stable-partition by how many
	// stripes each node already holds.
	key := make(map[uint32]float64, len(cands))
	for _, f := range cands {
		free := float64(f.Capacity-f.Used) + 1
		key[f.ID] = rand.Float64() * free
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

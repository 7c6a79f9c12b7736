package fleet

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// Place picks one writable filesystem of space ("" is the default one),
// not a slow one (slow.go), per stripe, all in one scheduling group (as EOS does: a group is the
// unit drain and balance work in, so a file's stripes never span two),
// never two on one filesystem, spread over storage servers and
// locations (failure domains, below), weighted towards free space. The group is drawn among those with enough
// writable filesystems, in proportion to their free space. Filesystems
// that share a backend share its free space: six directories in one
// CephFS weigh together what the CephFS has free, not six times that.
// Filesystems whose heartbeats are late (under lateGrace) are drawn only
// when those reporting on time are too few: a loaded host's late report
// should not refuse an upload as if the disk were gone.
func (r *Registry) Place(l layout.Layout, space string) ([]uint32, error) {
	if space == "" {
		space = DefaultSpace
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	locs, err := r.place(l, space, r.alive)
	if err != nil && !r.awaiting() {
		if late, lerr := r.place(l, space, r.lateAlive); lerr == nil {
			return late, nil
		}
	}
	return locs, err
}

// place is Place among the filesystems usable says are up; caller holds
// r.mu.
func (r *Registry) place(l layout.Layout, space string, usable func(*FsState) bool) ([]uint32, error) {
	groups := map[string][]*FsState{}
	shared := map[string]int{} // candidates per backend
	total := 0
	for _, f := range r.fs {
		if f.ConfigStatus == "rw" && f.Health == "ok" && usable(f) && f.Space == space && (f.Slow == "" || !r.avoidSlow) {
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
// first in proportion to its free space, then takes need of them, each
// the first of those that spreads the file best (Spread): never two on
// one storage server while one of the group holds none, and over
// locations among those.
func spread(cands []*FsState, need int, free func(*FsState) float64) []uint32 {
	key := make(map[uint32]float64, len(cands))
	for _, f := range cands {
		key[f.ID] = math.Log(1-rand.Float64()) / free(f)
	}
	sort.Slice(cands, func(i, j int) bool { return key[cands[i].ID] > key[cands[j].ID] })
	held := Spread{}
	taken := make([]bool, len(cands))
	out := make([]uint32, 0, need)
	for len(out) < need {
		best := -1
		for i, f := range cands {
			if !taken[i] && (best < 0 || held.Compare(f, cands[best]) < 0) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		taken[best] = true
		held.Add(cands[best])
		out = append(out, cands[best].ID)
	}
	return out
}

// Failure domains. A file's stripes are spread so that losing one
// storage server, or one location, loses as few of them as the group
// allows: never two on one storage server while the group has one
// holding none of the file, and, among those, over locations, each level
// of the location tag (EOS' geotag, "site::rack1") from the widest.
// Placement, and the targets drain, rebuild and balance choose, follow
// the same order (Spread.Compare).

// locationLevels is how many levels of a location tag count as domains
// of their own (deeper ones count with the third).
const locationLevels = 3

// CheckLocation checks a location tag: empty, or up to 8 names of
// letters, digits, '-', '_' and '.' joined by "::", widest first.
func CheckLocation(v string) error {
	if v == "" {
		return nil
	}
	parts := strings.Split(v, "::")
	if len(parts) > 8 {
		return fmt.Errorf("bad location %q: more than 8 levels", v)
	}
	for _, p := range parts {
		if p == "" || strings.IndexFunc(p, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
		}) >= 0 {
			return fmt.Errorf("bad location %q: want names of letters, digits, '-', '_', '.' joined by '::' (site::rack1)", v)
		}
	}
	return nil
}

// domains are the failure domains of f: its storage server, then each
// level of its location tag (filesystems without one share the location
// "").
func domains(f *FsState) [1 + locationLevels]string {
	var out [1 + locationLevels]string
	out[0] = "node\x00" + f.Node
	parts := strings.Split(f.Location, "::")
	for i := range locationLevels {
		n := len(parts)
		if i+1 < n {
			n = i + 1
		}
		out[1+i] = "loc\x00" + strings.Join(parts[:n], "::")
	}
	return out
}

// Spread counts the stripes of one file per failure domain.
type Spread map[string]int

// Add counts a stripe of the file on f.
func (s Spread) Add(f *FsState) {
	for _, d := range domains(f) {
		s[d]++
	}
}

// Remove uncounts a stripe of the file on f.
func (s Spread) Remove(f *FsState) {
	for _, d := range domains(f) {
		s[d]--
	}
}

// Compare says whether one more stripe of the file on a spreads it
// better (< 0), as well (0) or worse (> 0) than on b: fewer stripes of
// the file on its storage server first, then at its location, the
// widest level first.
func (s Spread) Compare(a, b *FsState) int {
	da, db := domains(a), domains(b)
	for i := range da {
		if c := cmp.Compare(s[da[i]], s[db[i]]); c != 0 {
			return c
		}
	}
	return 0
}

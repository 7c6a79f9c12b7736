package movement

// The balancer of a group (`group set G balancer=on threshold=N`) moves
// stripes from its fullest filesystem to its emptiest while their fill
// (used / capacity, in percent) differs by more than the threshold.
// Storage servers report usage once per heartbeat and a moved stripe
// leaves its old filesystem only after the deletion grace, so the
// balancer counts what it has in flight and what it moved but the
// reports do not show yet (Service.pending). Filesystems sharing a backend
// (directories of one disk) are one unit: moving between them changes
// nothing. A stripe is moved only if the move does not turn the source
// into the emptier of the two, so the balancer never oscillates.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// DefaultThreshold is a balancer's threshold when none was set.
const DefaultThreshold = 5.0

// BalanceProgress is where the balancer of a group stands.
type BalanceProgress struct {
	Group     string
	Phase     string  // "balanced", "moving", "stuck: ..." (nothing movable)
	Spread    float64 // percentage points between the fullest and the emptiest filesystem
	Threshold float64
	Moved     int64 // stripes moved since the balancer started in this process
	Bytes     int64
	Rate      float64 // bytes per second over the last minute
	InFlight  int
	Failures  []MoveFailure
	Failed    int64
}

type balanceJob struct {
	job
	group string

	spread float64         // under job.mu
	busy   map[uint64]bool // files with a stripe being moved
}

func (m *Service) startBalancer(ctx context.Context, group string) *balanceJob {
	ctx, cancel := context.WithCancel(ctx)
	j := &balanceJob{job: newJob("balance", "starting", cancel, time.Now()), group: group, busy: map[uint64]bool{}}
	m.log.Info("balancer started", "group", group)
	go m.runBalancer(ctx, j)
	return j
}

// fill is one unit of a group: a filesystem (or several sharing a
// backend, represented by the first) and its projected fill.
type fill struct {
	fs   *fleet.FsState
	used float64 // bytes, projected
	cap  float64
}

func (f fill) percent() float64 { return 100 * f.used / f.cap }

// fills are the group's usable units, fullest first.
func (m *Service) fills(group string) []fill {
	avoidSlow := m.reg.AvoidSlow()
	var fss []fleet.FsState // by id
	for _, f := range m.reg.List() {
		if f.Group == group && f.ConfigStatus == "rw" && f.Health == "ok" && f.BootStatus == "booted" && f.Capacity > 0 && (f.Slow == "" || !avoidSlow) {
			fss = append(fss, f)
		}
	}
	pending := m.pending()
	shared := map[string]int64{} // pending bytes per backend
	for _, f := range fss {
		shared[f.BackendID()] += pending[f.ID]
	}
	seen := map[string]bool{}
	var out []fill
	for i := range fss {
		f := &fss[i]
		b := f.BackendID()
		if seen[b] {
			continue
		}
		seen[b] = true
		out = append(out, fill{fs: f, used: max(float64(f.Used)+float64(shared[b]), 0), cap: float64(f.Capacity)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].percent() > out[j].percent() })
	return out
}

func (m *Service) balanceSettings(group string) (g namespace.Group, parallel int) {
	g = m.reg.Group(group)
	if g.Threshold <= 0 {
		g.Threshold = DefaultThreshold
	}
	parallel = g.Parallel
	if parallel <= 0 {
		parallel = DefaultBalanceParallel
	}
	return g, parallel
}

func (m *Service) runBalancer(ctx context.Context, j *balanceJob) {
	var cands []stripe // stripes on src, from the last scan
	var src uint32
	for ctx.Err() == nil {
		g, parallel := m.balanceSettings(j.group)
		j.mu.Lock()
		inflight := j.inflight
		j.mu.Unlock()
		if inflight >= parallel {
			j.waitSlot(ctx, time.Second)
			continue
		}
		fs := m.fills(j.group)
		spread := 0.0
		if len(fs) >= 2 {
			spread = fs[0].percent() - fs[len(fs)-1].percent()
		}
		j.mu.Lock()
		j.spread = spread
		j.mu.Unlock()
		if len(fs) < 2 || spread <= g.Threshold {
			if inflight == 0 {
				j.setPhase("balanced")
			}
			j.waitSlot(ctx, 5*time.Second)
			continue
		}
		from, to := fs[0], fs[len(fs)-1]
		if from.fs.ID != src || len(cands) == 0 {
			var err error
			if cands, err = m.stripesOn(from.fs.ID); err != nil {
				m.log.Error("balancer: cannot scan the namespace", "group", j.group, "err", err)
				sleepCtx(ctx, 5*time.Second)
				continue
			}
			src = from.fs.ID
		}
		// A stripe whose move keeps the source at least as full as the
		// target after it, whose file has no stripe on the target and
		// whose stripes the move spreads no worse over storage servers
		// and locations (fleet.Spread, as placement).
		all := m.reg.List()
		pick := -1
		for i, c := range cands {
			b := float64(c.bytes)
			if b == 0 || (from.used-b)/from.cap < (to.used+b)/to.cap || j.isBusy(c.f.ID) || slices.Contains(c.f.Locations, to.fs.ID) ||
				m.spreadOf(all, c.f.Locations, c.idx).Compare(to.fs, from.fs) > 0 {
				continue
			}
			pick = i
			break
		}
		if pick < 0 {
			cands = nil
			if inflight == 0 {
				j.setPhase(fmt.Sprintf("stuck: no stripe on fs %d fits fs %d without overshooting (spread %.1f)", from.fs.ID, to.fs.ID, spread))
			}
			j.waitSlot(ctx, 10*time.Second)
			src = 0
			continue
		}
		c := cands[pick]
		cands = append(cands[:pick], cands[pick+1:]...)
		j.mu.Lock()
		j.inflight++
		j.busy[c.f.ID] = true
		j.phase = "moving"
		j.mu.Unlock()
		release := m.reserve(to.fs.ID, c.bytes) // counted before the move starts, so the next choice sees it
		go func() {
			defer func() {
				release()
				j.mu.Lock()
				delete(j.busy, c.f.ID)
				j.mu.Unlock()
				j.endMove()
			}()
			m.balanceOne(ctx, j, c, from.fs.ID, to.fs.ID, g.Rate/int64(parallel))
		}()
	}
}

func (j *balanceJob) isBusy(fid uint64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.busy[fid]
}

func (m *Service) balanceOne(ctx context.Context, j *balanceJob, c stripe, from, to uint32, rate int64) {
	res, out, err := m.moveStripe(ctx, c.f.ID, c.idx, from, to, pace{rate: rate})
	switch out {
	case moved:
		m.movedOne(&j.job, from, c.f.ID, c.idx, res)
	case gone, busy:
	default:
		if ctx.Err() != nil {
			return
		}
		m.failedOne(&j.job, from, c.f.ID, c.idx, fmt.Sprintf("fs %d to fs %d: %s", from, to, reasonOf(err)))
		sleepCtx(ctx, time.Second) // do not spin on a failing target
	}
}

func (j *balanceJob) progress() BalanceProgress {
	j.mu.Lock()
	defer j.mu.Unlock()
	return BalanceProgress{Group: j.group, Phase: j.phase, Spread: j.spread, Moved: j.moved, Bytes: j.bytes,
		Rate: j.window.rate(time.Now()), InFlight: j.inflight, Failures: j.fails.list(), Failed: j.fails.total}
}

// GroupState is a row of `group ls`: a group's filesystems, their
// spread and its balancer.
type GroupState struct {
	namespace.Group
	Filesystems int
	Usable      int     // rw, booted, healthy
	MinFill     float64 // percent, of the usable ones
	MaxFill     float64
	Balance     *BalanceProgress // nil when the balancer is off
}

// Groups describes every group (those filesystems name and those with
// settings) for `group ls`.
func (m *Service) Groups() []GroupState {
	gs := map[string]*GroupState{}
	for _, g := range m.reg.Groups() {
		gs[g.Name] = &GroupState{Group: g}
	}
	for _, f := range m.reg.List() {
		g := gs[f.Group]
		if g == nil {
			g = &GroupState{Group: namespace.Group{Name: f.Group}}
			gs[f.Group] = g
		}
		g.Filesystems++
	}
	bal := map[string]BalanceProgress{}
	for _, b := range m.Movement().Balancers {
		bal[b.Group] = b
	}
	out := make([]GroupState, 0, len(gs))
	for name, g := range gs {
		if g.Threshold <= 0 {
			g.Threshold = DefaultThreshold
		}
		fs := m.fills(name)
		g.Usable = len(fs)
		if len(fs) > 0 {
			g.MaxFill, g.MinFill = fs[0].percent(), fs[len(fs)-1].percent()
		}
		if b, ok := bal[name]; ok && g.Balancer {
			b.Threshold = g.Threshold
			g.Balance = &b
		}
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// balancerKeys are the balancer's keys of `group set`.
var balancerKeys = []fleet.GroupKey{
	{Name: "balancer", Set: func(g *namespace.Group, v string) error {
		switch v {
		case "on":
			g.Balancer = true
		case "off":
			g.Balancer = false
		default:
			return errors.New("balancer must be on or off")
		}
		return nil
	}},
	{Name: "threshold", Set: func(g *namespace.Group, v string) error {
		t, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
		if err != nil || t <= 0 || t >= 100 || math.IsNaN(t) {
			return fmt.Errorf("bad threshold %q (percentage points of fill, 0 < N < 100)", v)
		}
		g.Threshold = t
		return nil
	}},
	{Name: "balancer.rate", Set: func(g *namespace.Group, v string) (err error) {
		g.Rate, err = parseRate(v)
		return err
	}},
	{Name: "balancer.parallel", Set: func(g *namespace.Group, v string) (err error) {
		g.Parallel, err = parseParallel(v)
		return err
	}},
}

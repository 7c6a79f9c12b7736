package fleet

import (
	"fmt"
	"slices"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster/message"
)

// Slow-disk detection. Every storage server reports, per filesystem, the
// percentiles of the latency of its own small and large I/O operations
// over a recent window (message.Latency). A filesystem whose 90th
// percentile stands out from the other filesystems of its scheduling
// group that are on other backends (directories of one disk cannot differ
// in what the disk does) — above Factor times their median and above an
// absolute floor — is slow: `fs ls` says so with the figure, the log
// warns, metrics show it, and placement stops choosing it for new files
// (unless KeepPlacing) until it is back under half that limit. The 90th
// percentile needs a tenth of the operations to be slow: one stall among
// a minute of probes does not make a disk slow, a disk answering small
// operations in seconds is. A filesystem without enough samples keeps its
// state.

// SlowPolicy configures slow-disk detection.
type SlowPolicy struct {
	Factor      float64       // times the group's median (default 5)
	Min         time.Duration // floor for small operations (default 100ms); large ones: 10x
	KeepPlacing bool          // placement keeps choosing slow filesystems (they are only marked)
	Off         bool          // no detection
}

// Defaults of SlowPolicy.
const (
	DefaultSlowFactor = 5
	DefaultSlowMin    = 100 * time.Millisecond
)

// slowSamples is the fewest samples a percentile is judged on.
const slowSamples = 10

func (p SlowPolicy) resolved() SlowPolicy {
	if p.Factor <= 0 {
		p.Factor = DefaultSlowFactor
	}
	if p.Min <= 0 {
		p.Min = DefaultSlowMin
	}
	return p
}

// slowEvent is a change of a filesystem's slow state, logged after the
// registry is unlocked.
type slowEvent struct {
	id         uint32
	node, path string
	why        string // "" when it recovered
}

// JudgeSlow updates the slow state of every filesystem that reported
// latencies, by group (after each heartbeat).
func (r *Registry) JudgeSlow() {
	pol := r.slow
	if pol.Off {
		return
	}
	r.mu.Lock()
	groups := map[string][]*FsState{}
	for _, f := range r.fs {
		if f.Latency != nil && r.alive(f) {
			groups[f.Group] = append(groups[f.Group], f)
		}
	}
	var events []slowEvent
	for group, fss := range groups {
		for _, f := range fss {
			why, decided := slowness(f, fss, group, pol)
			switch {
			case !decided:
			case why != "" && f.Slow == "":
				f.Slow, f.SlowSince = why, time.Now()
				events = append(events, slowEvent{f.ID, f.Node, f.Path, why})
			case why != "":
				f.Slow = why // the figure changes
			case f.Slow != "":
				f.Slow, f.SlowSince = "", time.Time{}
				events = append(events, slowEvent{f.ID, f.Node, f.Path, ""})
			}
		}
	}
	r.mu.Unlock()
	for _, e := range events {
		if e.why != "" {
			r.log.Warn("filesystem is slow", "fsid", e.id, "node", e.node, "path", e.path,
				"latency", e.why, "placement", !pol.KeepPlacing)
		} else {
			r.log.Info("filesystem is no longer slow", "fsid", e.id, "node", e.node, "path", e.path)
		}
	}
}

// slowness judges f against the others of its group on other backends:
// why it is slow ("" when it is not), and whether there was enough to
// judge on.
func slowness(f *FsState, group []*FsState, name string, pol SlowPolicy) (why string, decided bool) {
	classes := []struct {
		name  string
		n     func(*message.Latency) int64
		p90   func(*message.Latency) time.Duration
		floor time.Duration
	}{
		{"small-op", func(l *message.Latency) int64 { return l.SmallN }, func(l *message.Latency) time.Duration { return l.SmallP90 }, pol.Min},
		{"large-op", func(l *message.Latency) int64 { return l.LargeN }, func(l *message.Latency) time.Duration { return l.LargeP90 }, 10 * pol.Min},
	}
	for _, c := range classes {
		if c.n(f.Latency) < slowSamples {
			continue
		}
		var others []time.Duration
		for _, g := range group {
			if g.BackendID() != f.BackendID() && c.n(g.Latency) >= slowSamples {
				others = append(others, c.p90(g.Latency))
			}
		}
		if len(others) == 0 {
			continue
		}
		slices.Sort(others)
		med := others[len(others)/2]
		if len(others)%2 == 0 {
			med = (others[len(others)/2-1] + med) / 2
		}
		limit := max(c.floor, time.Duration(pol.Factor*float64(med)))
		if f.Slow != "" {
			limit /= 2 // recovers only well below the limit
		}
		decided = true
		if p := c.p90(f.Latency); p > limit {
			return fmt.Sprintf("%s p90 %v, group %s median %v", c.name, round(p), name, round(med)), true
		}
	}
	return "", decided
}

// round keeps a latency readable.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

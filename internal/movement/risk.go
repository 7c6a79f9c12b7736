package movement

// Risk. While a filesystem is unreadable (its storage server silent,
// its disk offline, off) the files with a stripe on it run a risk: how
// many more failures they survive is the number of their readable
// stripes beyond what they need (margin: K for an erasure-coded file,
// one copy otherwise). The rebuilds move the files with the smallest
// margin first (rank); the survey counts the files of the whole
// namespace by class for `fsck stat`, `fs status` and /metrics, walking
// the namespace only while some filesystem is unreadable (otherwise no
// file is at risk). A filesystem unreadable for longer than the grace
// (RebuildAfter) is declared lost, which starts its rebuild
// (declareLost).

import (
	"context"
	"fmt"
	"time"

	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// FileCount is a number of files (or stripes) and their bytes.
type FileCount struct {
	Files int64
	Bytes int64
}

// RiskCounts are the files some of whose stripes are unreadable, by the
// risk they run: Unreadable (fewer readable stripes than they need: no
// read succeeds until a filesystem comes back), Critical (exactly as
// many as they need: one failure from loss) and Degraded (more).
type RiskCounts struct {
	Unreadable FileCount
	Critical   FileCount
	Degraded   FileCount
}

// class is the count of the files of margin with missing unreadable
// stripes (nil: not at risk).
func (r *RiskCounts) class(margin, missing int) *FileCount {
	switch {
	case missing == 0:
		return nil
	case margin < 0:
		return &r.Unreadable
	case margin == 0:
		return &r.Critical
	}
	return &r.Degraded
}

// add counts a file of size bytes with margin and missing stripes.
func (r *RiskCounts) add(margin, missing int, size int64) {
	if c := r.class(margin, missing); c != nil {
		c.Files++
		c.Bytes += size
	}
}

// sub uncounts it (its stripe was moved off the filesystem).
func (r *RiskCounts) sub(margin, missing int, size int64) {
	if c := r.class(margin, missing); c != nil {
		c.Files--
		c.Bytes -= size
	}
}

// readableSet says which filesystems can be read now (fss: the
// registry's list).
func readableSet(fss []fleet.FsState) map[uint32]bool {
	out := make(map[uint32]bool, len(fss))
	for _, f := range fss {
		out[f.ID] = f.ConfigStatus != "off" && f.DownSince.IsZero()
	}
	return out
}

// margin is how many of f's stripes are readable beyond those it needs
// (negative: fewer than it needs), and how many are not readable.
func margin(f *namespace.Inode, readable map[uint32]bool) (margin, missing int) {
	need := 1
	if l, err := layout.Parse(f.Layout); err == nil && l.Kind == layout.EC {
		need = l.K
	}
	avail := 0
	for _, id := range f.Locations {
		if readable[id] {
			avail++
		}
	}
	return avail - need, len(f.Locations) - avail
}

// Risk is what the files of the instance risk now, and where the
// rebuilds stand.
type Risk struct {
	RiskCounts
	// Rebuilding are the files at risk with a stripe being moved now
	// (counted in their class too).
	Rebuilding FileCount
	// Rebuilt are the stripes (Files) and bytes the rebuilds recreated
	// since this server started; Remaining what the running ones still
	// have to; Rate their bytes per second over the last minute, ETA
	// Remaining at it (0: unknown).
	Rebuilt   FileCount
	Remaining FileCount
	Rate      float64
	ETA       time.Duration
	// Unavailable lists the filesystems that cannot be read now.
	Unavailable []uint32
	// Surveyed is when the counts were taken (zero: never), Took how
	// long the walk of the namespace took (0: no filesystem was
	// unreadable, nothing to walk).
	Surveyed time.Time
	Took     time.Duration
}

// riskState is the last survey, and the filesystems declareLost holds
// back (warned about once); under Service.mu.
type riskState struct {
	last Risk
	held map[uint32]bool
}

// Risk reports what the files risk (the last survey) and where the
// rebuilds stand (now).
func (m *Service) Risk() Risk {
	mv := m.Movement()
	m.mu.Lock()
	r := m.risk.last
	m.mu.Unlock()
	r.Rebuilt = FileCount{Files: mv.Rebuild.Stripes, Bytes: mv.Rebuild.Bytes}
	for _, d := range mv.Drains {
		if d.Kind == "rebuild" && d.Status == DrainRebuilding {
			r.Remaining.Files += d.FilesLeft
			r.Remaining.Bytes += d.BytesLeft
			r.Rate += d.Rate
		}
	}
	if r.Rate > 0 {
		r.ETA = time.Duration(float64(r.Remaining.Bytes) / r.Rate * float64(time.Second))
	}
	return r
}

// surveyMin is the shortest pause between two surveys; a survey also
// waits ten times as long as the last one took.
const surveyMin = 2 * time.Second

// runSurvey keeps the survey current until ctx ends.
func (m *Service) runSurvey(ctx context.Context) {
	for {
		took := m.survey()
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(surveyMin, 10*took)):
		}
	}
}

// survey counts the files at risk, walking the namespace only while a
// filesystem cannot be read, and returns how long it took.
func (m *Service) survey() time.Duration {
	fss := m.reg.List()
	readable := readableSet(fss)
	var r Risk
	for _, f := range fss {
		if !readable[f.ID] {
			r.Unavailable = append(r.Unavailable, f.ID)
		}
	}
	start := time.Now()
	if len(r.Unavailable) > 0 {
		moving := map[uint64]bool{}
		if ms, err := m.ns.PendingMoves(); err == nil {
			for _, mv := range ms {
				moving[mv.Fid] = true
			}
		}
		err := m.eachFile(func(f *namespace.Inode) {
			mg, missing := margin(f, readable)
			r.add(mg, missing, f.Size)
			if missing > 0 && moving[f.ID] {
				r.Rebuilding.Files++
				r.Rebuilding.Bytes += f.Size
			}
		})
		if err != nil {
			m.log.Error("cannot survey the files at risk", "err", err)
			return time.Since(start)
		}
		r.Took = max(time.Since(start), time.Nanosecond)
	}
	r.Surveyed = time.Now()
	m.mu.Lock()
	m.risk.last = r
	m.mu.Unlock()
	return r.Took
}

// declareLost declares lost every filesystem unreadable for longer than
// the grace (RebuildAfter), which starts its rebuild, unless it is off
// (an operator's choice), drained (it holds nothing), was never
// initialized, or most of its group cannot be read either (a wider
// outage, power or network, which a rebuild cannot mend: Ceph's
// mon_osd_min_in_ratio). changed reports whether one was declared.
func (m *Service) declareLost(fss []fleet.FsState) (changed bool) {
	if m.rebuildAfter <= 0 {
		return false
	}
	readable := readableSet(fss)
	for _, f := range fss {
		down := time.Since(f.DownSince)
		if f.DownSince.IsZero() || down < m.rebuildAfter || !f.Initialized || f.ConfigStatus == "off" || f.ConfigStatus == "lost" ||
			f.ConfigStatus == "drain" && f.Drain == DrainDrained {
			m.mu.Lock()
			delete(m.risk.held, f.ID)
			m.mu.Unlock()
			continue
		}
		total, up := 0, 0
		for _, g := range fss {
			if g.Group == f.Group && g.ConfigStatus != "off" && g.ConfigStatus != "lost" {
				total++
				if readable[g.ID] {
					up++
				}
			}
		}
		if 2*up < total {
			m.mu.Lock()
			warned := m.risk.held[f.ID]
			if m.risk.held == nil {
				m.risk.held = map[uint32]bool{}
			}
			m.risk.held[f.ID] = true
			m.mu.Unlock()
			if !warned {
				m.log.Warn("not declaring the filesystem lost: most of its group cannot be read either (an outage of power or network rather than lost disks?); `fs config ID configstatus=lost` does",
					"fsid", f.ID, "group", f.Group, "readable", up, "of", total, "unreadable_for", down.Round(time.Second))
			}
			continue
		}
		why := fmt.Sprintf("unreadable for %s, longer than the rebuild grace of %s: %s", down.Round(time.Second), m.rebuildAfter, f.DownWhy)
		ok, err := m.reg.MarkLost(f.ID, f.ConfigStatus, why)
		if err != nil {
			m.log.Error("cannot declare the filesystem lost", "fsid", f.ID, "err", err)
			continue
		}
		if ok {
			m.log.Warn("filesystem lost", "fsid", f.ID, "node", f.Node, "path", f.Path, "why", why)
			changed = true
		}
	}
	return changed
}

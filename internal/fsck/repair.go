package fsck

import (
	"fmt"
	"slices"
	"time"

	"github.com/kaon-storage/kaon/internal/layout"
)

// Repair. The namespace server plans (Plan): which stripes of a file to
// rebuild where they are registered, and which copies to drop (orphans
// after a grace time, copies the namespace does not register). The
// storage server holding the stripes to rebuild rebuilds them
// (storage/rebuild.go). Stripes are rebuilt in place: moving them
// elsewhere is the job of drain and balance.

// Plan is what repairing the findings of one file does.
type Plan struct {
	Rebuild []int     // stripe indices to rebuild on their registered filesystems
	Drop    []Finding // copies to remove (orphans, unregistered copies)
	Skip    []Skipped // findings left alone, and why
}

// Skipped is a finding a repair leaves, with the reason.
type Skipped struct {
	Finding
	Why string
}

// PlanRepair decides what to do about the findings todo of one file (all
// of one fid), given the namespace's record of it (nil: none) and every
// finding about it (to know which stripes are healthy sources). Orphans
// younger than grace are kept.
func PlanRepair(f *File, todo, all []Finding, grace time.Duration, now time.Time) Plan {
	var p Plan
	skip := func(x Finding, why string) { p.Skip = append(p.Skip, Skipped{x, why}) }
	bad := map[int]bool{} // stripes unusable as sources
	for _, x := range all {
		if x.Class.BadCopy() && f != nil && x.Stripe >= 0 && x.Stripe < len(f.Locations) && f.Locations[x.Stripe] == x.FsID {
			bad[x.Stripe] = true
		}
	}
	// Stripes to rebuild first: whether copies may be dropped depends on
	// whether damage remains.
	var drops []Finding
	for _, x := range todo {
		switch {
		case x.Class == Orphan:
			switch {
			case f != nil:
				skip(x, "the namespace has a file with this fid again: scan again")
			case now.Sub(x.First) < grace:
				skip(x, fmt.Sprintf("found %v ago, dropped only after the grace time of %v", now.Sub(x.First).Round(time.Second), grace))
			default:
				p.Drop = append(p.Drop, x)
			}
		case f == nil:
			skip(x, "the file is gone from the namespace")
		case x.Class == Unreg || x.Class == ReplicaDiff:
			drops = append(drops, x)
		case x.Class.BadCopy():
			if x.Stripe < 0 || x.Stripe >= len(f.Locations) || f.Locations[x.Stripe] != x.FsID {
				skip(x, "the namespace registers this stripe elsewhere now: scan again")
				continue
			}
			if !slices.Contains(p.Rebuild, x.Stripe) {
				p.Rebuild = append(p.Rebuild, x.Stripe)
			}
		default:
			skip(x, "no repair for this class")
		}
	}
	slices.Sort(p.Rebuild)
	if why := rebuildable(f, p.Rebuild, bad, all); why != "" {
		for _, x := range todo {
			if x.Class.BadCopy() && slices.Contains(p.Rebuild, x.Stripe) {
				skip(x, why)
			}
		}
		p.Rebuild = nil
	}
	damaged := false
	for i := range bad {
		if !slices.Contains(p.Rebuild, i) {
			damaged = true
		}
	}
	for _, x := range drops {
		switch {
		case x.FsID == 0:
			skip(x, "the namespace lists more locations than the layout has: not repairable automatically")
		case slices.Contains(f.Locations, x.FsID):
			skip(x, "the namespace registers this filesystem for the file now: scan again")
		case damaged:
			skip(x, "the file has damaged registered stripes: repair them first")
		default:
			p.Drop = append(p.Drop, x)
		}
	}
	return p
}

// rebuildable says why stripes rebuild of f cannot be rebuilt from the
// others ("" when they can): bad are the stripes known to be damaged.
func rebuildable(f *File, rebuild []int, bad map[int]bool, all []Finding) string {
	if len(rebuild) == 0 {
		return ""
	}
	l, err := layout.Parse(f.Layout)
	switch {
	case err != nil:
		return "bad layout: " + err.Error()
	case l.Kind == layout.EC:
		sources := 0
		for i := range f.Locations {
			if !slices.Contains(rebuild, i) && !missingStripe(all, f, i) {
				sources++
			}
		}
		if len(rebuild) > l.M || sources < l.K {
			return fmt.Sprintf("unrecoverable: %d of %d stripes to rebuild, %d others readable, layout %s needs %d",
				len(rebuild), len(f.Locations), sources, f.Layout, l.K)
		}
		return ""
	}
	for i := range f.Locations {
		if !bad[i] {
			return ""
		}
	}
	switch {
	case allNS(all):
		return "every copy's metadata disagrees with the namespace: inspect by hand"
	case len(f.Locations) == 1:
		return "the only copy is damaged"
	}
	return "no healthy copy left"
}

// missingStripe reports whether stripe i of f is known to be missing.
func missingStripe(all []Finding, f *File, i int) bool {
	for _, x := range all {
		if x.Class == Missing && x.Stripe == i && x.FsID == f.Locations[i] {
			return true
		}
	}
	return false
}

// allNS reports whether the bad-copy findings in all are only namespace
// disagreements.
func allNS(all []Finding) bool {
	for _, x := range all {
		if x.Class.BadCopy() && x.Class != NSSize && x.Class != NSSum {
			return false
		}
	}
	return true
}

package fsck

import (
	"sort"
	"sync"
	"time"
)

// Book keeps the findings of the latest scans, per class. A scan of a
// filesystem confirms or adds what it finds; when it completes, what it
// did not confirm is dropped (scrub-only classes only by scrubs, or when
// their stripe is gone). Missing stripes come from the namespace pass and
// are replaced by each pass. Findings live in memory: after a restart
// they come back with the next scans.
type Book struct {
	mu    sync.Mutex
	items map[Key]*entry
}

type entry struct {
	Finding
	gen  int64 // the scan (start, unix ns) or namespace pass that last confirmed it
	pass bool  // found by the namespace pass, not a scan
}

// NewBook returns an empty book.
func NewBook() *Book { return &Book{items: map[Key]*entry{}} }

// Note records findings of scan (or pass) gen at time now, keeping the
// first-seen time of findings already known.
func (b *Book) Note(fs []Finding, gen int64, pass bool, now time.Time) {
	if len(fs) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, f := range fs {
		k := f.Key()
		e := b.items[k]
		if e == nil {
			e = &entry{Finding: f}
			e.First = now
			b.items[k] = e
		} else {
			first := e.First
			e.Finding = f
			e.First = first
		}
		e.Last, e.gen, e.pass = now, gen, pass
	}
}

// ScanDone drops the findings of filesystem fsid that scan gen did not
// confirm: every scan class; the scrub classes only when the scan was a
// scrub or their fid is gone from inv; missing stripes inv has found.
func (b *Book) ScanDone(fsid uint32, gen int64, scrub bool, inv *Inventory) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, e := range b.items {
		if e.FsID != fsid {
			continue
		}
		switch {
		case e.pass:
			if e.Class == Missing && inv.Has(e.Fid) {
				delete(b.items, k)
			}
		case e.gen == gen:
		case !e.Class.scrubClass() || scrub || !inv.Has(e.Fid):
			delete(b.items, k)
		}
	}
}

// PassDone drops the namespace pass's findings that pass gen did not
// confirm.
func (b *Book) PassDone(gen int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, e := range b.items {
		if e.pass && e.gen != gen {
			delete(b.items, k)
		}
	}
}

// Drop removes one finding.
func (b *Book) Drop(k Key) {
	b.mu.Lock()
	delete(b.items, k)
	b.mu.Unlock()
}

// DropStripe removes every finding about stripe idx of fid on fsid (it
// was rebuilt).
func (b *Book) DropStripe(fid uint64, fsid uint32, idx int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.items {
		if k.Fid == fid && k.FsID == fsid && k.Stripe == idx {
			delete(b.items, k)
		}
	}
}

// List returns the findings keep accepts (all with nil), by class in
// priority order, then path, filesystem and stripe.
func (b *Book) List(keep func(*Finding) bool) []Finding {
	b.mu.Lock()
	out := make([]Finding, 0, len(b.items))
	for _, e := range b.items {
		if keep == nil || keep(&e.Finding) {
			out = append(out, e.Finding)
		}
	}
	b.mu.Unlock()
	rank := map[Class]int{}
	for i, c := range Classes {
		rank[c] = i
	}
	sort.Slice(out, func(i, j int) bool {
		a, c := &out[i], &out[j]
		switch {
		case a.Class != c.Class:
			return rank[a.Class] < rank[c.Class]
		case a.Path != c.Path:
			return a.Path < c.Path
		case a.Fid != c.Fid:
			return a.Fid < c.Fid
		case a.FsID != c.FsID:
			return a.FsID < c.FsID
		}
		return a.Stripe < c.Stripe
	})
	return out
}

// ForFile returns the findings about fid.
func (b *Book) ForFile(fid uint64) []Finding {
	return b.List(func(f *Finding) bool { return f.Fid == fid })
}

// Counts returns the number of findings per class (every class present).
func (b *Book) Counts() map[Class]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[Class]int, len(Classes))
	for _, c := range Classes {
		out[c] = 0
	}
	for _, e := range b.items {
		out[e.Class]++
	}
	return out
}

// Has reports whether a finding with key k is kept.
func (b *Book) Has(k Key) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.items[k]
	return ok
}

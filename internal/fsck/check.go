package fsck

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/layout"
)

// File is the namespace's record of a file, as fsck compares it.
type File struct {
	Fid       uint64
	Path      string
	Layout    string
	Size      int64
	Checksums map[string]string
	Locations []uint32  // filesystem of each stripe
	Changed   time.Time // its ctime: commit or later change, never set back by a client
	// DataVersion is the file's; Stale its stripes that missed an update.
	DataVersion uint64
	Stale       []int
}

// Lookup is what the namespace knows about the fid of a stripe found on
// filesystem FsID: its file, or why it has none and is no orphan.
type Lookup struct {
	File    *File // nil: no committed file with this fid
	Pending bool  // an upload in progress (its stripes are being written)
	Queued  bool  // this stripe is queued for deletion
}

// Finding is one inconsistency.
type Finding struct {
	Class  Class  `json:"class"`
	Fid    uint64 `json:"fid"`
	FsID   uint32 `json:"fsid"`   // 0: about the file, not one filesystem
	Stripe int    `json:"stripe"` // stripe index (-1: about the file)
	// Path is the file's path in the namespace; for an orphan, the path
	// its stripe was written under (a hint: the file is gone).
	Path   string    `json:"path"`
	Phys   string    `json:"phys,omitempty"` // the physical file, as the filesystem names it
	Detail string    `json:"detail"`
	First  time.Time `json:"first"` // first found
	Last   time.Time `json:"last"`  // last confirmed
}

// Key identifies a finding: one class of one stripe (or file).
type Key struct {
	Class  Class
	Fid    uint64
	FsID   uint32
	Stripe int
}

// Key is f's key.
func (f *Finding) Key() Key { return Key{f.Class, f.Fid, f.FsID, f.Stripe} }

// CheckStripe compares stripe s found on filesystem fsid with what the
// namespace knows (l) and returns the findings (none when they agree).
func CheckStripe(fsid uint32, s message.FsckStripe, l Lookup) []Finding {
	f := l.File
	if f == nil {
		if l.Pending || l.Queued {
			return nil // being written, or about to be removed
		}
		hint := "(unknown)"
		if s.Path != "" {
			hint = s.Path
		}
		return []Finding{{Class: Orphan, Fid: s.Fid, FsID: fsid, Stripe: s.Stripe, Path: hint,
			Detail: "no file has this fid in the namespace (path at write time shown)"}}
	}
	find := func(c Class, format string, args ...any) Finding {
		return Finding{Class: c, Fid: s.Fid, FsID: fsid, Stripe: s.Stripe, Path: f.Path, Detail: fmt.Sprintf(format, args...)}
	}
	idx := slices.Index(f.Locations, fsid)
	if idx < 0 {
		if l.Queued {
			return nil
		}
		return []Finding{
			find(Unreg, "the file is registered on filesystems %s, not on fs %d", fsList(f.Locations), fsid),
			find(ReplicaDiff, "%d registered stripes and this extra copy for layout %s", len(f.Locations), f.Layout),
		}
	}
	if s.MetaErr != "" {
		out := find(StripeErr, "metadata unreadable: %s", s.MetaErr)
		out.Stripe = idx
		return []Finding{out}
	}
	if s.Version != f.DataVersion || slices.Contains(f.Stale, idx) {
		// What else its metadata says is of an older content.
		out := find(Stale, "stripe %d is at data version %d, the file at %d (it missed an update)", idx, s.Version, f.DataVersion)
		out.Stripe = idx
		return []Finding{out}
	}
	var out []Finding
	switch {
	case s.Stripe != idx:
		out = append(out, find(StripeErr, "metadata says stripe %d, the namespace registers stripe %d here", s.Stripe, idx))
		out[len(out)-1].Stripe = idx
	case s.Layout != f.Layout:
		out = append(out, find(StripeErr, "metadata says layout %s, the namespace %s", s.Layout, f.Layout))
	}
	if s.DiskErr != "" {
		out = append(out, find(DiskSize, "cannot be opened: %s", s.DiskErr))
	} else if ml, err := layout.Parse(s.Layout); err == nil {
		if want := erasure.StripeSize(ml, s.Size); s.DiskSize != want {
			out = append(out, find(DiskSize, "%d bytes on disk, %d expected from its metadata (file size %d)", s.DiskSize, want, s.Size))
		}
	}
	if s.Size != f.Size {
		out = append(out, find(NSSize, "size %d in its metadata, %d in the namespace", s.Size, f.Size))
	}
	for _, t := range sortedKeys(f.Checksums) {
		want, have := f.Checksums[t], s.Checksums[t]
		if want != "" && have != "" && !strings.EqualFold(want, have) {
			out = append(out, find(NSSum, "%s %s in its metadata, %s in the namespace", t, have, want))
			break
		}
	}
	if s.SumErr != "" {
		out = append(out, find(DiskSum, "%s", s.SumErr))
	}
	if s.BlockErr != "" {
		out = append(out, find(BlockSum, "%s", s.BlockErr))
	}
	return out
}

// CheckFile compares a file's registered stripes with the inventories of
// completed scans: a stripe its filesystem did not report, in a scan that
// started after the file last changed, is missing. inv returns the
// inventory of a filesystem (nil when it has none). Too many locations
// for the layout is rep_diff_n.
func CheckFile(f *File, inv func(fsid uint32) *Inventory) []Finding {
	var out []Finding
	for i, fsid := range f.Locations {
		v := inv(fsid)
		if v == nil || !f.Changed.Before(v.Start) || v.Has(f.Fid) {
			continue
		}
		out = append(out, Finding{Class: Missing, Fid: f.Fid, FsID: fsid, Stripe: i, Path: f.Path,
			Detail: fmt.Sprintf("not found by the scan of fs %d started %s", fsid, v.Start.Format(time.RFC3339))})
	}
	if l, err := layout.Parse(f.Layout); err == nil && len(f.Locations) > l.Stripes() {
		out = append(out, Finding{Class: ReplicaDiff, Fid: f.Fid, Stripe: -1, Path: f.Path,
			Detail: fmt.Sprintf("%d locations (%s) for layout %s", len(f.Locations), fsList(f.Locations), f.Layout)})
	}
	return out
}

func fsList(ids []uint32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return strings.Join(parts, ",")
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Inventory is the set of fids a completed scan found on a filesystem
// (and stripes rebuilt there since). It is safe for concurrent use.
type Inventory struct {
	Start time.Time // when the scan started: stripes finished before are in it
	fids  []uint64  // sorted

	mu    sync.Mutex
	added map[uint64]bool
}

// NewInventory makes an inventory of fids (it takes the slice).
func NewInventory(start time.Time, fids []uint64) *Inventory {
	slices.Sort(fids)
	return &Inventory{Start: start, fids: slices.Compact(fids)}
}

// Has reports whether fid was found (or added).
func (v *Inventory) Has(fid uint64) bool {
	if _, ok := slices.BinarySearch(v.fids, fid); ok {
		return true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.added[fid]
}

// Add records a stripe of fid written since the scan.
func (v *Inventory) Add(fid uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.added == nil {
		v.added = map[uint64]bool{}
	}
	v.added[fid] = true
}

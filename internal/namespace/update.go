package namespace

// Files that change in place. The namespace decides an update: the
// storage server that ran an update session has prepared its journals on
// every stripe it reached (backend.Updater) and asks CommitUpdate; the
// file's new data version is recorded here in one batch (size, mtime,
// quota, the subtree's size, the stripes that missed the update), and
// only then are the journals rolled forward. A storage server that finds
// a prepared journal after a crash asks the file's data version
// (DataVersion) to know whether it was committed.

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// DataUpdate is a committed change of a file's bytes.
type DataUpdate struct {
	Fid  uint64
	Base uint64 // data version the update was made from
	Tag  uint64 // the storage server's name for the update (Inode.DataTag)
	Size int64  // the file's size after it
	// Locations are the file's filesystems the update was made on; a file
	// without stripes (empty) gets them here.
	Locations []uint32
	// Stale are the stripes the update did not reach.
	Stale []int
	// Sums are checksums of the new content that the storage server
	// could compute (types the file keeps); the others are dropped and
	// computed again on request.
	Sums map[string]string
}

// CommitUpdate records update u: the file gets data version u.Base+1.
// It fails with kerr.Busy when the file is no longer at u.Base (another
// update committed first: the caller prepares again from the newer
// version) or its stripes moved, with kerr.Quota when the file grew past
// a quota, and with kerr.Unavailable when too few stripes would be left
// current to read it.
func (ns *Namespace) CommitUpdate(u DataUpdate) (f *Inode, err error) {
	what := "fid " + strconv.FormatUint(u.Fid, 10)
	err = ns.mutate("update", func(tx *txn) error {
		n, err := ns.inode(u.Fid, "update")
		if err != nil {
			return err
		}
		if n.IsDir {
			return kerr.New(kerr.IsDir, "update", what, "is a directory")
		}
		if err := notLink("update", n.Name, n); err != nil {
			return err
		}
		name := n.Name
		if n.DataVersion != u.Base {
			return kerr.New(kerr.Busy, "update", name, fmt.Sprintf("the file changed since the update began (data version %d, the update is from %d)", n.DataVersion, u.Base))
		}
		locs := n.Locations
		if len(locs) == 0 {
			locs = u.Locations
		}
		if !slices.Equal(locs, u.Locations) {
			return kerr.New(kerr.Busy, "update", name, "the file's stripes moved during the update; write again")
		}
		stale := slices.Clone(n.Stale)
		for _, i := range u.Stale {
			if i < 0 || i >= len(locs) {
				return kerr.New(kerr.Invalid, "update", name, fmt.Sprintf("no stripe %d", i))
			}
			if !slices.Contains(stale, i) {
				stale = append(stale, i)
			}
		}
		slices.Sort(stale)
		if len(locs) > 0 {
			l, err := layout.Parse(n.Layout)
			if err != nil {
				return kerr.Wrap(kerr.Internal, "update", name, err)
			}
			need := 1
			if l.Kind == layout.EC {
				need = l.K
			}
			if len(locs)-len(stale) < need {
				return kerr.New(kerr.Unavailable, "update", name, fmt.Sprintf("only %d of %d stripes could be updated, %d needed", len(locs)-len(stale), len(locs), need))
			}
		}
		d := u.Size - n.Size
		if d > 0 {
			if err := ns.fits(tx, n.Parent, n.UID, n.GID, Amount{Bytes: d}, name); err != nil {
				return kerr.WithOp(err, "update")
			}
		}
		ns.charge(tx, n.Parent, n.UID, n.GID, Amount{Bytes: d})
		now := ns.opts.Now().UnixNano()
		c := n.clone()
		c.Size, c.MTime, c.CTime = u.Size, now, now
		c.DataVersion, c.DataTag = u.Base+1, u.Tag
		c.Locations, c.Stale = locs, stale
		for t := range c.Checksums {
			c.Checksums[t] = u.Sums[t] // "" : out of date, computed on request
		}
		putFile(tx, c)
		tx.emit(Event{Kind: Modified, Ino: c.ID, Parent: c.Parent, Name: c.Name, DataVersion: c.DataVersion, Size: c.Size, MTime: c.MTime})
		if err := ns.account(tx, c.Parent, d, 0, 0, now); err != nil {
			return kerr.Wrap(kerr.Internal, "update", name, err)
		}
		f = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f.clone(), nil
}

// MarkStale records that stripe idx of file fid did not take the update
// that gave the file data version version (its journal could not be
// rolled forward); a no-op when the file is at another version by now.
func (ns *Namespace) MarkStale(fid, version uint64, idx int) error {
	return ns.setStale(fid, version, idx, true)
}

// ClearStale records that stripe idx of file fid holds data version
// version again (rebuilt from a current one).
func (ns *Namespace) ClearStale(fid, version uint64, idx int) error {
	return ns.setStale(fid, version, idx, false)
}

func (ns *Namespace) setStale(fid, version uint64, idx int, stale bool) error {
	return ns.mutate("stale", func(tx *txn) error {
		n, err := ns.inode(fid, "stale")
		if err != nil {
			return err
		}
		if n.IsDir || n.DataVersion != version || idx < 0 || idx >= len(n.Locations) || slices.Contains(n.Stale, idx) == stale {
			return nil
		}
		c := n.clone()
		if stale {
			c.Stale = append(c.Stale, idx)
			slices.Sort(c.Stale)
		} else {
			c.Stale = slices.DeleteFunc(c.Stale, func(i int) bool { return i == idx })
		}
		putFile(tx, c)
		tx.emit(Event{Kind: AttrChanged, Ino: c.ID, Parent: c.Parent, Name: c.Name})
		return nil
	})
}

package namespace

// Moves of stripes between filesystems (drain, balance) and conversions
// of whole files to another layout or space. The namespace service
// schedules them and a storage server copies the bytes; the namespace
// only records what is in flight and switches a file's locations once
// the copy is complete, in one batch, if the file is still the one the
// copy was made of. A committed file never changes (a rewrite makes a
// new file id), so "still the one" is "its id still names a committed
// file with the stripe where the move found it".
//
// A stripe's physical name is its file id, so a new stripe must never
// meet an old one of the same file on its target: BeginMove refuses a
// target that holds a stripe of the file, has one queued for deletion
// or has a move of the file in flight. A move in flight is an "M" record
// written before the first byte is copied; whatever ends it (switch,
// a copy dropped, a restart that rolls it back) queues the stripe that
// is no longer wanted for deletion in the same batch, so a half-copied
// stripe is never registered and never left behind.

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/layout"
)

// Move is stripe Stripe of file Fid being copied from filesystem From to
// filesystem To.
type Move struct {
	Fid      uint64
	Stripe   int
	From, To uint32
	Started  int64 // unix ns
}

func (m Move) String() string {
	return fmt.Sprintf("stripe %d of fid %d from fs %d to fs %d", m.Stripe, m.Fid, m.From, m.To)
}

// "M" to(4) fid(8) stripe(2) -> from(4) started(8)
func moveKey(to uint32, fid uint64, idx int) []byte {
	k := binary.BigEndian.AppendUint32([]byte{'M'}, to)
	k = u64(k, fid)
	return binary.BigEndian.AppendUint16(k, uint16(idx))
}

func (m Move) value() []byte {
	return u64(binary.BigEndian.AppendUint32(nil, m.From), uint64(m.Started))
}

func decodeMove(k, v []byte) (Move, bool) {
	if len(k) != 15 || len(v) != 12 {
		return Move{}, false
	}
	return Move{To: binary.BigEndian.Uint32(k[1:]), Fid: binary.BigEndian.Uint64(k[5:]), Stripe: int(binary.BigEndian.Uint16(k[13:])),
		From: binary.BigEndian.Uint32(v), Started: int64(binary.BigEndian.Uint64(v[4:]))}, true
}

// anyFor reports whether a key of kind ('X' deletion, 'M' move) exists
// for a stripe of fid on filesystem fsid.
func (ns *Namespace) anyFor(kind byte, fsid uint32, fid uint64) (bool, error) {
	prefix := u64(binary.BigEndian.AppendUint32([]byte{kind}, fsid), fid)
	found := false
	err := ns.eng.Scan(prefix, kv.PrefixEnd(prefix), func(_, _ []byte) bool { found = true; return false })
	return found, err
}

// busyFor says why filesystem fsid cannot take a new stripe of fid now
// ("" when it can): a stripe of the file queued for deletion there, or a
// move of the file there in flight.
func (ns *Namespace) busyFor(fsid uint32, fid uint64) (string, error) {
	if q, err := ns.anyFor('X', fsid, fid); err != nil || q {
		return "a stripe of the file is still queued for deletion there", err
	}
	if m, err := ns.anyFor('M', fsid, fid); err != nil || m {
		return "a move of the file there is in flight", err
	}
	return "", nil
}

// MoveInFlight reports whether a stripe of fid is being copied onto
// filesystem fsid (fsck: such a stripe is neither registered nor an
// orphan yet).
func (ns *Namespace) MoveInFlight(fsid uint32, fid uint64) (bool, error) {
	return ns.anyFor('M', fsid, fid)
}

// BeginMove records m before its first byte is copied. The file must be
// committed with stripe m.Stripe on m.From; m.To must hold no stripe of
// it, queued for deletion or in flight (kerr.Busy). It returns the file.
func (ns *Namespace) BeginMove(m Move) (f *Inode, err error) {
	what := "fid " + strconv.FormatUint(m.Fid, 10)
	err = ns.mutate("move", func(tx *txn) error {
		if f, err = ns.inode(m.Fid, "move"); err != nil {
			return err
		}
		if f.IsDir {
			return kerr.New(kerr.IsDir, "move", what, "is a directory")
		}
		if m.Stripe < 0 || m.Stripe >= len(f.Locations) || f.Locations[m.Stripe] != m.From {
			return kerr.New(kerr.NotFound, "move", what, fmt.Sprintf("stripe %d is not on fs %d (any more)", m.Stripe, m.From))
		}
		if slices.Contains(f.Locations, m.To) {
			return kerr.New(kerr.Exists, "move", what, fmt.Sprintf("fs %d already holds a stripe of the file", m.To))
		}
		why, err := ns.busyFor(m.To, m.Fid)
		if err != nil {
			return kerr.Wrap(kerr.Internal, "move", what, err)
		}
		if why != "" {
			return kerr.New(kerr.Busy, "move", what, fmt.Sprintf("fs %d: %s", m.To, why))
		}
		if m.Started == 0 {
			m.Started = ns.opts.Now().UnixNano()
		}
		tx.put(moveKey(m.To, m.Fid, m.Stripe), m.value())
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f.clone(), nil
}

// FinishMove ends move m. With copied (the new stripe is complete and
// verified), if the file is still committed under its id with the stripe
// on m.From, its location switches to m.To and the old stripe is queued
// for deletion due at deleteAt (a reader granted the old location before
// the switch can finish meanwhile). Otherwise the copy is queued for
// deletion at once. switched says which.
func (ns *Namespace) FinishMove(m Move, copied bool, deleteAt time.Time) (switched bool, err error) {
	err = ns.mutate("move", func(tx *txn) error {
		key := moveKey(m.To, m.Fid, m.Stripe)
		if _, err := ns.eng.Get(key); err != nil {
			return kerr.New(kerr.NotFound, "move", m.String(), "no such move in flight")
		}
		tx.del(key)
		f, err := ns.inode(m.Fid, "move")
		if err != nil && !kerr.Is(err, kerr.NotFound) {
			return err
		}
		// A copy someone queued for deletion meanwhile (fsck dropping
		// what it took for an unregistered copy) is never switched in.
		if _, err := ns.eng.Get(deletionKey(m.To, m.Fid, m.Stripe)); err == nil {
			return nil
		}
		if !copied || f == nil || f.IsDir || m.Stripe >= len(f.Locations) || f.Locations[m.Stripe] != m.From ||
			slices.Contains(f.Locations, m.To) {
			queueDeletionAt(tx, m.To, m.Fid, m.Stripe, time.Time{})
			return nil
		}
		f.Locations[m.Stripe] = m.To
		putFile(tx, f)
		queueDeletionAt(tx, m.From, m.Fid, m.Stripe, deleteAt)
		tx.emit(Event{Kind: AttrChanged, Ino: f.ID, Parent: f.Parent, Name: f.Name})
		switched = true
		return nil
	})
	return switched, err
}

// PendingMoves lists the moves in flight.
func (ns *Namespace) PendingMoves() ([]Move, error) {
	var out []Move
	err := ns.eng.Scan([]byte{'M'}, []byte{'N'}, func(k, v []byte) bool {
		if m, ok := decodeMove(k, v); ok {
			out = append(out, m)
		}
		return true
	})
	return out, err
}

// AbortMoves rolls back every move in flight (at start: whoever copied
// is gone, the copies may be incomplete), queueing the copies for
// deletion. It returns how many.
func (ns *Namespace) AbortMoves() (int, error) {
	ms, err := ns.PendingMoves()
	if err != nil || len(ms) == 0 {
		return 0, err
	}
	err = ns.mutate("move", func(tx *txn) error {
		for _, m := range ms {
			tx.del(moveKey(m.To, m.Fid, m.Stripe))
			queueDeletionAt(tx, m.To, m.Fid, m.Stripe, time.Time{})
		}
		return nil
	})
	return len(ms), err
}

// convertOf marks a pending record as the staged copy of a conversion:
// it holds the id of the file converted. Such a record is never claimed
// or committed as an upload; FinishConvert switches it in.
const convertOf = "sys.kaon.convert-of"

// BeginConvert starts converting committed file fid to layout l on
// filesystems locs: a pending file with a new id at the same place,
// invisible like an upload (and, like an upload, aborted if the namespace
// restarts before it is switched in), computing the checksums the file
// has. No quota is booked: the file's size does not change.
func (ns *Namespace) BeginConvert(fid uint64, l layout.Layout, locs []uint32) (p *Inode, err error) {
	err = ns.mutate("convert", func(tx *txn) error {
		f, err := ns.inode(fid, "convert")
		if err != nil {
			return err
		}
		if f.IsDir {
			return kerr.New(kerr.IsDir, "convert", "fid "+strconv.FormatUint(fid, 10), "is a directory")
		}
		if err := notLink("convert", f.Name, f); err != nil {
			return err
		}
		if len(locs) != l.Stripes() {
			return kerr.New(kerr.Invalid, "convert", f.Name, "placement does not match the layout")
		}
		now := ns.opts.Now().UnixNano()
		p = &Inode{ID: ns.allocID(tx), Parent: f.Parent, Name: f.Name, Mode: f.Mode, UID: f.UID, GID: f.GID,
			CTime: now, MTime: now, BTime: now, Layout: l.String(), Locations: locs, Checksums: map[string]string{},
			XAttrs: map[string]string{convertOf: strconv.FormatUint(fid, 10)}}
		for t := range f.Checksums {
			if checksum.Valid(t) {
				p.Checksums[t] = ""
			}
		}
		tx.put(pendingKey(p.ID), p.encode(nil))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// FinishConvert switches file oldFid to its converted copy newFid: the
// file keeps its name, attributes, times and checksums, and takes the
// copy's id, layout and locations, in one batch. It does so only if
// oldFid is still a committed file (not rewritten or removed), of size
// size, and every checksum both the file and sums have agrees; the old
// stripes are then queued for deletion due at deleteAt. Otherwise the
// copy is dropped (its stripes queued at once) and the error says why.
func (ns *Namespace) FinishConvert(oldFid, newFid uint64, size int64, sums map[string]string, deleteAt time.Time) error {
	return ns.mutate("convert", func(tx *txn) error {
		p, err := ns.Pending(newFid)
		if err != nil {
			return err
		}
		if p.XAttrs[convertOf] != strconv.FormatUint(oldFid, 10) {
			return kerr.New(kerr.Invalid, "convert", p.Name, "pending file is not a conversion of this file")
		}
		drop := func(k kerr.Kind, why string) error {
			tx.del(pendingKey(newFid))
			queueDeletion(tx, p)
			tx.result = kerr.New(k, "convert", p.Name, why)
			return nil
		}
		f, err := ns.inode(oldFid, "convert")
		switch {
		case kerr.Is(err, kerr.NotFound):
			return drop(kerr.NotFound, "the file was removed or rewritten during its conversion; the copy is dropped")
		case err != nil:
			return err
		case f.IsDir:
			return drop(kerr.IsDir, "is a directory")
		case f.Size != size:
			return drop(kerr.IO, fmt.Sprintf("the copy has %d bytes, the file %d", size, f.Size))
		}
		compared := 0
		for t, v := range f.Checksums {
			if v == "" || sums[t] == "" {
				continue
			}
			if sums[t] != v {
				return drop(kerr.IO, fmt.Sprintf("%s of the copy is %s, the file's is %s", t, sums[t], v))
			}
			compared++
		}
		if compared == 0 && size > 0 {
			return drop(kerr.IO, "no checksum of the copy could be compared with the file's")
		}
		n := f.clone()
		n.ID, n.Layout, n.Locations = newFid, p.Layout, p.Locations
		for t, v := range sums {
			if n.Checksums[t] == "" && v != "" {
				if n.Checksums == nil {
					n.Checksums = map[string]string{}
				}
				n.Checksums[t] = v
			}
		}
		putFile(tx, n)
		tx.put(inodeKey(newFid), fileIndex(n.Parent, n.Name))
		tx.del(inodeKey(oldFid))
		tx.del(pendingKey(newFid))
		for i, fs := range f.Locations {
			queueDeletionAt(tx, fs, oldFid, i, deleteAt)
		}
		tx.emit(Event{Kind: Removed, Ino: oldFid, Parent: n.Parent, Name: n.Name})
		tx.emit(Event{Kind: Committed, Ino: newFid, Parent: n.Parent, Name: n.Name, Size: n.Size, MTime: n.MTime})
		return nil
	})
}

// AbortConvert drops the staged copy newFid of a conversion that failed.
func (ns *Namespace) AbortConvert(newFid uint64) error {
	return ns.mutate("convert", func(tx *txn) error {
		p, err := ns.Pending(newFid)
		if err != nil {
			return err
		}
		tx.del(pendingKey(newFid))
		queueDeletion(tx, p)
		return nil
	})
}

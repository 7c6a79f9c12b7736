package namespace

import (
	"slices"
	"time"
)

// Uploads in flight across a change of namespace server. A pending upload
// is a record in the store ('P'), but what a namespace server knows about
// it beyond that lives in its memory: whether a storage server claimed it
// (ClaimUpload) and what quota it booked (book). A server that starts
// after a crash or a restart aborts every pending upload (AbortStale):
// their writers are gone or will find their commit refused. A server that
// steps down cleanly hands its memory over instead (HandOver), and its
// successor adopts it (Adopt), so storage servers still streaming commit
// to the successor. Pending uploads nobody writes any more are found later
// (PendingUploads, AbortUploads).

// InFlight is what a namespace server hands its successor about its
// uploads in flight.
type InFlight struct {
	Claimed []uint64          `json:"claimed,omitempty"` // pending uploads a storage server claimed
	Booked  map[uint64]Amount `json:"booked,omitempty"`  // quota booked, by pending upload
}

// HandOver returns the uploads in flight and refuses claims from then on
// (busy: the storage server asks again, and reaches the successor). The
// caller has stopped the store from taking writes and let it drain, so no
// mutation changes what it returns.
func (ns *Namespace) HandOver() InFlight {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	ns.handedOver = true
	in := InFlight{Booked: map[uint64]Amount{}}
	for fid := range ns.claimed {
		in.Claimed = append(in.Claimed, fid)
	}
	slices.Sort(in.Claimed)
	for fid, b := range ns.bookings {
		in.Booked[fid] = b.amount
	}
	return in
}

// Adopt takes over the uploads in flight a server that stepped down
// handed over: its pending uploads stay pending, claimed and booked as
// they were. Copies of conversions in flight are dropped, as after a
// restart (the mover that wrote them is gone; the file is converted
// again). It returns how many pending uploads it kept.
func (ns *Namespace) Adopt(in InFlight) (int, error) {
	claimed := map[uint64]bool{}
	for _, fid := range in.Claimed {
		claimed[fid] = true
	}
	var pending []*Inode
	if err := ns.scanPending(func(f *Inode) { pending = append(pending, f) }); err != nil {
		return 0, err
	}
	var drop []uint64
	kept := 0
	ns.mu.Lock()
	tx := &txn{}
	for _, f := range pending {
		if f.XAttrs[convertOf] != "" {
			drop = append(drop, f.ID)
			continue
		}
		kept++
		if claimed[f.ID] {
			ns.claimed[f.ID] = true
		}
		if a, ok := in.Booked[f.ID]; ok {
			ns.book(tx, f.ID, f.Parent, f.UID, f.GID, a)
		}
	}
	ns.applyQuota(tx)
	ns.mu.Unlock()
	_, err := ns.abortEach(drop)
	return kept, err
}

// PendingUploads returns the pending uploads (not copies of conversions)
// created before t.
func (ns *Namespace) PendingUploads(before time.Time) ([]uint64, error) {
	var out []uint64
	err := ns.scanPending(func(f *Inode) {
		if f.CTime < before.UnixNano() && f.XAttrs[convertOf] == "" {
			out = append(out, f.ID)
		}
	})
	return out, err
}

// scanPending calls fn for every pending upload's record ('P' keys; a
// record that does not decode is skipped).
func (ns *Namespace) scanPending(fn func(*Inode)) error {
	return ns.eng.Scan([]byte{'P'}, []byte{'Q'}, func(_, v []byte) bool {
		if f, err := decodeInode(v); err == nil {
			fn(f)
		}
		return true
	})
}

// AbortUploads aborts those of the pending uploads fids that are still
// pending (claimed or not) and queues their stripes for deletion. It
// returns how many it aborted.
func (ns *Namespace) AbortUploads(fids []uint64) (int, error) { return ns.abortEach(fids) }

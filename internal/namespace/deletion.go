package namespace

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"time"

	"github.com/kaon-storage/kaon/internal/kv"
)

// Deletion is one physical stripe a storage server must remove.
type Deletion struct {
	FsID   uint32 `json:"fsid"`
	Fid    uint64 `json:"fid"`
	Stripe int    `json:"stripe"`
}

// queueDeletion queues every stripe of f for removal by its storage server.
func queueDeletion(tx *txn, f *Inode) {
	for i, fs := range f.Locations {
		tx.put(deletionKey(fs, f.ID, i), nil)
	}
}

// queueDeletionAt queues stripe idx of fid on filesystem fsid for
// removal once at has passed (zero: at once). A stripe a move or a
// conversion replaced waits so that reads granted before the switch can
// finish. The value of an "X" key is that time (8 bytes, unix ns) or
// empty.
func queueDeletionAt(tx *txn, fsid uint32, fid uint64, idx int, at time.Time) {
	var v []byte
	if !at.IsZero() {
		v = u64(nil, uint64(at.UnixNano()))
	}
	tx.put(deletionKey(fsid, fid, idx), v)
}

// Deletions lists up to max queued deletions for filesystem fsid that are
// due, once the mutations that queued them are durable (Durable): a
// deletion handed out from a mutation a crash or a failover then lost
// (a replacing upload's commit, a remove) would take a stripe of a file
// that stays.
func (ns *Namespace) Deletions(fsid uint32, max int) ([]Deletion, error) {
	prefix := binary.BigEndian.AppendUint32([]byte{'X'}, fsid)
	now := uint64(ns.opts.Now().UnixNano())
	var out []Deletion
	err := ns.eng.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
		if len(k) != 15 || (len(v) == 8 && binary.BigEndian.Uint64(v) > now) {
			return true
		}
		out = append(out, Deletion{FsID: fsid, Fid: binary.BigEndian.Uint64(k[5:]), Stripe: int(binary.BigEndian.Uint16(k[13:]))})
		return len(out) < max
	})
	if err != nil || len(out) == 0 {
		return nil, err
	}
	if err := ns.Durable(context.Background()); err != nil {
		return nil, err
	}
	return out, nil
}

// Durable returns once every mutation applied so far is durable: a lazy
// batch synced, or on a replicated instance committed to the shared
// engine (kv.Barrier); with the error that means it may never be. What
// leaves the namespace to be acted on for good — a stripe to remove —
// must have passed it.
func (ns *Namespace) Durable(ctx context.Context) error {
	if b, ok := ns.eng.(kv.Barrier); ok {
		if err := b.Barrier(ctx); err != nil {
			return storeError("sync", err)
		}
	}
	return nil
}

// AckDeletions removes done deletions from the queue, in bounded
// mutations (a heartbeat may report thousands; a replicated store bounds
// what one commit holds).
func (ns *Namespace) AckDeletions(ds []Deletion) error {
	for len(ds) > 0 {
		chunk := ds[:min(len(ds), ackChunk)]
		ds = ds[len(chunk):]
		if err := ns.mutate("delete", func(tx *txn) error {
			for _, d := range chunk {
				tx.del(deletionKey(d.FsID, d.Fid, d.Stripe))
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// ackChunk is how many deletions one mutation acknowledges: within
// etcd's default of 128 operations per transaction.
const ackChunk = 100

// DeletionQueued reports whether stripe idx of fid on filesystem fsid is
// still queued for deletion (not yet acknowledged by its storage server).
func (ns *Namespace) DeletionQueued(fsid uint32, fid uint64, idx int) (bool, error) {
	_, err := ns.eng.Get(deletionKey(fsid, fid, idx))
	if errors.Is(err, kv.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Leftovers is what filesystem fsid still holds besides the stripes of
// committed files: stripes queued for deletion there (due or not: they
// stay on its disk until its storage server acknowledges their removal;
// Due is when the last of them is), and pending uploads or conversion
// copies placed on it (their stripe may still be written there).
type Leftovers struct {
	Queued  int
	Due     time.Time
	Pending int
}

// LeftOn reports fsid's Leftovers.
func (ns *Namespace) LeftOn(fsid uint32) (Leftovers, error) {
	var l Leftovers
	prefix := binary.BigEndian.AppendUint32([]byte{'X'}, fsid)
	err := ns.eng.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
		if len(k) == 15 {
			l.Queued++
			if len(v) == 8 {
				if at := time.Unix(0, int64(binary.BigEndian.Uint64(v))); at.After(l.Due) {
					l.Due = at
				}
			}
		}
		return true
	})
	if err != nil {
		return l, err
	}
	err = ns.scanPending(func(f *Inode) {
		if slices.Contains(f.Locations, fsid) {
			l.Pending++
		}
	})
	return l, err
}

package namespace

import (
	"encoding/binary"
	"errors"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
)

// Reads for fsck (package fsck, run by the namespace service): files by
// fid in batches, every committed file in key order, the deletion queue.

// FidState is what the namespace knows about a file id.
type FidState struct {
	File    *Inode // the committed file with this id (nil: none)
	Pending bool   // an upload in progress has this id
}

// LookupFids returns the state of each fid, in order, under one read lock.
func (ns *Namespace) LookupFids(fids []uint64) ([]FidState, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	out := make([]FidState, len(fids))
	for i, fid := range fids {
		v, err := ns.eng.Get(inodeKey(fid))
		switch {
		case errors.Is(err, kv.ErrNotFound):
			_, err := ns.eng.Get(pendingKey(fid))
			switch {
			case err == nil:
				out[i].Pending = true
			case !errors.Is(err, kv.ErrNotFound):
				return nil, kerr.Wrap(kerr.Internal, "fsck", "", err)
			}
			continue
		case err != nil:
			return nil, kerr.Wrap(kerr.Internal, "fsck", "", err)
		}
		parent, name, isFile := parseFileIndex(v)
		if !isFile {
			continue // a container's id: no file
		}
		n, err := ns.child(parent, name)
		if err != nil {
			return nil, kerr.Wrap(kerr.Internal, "fsck", name, err)
		}
		if n != nil && !n.IsDir && !n.IsLink() && n.ID == fid {
			out[i].File = n
		}
	}
	return out, nil
}

// PathOf returns the path of n (a file or container it returned).
func (ns *Namespace) PathOf(n *Inode) (string, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.pathOf(n)
}

// ScanFiles calls fn for up to max committed files (links, which have
// no data, left out) from key from (nil:
// the first), in key order, and returns the key to continue from (nil
// when every file was seen). The files of one call are read under one
// read lock; between calls the namespace may change.
func (ns *Namespace) ScanFiles(from []byte, max int, fn func(f *Inode)) (next []byte, err error) {
	if from == nil {
		from = []byte{'D'}
	}
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	var derr error
	seen := 0
	err = ns.eng.Scan(from, []byte{'E'}, func(k, v []byte) bool {
		if seen == max {
			next = append([]byte(nil), k...)
			return false
		}
		if len(k) < 9 || len(v) < 2 || v[0] != 'f' || isLinkEntry(v) {
			return true // a container's entry, or a link's (no data)
		}
		n, err := decodeInode(v[1:])
		if err != nil {
			derr = kerr.Wrap(kerr.Internal, "fsck", string(k[9:]), err)
			return false
		}
		n.Parent, n.Name = binary.BigEndian.Uint64(k[1:9]), string(k[9:])
		seen++
		fn(n)
		return true
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, err
	}
	return next, nil
}

// QueueDeletions queues stripes for removal by their storage servers
// (fsck drops orphans and copies no file registers).
func (ns *Namespace) QueueDeletions(ds []Deletion) error {
	for len(ds) > 0 { // bounded commits, as AckDeletions
		chunk := ds[:min(len(ds), ackChunk)]
		ds = ds[len(chunk):]
		if err := ns.mutate("fsck", func(tx *txn) error {
			for _, d := range chunk {
				tx.put(deletionKey(d.FsID, d.Fid, d.Stripe), nil)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

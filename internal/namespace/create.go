package namespace

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// CreateOptions says how BeginCreate behaves.
type CreateOptions struct {
	Exclusive bool   // fail if the file exists
	Mode      uint32 // permission bits (default 0644)
	Layout    string // override the inherited layout (must parse)
	SizeHint  int64  // the size the client announced, booked against quota
	// Rewrite, when not 0, is the id of the file at the path that the
	// upload rewrites whole: it must still be that file at data version
	// RewriteVersion at the create and at the commit (else kerr.Busy).
	// The new file keeps the old one's attributes (mode, owner, extended
	// attributes, birth time) and no version of the old one is kept: a
	// change of the file's content in place, written as one upload. Its
	// new id names the new stripes (data version 0, as uploaded): the id
	// changes, as a conversion's does.
	Rewrite        uint64
	RewriteVersion uint64
	// With Rewrite, what the writer set on the file while it wrote it,
	// committed with the content (one commit, where a chmod and a utimes
	// of their own would each be one): SetMode replaces the mode with
	// Mode, MTime (Unix ns, when not 0) is the modification time the
	// commit records instead of its own. Only the owner or root may (as
	// chmod and an explicit utimes), checked at the create.
	SetMode bool
	MTime   int64
}

// rewriteMTime holds, on a pending rewrite, the modification time its
// commit records (CreateOptions.MTime).
const rewriteMTime = "sys.kaon.rewrite-mtime"

// rewriteOf marks a pending record as the rewrite of an existing file:
// it holds "ID.DATAVERSION" of the file it replaces (CreateOptions.Rewrite).
const rewriteOf = "sys.kaon.rewrite-of"

func rewriteMark(n *Inode) string {
	return strconv.FormatUint(n.ID, 10) + "." + strconv.FormatUint(n.DataVersion, 10)
}

// Placement chooses one filesystem per stripe for a new file, in space
// (the parent's nsapi.AttrSpace; "" when it has none).
type Placement func(l layout.Layout, space string) ([]uint32, error)

// prepareCreate validates a create of path and builds the new file's inode
// (layout and checksum policy from the parent, placed by place). It returns
// the inode, its parent, and the file it replaces (nil if none). Caller
// holds ns.mu.
func (ns *Namespace) prepareCreate(tx *txn, c Caller, path string, o CreateOptions, place Placement) (f, parent, old *Inode, err error) {
	p, n, parent, err := ns.lookup(c, "create", path)
	if err != nil {
		return nil, nil, nil, err
	}
	if p == "/" || parent == nil {
		return nil, nil, nil, kerr.New(kerr.IsDir, "create", p, "is a directory")
	}
	if err := reserved("create", p, parent); err != nil {
		return nil, nil, nil, err
	}
	if o.Rewrite != 0 && (n == nil || n.ID != o.Rewrite || n.IsDir || n.IsLink() || n.DataVersion != o.RewriteVersion) {
		return nil, nil, nil, kerr.New(kerr.Busy, "create", p, "the file to rewrite changed (it is not that file at that data version any more)")
	}
	if n != nil {
		switch {
		case n.IsDir:
			return nil, nil, nil, kerr.New(kerr.IsDir, "create", p, "is a directory")
		case o.Exclusive:
			return nil, nil, nil, kerr.New(kerr.Exists, "create", p, "file exists")
		case !ns.permits(c, n, parent, Update):
			return nil, nil, nil, kerr.New(kerr.Permission, "create", p, "permission to replace the file denied")
		}
	}
	// A rewrite changes the file's content, not the directory's names:
	// the file's write permission (Update, above) is what it needs.
	if o.Rewrite == 0 && !ns.permits(c, parent, parent, Write|Search) {
		return nil, nil, nil, kerr.New(kerr.Permission, "create", p, "write permission denied on parent")
	}
	ls := o.Layout
	if ls == "" {
		ls = parent.XAttrs[nsapi.AttrLayout]
	}
	if ls == "" {
		ls = "plain"
	}
	l, err := layout.Parse(ls)
	if err != nil {
		return nil, nil, nil, kerr.WithOp(err, "create")
	}
	sums := DefaultChecksums
	if v := parent.XAttrs[nsapi.AttrChecksums]; v != "" {
		sums = strings.Split(v, ",")
	}
	var locs []uint32
	if place != nil {
		if locs, err = place(l, parent.XAttrs[nsapi.AttrSpace]); err != nil {
			var ke *kerr.Error
			if errors.As(err, &ke) {
				ke.Op, ke.Path = "create", p
				return nil, nil, nil, ke
			}
			return nil, nil, nil, kerr.Wrap(kerr.NoSpace, "create", p, err)
		}
	}
	// A replacement that names no mode keeps the permission bits of the
	// file it replaces, as open(O_TRUNC) does (a private file stays
	// private), without setuid and setgid (new content).
	mode := o.Mode & 0o7777
	switch {
	case mode != 0:
	case n != nil:
		mode = n.Mode & 0o1777
	default:
		mode = 0o644
	}
	now := ns.opts.Now().UnixNano()
	f = &Inode{ID: ns.allocID(tx), Parent: parent.ID, Name: p[strings.LastIndexByte(p, '/')+1:],
		Mode: mode, UID: c.UID, GID: newGID(c, parent), CTime: now, MTime: now, BTime: now,
		Layout: l.String(), Locations: locs, Checksums: map[string]string{}}
	for _, s := range sums {
		f.Checksums[strings.TrimSpace(s)] = ""
	}
	if o.Rewrite != 0 {
		f.Mode, f.UID, f.GID, f.BTime = n.Mode, n.UID, n.GID, n.BTime
		if c.UID != 0 { // a write by anyone but root clears setuid, and setgid where it means set-group-ID
			f.Mode &^= 0o4000
			if f.Mode&0o2010 == 0o2010 {
				f.Mode &^= 0o2000
			}
		}
		f.XAttrs = map[string]string{}
		for k, v := range n.XAttrs {
			f.XAttrs[k] = v
		}
		f.XAttrs[rewriteOf] = rewriteMark(n)
		if o.SetMode || o.MTime != 0 {
			if err := owner(c, n, p); err != nil {
				return nil, nil, nil, kerr.WithOp(err, "create")
			}
		}
		if o.SetMode {
			f.Mode = o.Mode & 0o7777
		}
		if o.MTime != 0 {
			f.XAttrs[rewriteMTime] = strconv.FormatInt(o.MTime, 10)
		}
	} else if o.SetMode || o.MTime != 0 {
		return nil, nil, nil, kerr.New(kerr.Invalid, "create", p, "a mode or time to commit with the content is for a rewrite only")
	}
	return f, parent, n, nil
}

// BeginCreate validates a write to path, resolves its layout and checksum
// policy from the parent, places it, and records a pending upload. The file
// stays invisible until Commit.
//
// It does not wait for the pending record to be durable: the client is
// only sent to a storage server, and waiting for the store's sync there
// (hundreds of milliseconds when the disk is busy with the uploads' own
// data) delayed the redirect past the 1 s after which curl sends the body
// anyway. The record is applied (a storage server's claim reads it) and
// is made durable by the next mutation that waits, at the latest the
// upload's commit. One lost with the namespace server (a crash before a
// sync, a power failure, a failover) is an upload whose claim or commit
// fails, as a restart aborts every pending upload anyway.
func (ns *Namespace) BeginCreate(c Caller, path string, o CreateOptions, place Placement) (f *Inode, err error) {
	err = ns.mutate("create", func(tx *txn) error {
		tx.lazy = true
		var old *Inode
		if f, _, old, err = ns.prepareCreate(tx, c, path, o, place); err != nil {
			return err
		}
		want := Amount{Bytes: max(o.SizeHint, 0), Files: 1}
		if old != nil {
			want.Files = 0 // it replaces a file
		}
		if err := ns.fits(tx, f.Parent, f.UID, f.GID, want, path); err != nil {
			return kerr.WithOp(err, "create")
		}
		ns.book(tx, f.ID, f.Parent, f.UID, f.GID, want)
		tx.put(pendingKey(f.ID), f.encode(nil))
		tx.emit(Event{Kind: Created, Ino: f.ID, Parent: f.Parent, Name: f.Name})
		return nil
	})
	return f, err
}

// CreateEmpty creates (or, without Exclusive, replaces with) an empty file
// in one atomic step. An empty file needs no stripes: metadata-only creates
// (mdtest, touch, a client that opens for writing and closes at once).
func (ns *Namespace) CreateEmpty(c Caller, path string, o CreateOptions) (f *Inode, err error) {
	err = ns.mutate("create", func(tx *txn) error {
		var parent, old *Inode
		if f, parent, old, err = ns.prepareCreate(tx, c, path, o, nil); err != nil {
			return err
		}
		for t := range f.Checksums {
			f.Checksums[t] = checksum.EmptySum(t)
		}
		return ns.link(tx, parent, f, old, false)
	})
	return f, err
}

// link makes file f visible in parent, replacing old: its stripes are
// queued for deletion, or, where parent keeps versions, it becomes the
// newest version of f (versions.go) — unless f rewrites old (a change
// in place, which keeps no version). It updates quota and the subtree
// accounting. Caller holds ns.mu.
func (ns *Namespace) link(tx *txn, parent, f, old *Inode, rewrite bool) error {
	keep := 0
	var vdir *Inode
	var freed []*Inode // files the replacement removes
	if old != nil {
		if keep = keepVersions(parent); keep > 0 && (old.IsLink() || rewrite) {
			keep = 0 // a link has no content to keep a version of, a rewrite changes it in place
		}
		if keep > 0 {
			var err error
			if vdir, freed, err = ns.versionPlan(parent, old.Name, keep); kerr.Is(err, kerr.Exists) {
				return kerr.WithOp(err, "commit")
			} else if err != nil {
				return kerr.Wrap(kerr.Internal, "commit", f.Name, err)
			}
		} else {
			freed = []*Inode{old}
		}
	}
	// Quota first, before anything of the file is written: what the
	// replacement removes is freed, the new one must fit.
	ns.chargeFiles(tx, freed, -1)
	if err := ns.fits(tx, parent.ID, f.UID, f.GID, Amount{f.Size, 1}, f.Name); err != nil {
		ns.chargeFiles(tx, freed, 1)
		return kerr.WithOp(err, "commit")
	}
	ns.charge(tx, parent.ID, f.UID, f.GID, Amount{f.Size, 1})
	now := f.CTime // f's own MTime may be one its writer set (a rewrite's)
	putFile(tx, f)
	tx.put(inodeKey(f.ID), fileIndex(parent.ID, f.Name))
	dFiles, dSize := int64(1), f.Size
	if old != nil {
		dFiles, dSize = 0, f.Size-old.Size
		if keep > 0 {
			if err := ns.keepVersion(tx, parent, vdir, old, freed, now); err != nil {
				return kerr.Wrap(kerr.Internal, "commit", f.Name, err)
			}
		} else {
			tx.del(inodeKey(old.ID))
			queueDeletion(tx, old)
			tx.emit(Event{Kind: Removed, Ino: old.ID, Parent: parent.ID, Name: old.Name})
		}
	}
	tx.emit(Event{Kind: Committed, Ino: f.ID, Parent: parent.ID, Name: f.Name, Size: f.Size, MTime: f.MTime})
	ns.touch(tx, parent, now)
	if err := ns.account(tx, parent.ID, dSize, dFiles, 0, now); err != nil {
		return kerr.Wrap(kerr.Internal, "create", f.Name, err)
	}
	return nil
}

// Pending returns the pending upload fid (for storage servers that verify a
// commit) or NotFound.
func (ns *Namespace) Pending(fid uint64) (*Inode, error) {
	v, err := ns.eng.Get(pendingKey(fid))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, kerr.New(kerr.NotFound, "commit", "fid "+strconv.FormatUint(fid, 10), "no pending upload (committed or aborted)")
	}
	if err != nil {
		return nil, err
	}
	return decodeInode(v)
}

// ClaimUpload marks pending upload fid as being written. A storage server
// claims an upload before it touches any byte, so a write capability is
// good for exactly one upload: a replay while it runs, or once it has been
// committed or aborted, is refused here. Claims live in memory only: a
// restart aborts every pending upload anyway (AbortStale), and a clean
// handover passes them on (HandOver, Adopt).
func (ns *Namespace) ClaimUpload(fid uint64) (*Inode, error) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	what := "fid " + strconv.FormatUint(fid, 10)
	f, err := ns.Pending(fid)
	if kerr.Is(err, kerr.NotFound) {
		if ns.abortedAt[fid] {
			return nil, ns.gone("write", fid)
		}
		return nil, kerr.New(kerr.Permission, "write", what, "write capability already used: the upload was committed or aborted")
	}
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, "write", what, err)
	}
	if f.XAttrs[convertOf] != "" {
		return nil, kerr.New(kerr.Permission, "write", what, "a conversion's copy is not an upload")
	}
	if ns.handedOver {
		return nil, kerr.New(kerr.Busy, "write", what, "this namespace server is handing the active role over; retry")
	}
	if ns.claimed[fid] {
		return nil, kerr.New(kerr.Permission, "write", what, "write capability already in use by another upload")
	}
	ns.claimed[fid] = true
	return f, nil
}

// Commit makes pending upload fid visible with its final size and checksums,
// replacing (and queueing the data of) any file already at that name. A
// commit repeated once it succeeded (a storage server that lost the answer
// to a namespace server's failover and asks the next one) succeeds again.
func (ns *Namespace) Commit(fid uint64, size int64, sums map[string]string) (f *Inode, err error) {
	repeated := false
	err = ns.mutate("commit", func(tx *txn) error {
		if f, err = ns.Pending(fid); err != nil {
			if done := ns.committed(fid, size, sums); done != nil {
				f, repeated = done, true
				return nil
			}
			if kerr.Is(err, kerr.NotFound) {
				return ns.gone("commit", fid)
			}
			return err
		}
		if f.XAttrs[convertOf] != "" {
			return kerr.New(kerr.Permission, "commit", f.Name, "a conversion's copy is switched in by the namespace, not committed")
		}
		parent, err := ns.dir(f.Parent)
		if err != nil {
			// Parent removed while uploading: the upload is void.
			ns.abort(tx, f)
			tx.result = kerr.New(kerr.NotFound, "commit", f.Name, "parent directory was removed during upload")
			return nil
		}
		old, err := ns.child(parent.ID, f.Name)
		if err != nil {
			return kerr.Wrap(kerr.Internal, "commit", f.Name, err)
		}
		if old != nil && old.IsDir {
			ns.abort(tx, f)
			tx.result = kerr.New(kerr.IsDir, "commit", f.Name, "a directory was created at this path during upload")
			return nil
		}
		mark, rewrite := f.XAttrs[rewriteOf]
		if rewrite {
			if old == nil || rewriteMark(old) != mark {
				ns.abort(tx, f)
				tx.result = kerr.New(kerr.Busy, "commit", f.Name, "the file changed (or went) during its rewrite; the rewrite is dropped")
				return nil
			}
			delete(f.XAttrs, rewriteOf)
		}
		now := ns.opts.Now().UnixNano()
		f.Size, f.MTime, f.CTime = size, now, now
		if v, ok := f.XAttrs[rewriteMTime]; ok {
			f.MTime, _ = strconv.ParseInt(v, 10, 64)
			delete(f.XAttrs, rewriteMTime)
		}
		for k := range f.Checksums {
			f.Checksums[k] = sums[k]
		}
		ns.unbook(tx, fid)
		if err := ns.link(tx, parent, f, old, rewrite); err != nil {
			if !kerr.Is(err, kerr.Quota) {
				return err
			}
			// Over quota with its real size: the upload is void.
			ns.abort(tx, f)
			tx.result = err
			return nil
		}
		tx.del(pendingKey(fid))
		tx.unclaim = append(tx.unclaim, fid)
		return nil
	})
	if err == nil && repeated {
		// The first commit may still be on its way to the store (the
		// caller lost its answer, not its outcome): success once it is
		// durable, as the first would have answered.
		err = ns.Durable(context.Background())
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// gone is why upload fid, no longer pending, cannot be written (op
// "write": its claim) or committed: it was aborted (by this server when
// it took over from one that failed over or stopped, by the sweeper of
// uploads nobody writes, or by its storage server), and it may succeed
// sent again. Caller holds ns.mu.
func (ns *Namespace) gone(op string, fid uint64) error {
	what := "fid " + strconv.FormatUint(fid, 10)
	if ns.abortedAt[fid] {
		return kerr.New(kerr.Aborted, op, what, "upload aborted by a failover: the namespace server it began on failed over (or restarted) while it streamed; upload the file again")
	}
	return kerr.New(kerr.Aborted, op, what, "no pending upload (committed or aborted); upload the file again")
}

// committed returns file fid if it is visible with exactly this size and
// these checksums; nil otherwise. Caller holds ns.mu.
func (ns *Namespace) committed(fid uint64, size int64, sums map[string]string) *Inode {
	n, err := ns.inode(fid, "commit")
	if err != nil || n.IsDir || n.ID != fid || n.Size != size || len(n.Checksums) == 0 {
		return nil
	}
	for t, v := range n.Checksums {
		if sums[t] != v {
			return nil
		}
	}
	return n
}

// Abort drops pending upload fid and queues its stripes for deletion.
func (ns *Namespace) Abort(fid uint64) error {
	return ns.mutate("abort", func(tx *txn) error {
		f, err := ns.Pending(fid)
		if err != nil {
			return err
		}
		ns.abort(tx, f)
		return nil
	})
}

func (ns *Namespace) abort(tx *txn, f *Inode) {
	ns.unbook(tx, f.ID)
	tx.del(pendingKey(f.ID))
	tx.unclaim = append(tx.unclaim, f.ID)
	queueDeletion(tx, f)
}

// AbortStale aborts pending uploads created before t (their writer died)
// and queues their stripes for deletion. It returns how many it aborted.
func (ns *Namespace) AbortStale(t time.Time) (n int, err error) {
	var stale []uint64
	err = ns.scanPending(func(f *Inode) {
		if f.CTime < t.UnixNano() {
			stale = append(stale, f.ID)
		}
	})
	if err != nil {
		return 0, err
	}
	ns.mu.Lock()
	if ns.abortedAt == nil {
		ns.abortedAt = map[uint64]bool{}
	}
	for _, fid := range stale {
		ns.abortedAt[fid] = true // their storage servers' claims and commits are told why
	}
	ns.mu.Unlock()
	return ns.abortEach(stale)
}

// abortEach aborts those of fids that are still pending, in mutations of
// abortChunk (a replicated store bounds what one commit may hold), and
// returns how many it aborted.
func (ns *Namespace) abortEach(fids []uint64) (n int, err error) {
	for len(fids) > 0 {
		chunk := fids[:min(len(fids), abortChunk)]
		fids = fids[len(chunk):]
		c := 0
		if err := ns.mutate("abort", func(tx *txn) error {
			c = 0
			for _, fid := range chunk {
				f, err := ns.Pending(fid)
				if kerr.Is(err, kerr.NotFound) {
					continue // committed or aborted meanwhile
				}
				if err != nil {
					return err
				}
				ns.abort(tx, f)
				c++
			}
			return nil
		}); err != nil {
			return n, err
		}
		n += c
	}
	return n, nil
}

// abortChunk is how many stale uploads one mutation aborts.
const abortChunk = 64

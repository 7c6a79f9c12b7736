// Package namespace is Kaon's inode-based namespace model: containers
// (cid) and files (fid) with attributes, layout policy, subtree
// accounting, a deletion queue, the filesystem registry and a change feed,
// persisted in a kv.Store (any kv.Engine, or the active server of a
// replicated instance). The key schema is in record.go; this package
// owns every key.
//
// Every container ever touched stays cached in memory (containers are few
// compared to files); file records are read from the engine on demand, one
// Get per stat. Every mutation runs under one lock and ends in one atomic
// batch (mutate), so the engine is always consistent with itself; the
// batch's durability is awaited outside the lock, so concurrent mutations
// share one fsync.
//
// Files by concern: namespace.go (this: the type, the mutation frame, the
// container cache), access.go (permission checks), lookup.go (reads by
// path and by inode), tree.go (mkdir, remove, rename), create.go
// (uploads: pending, claim, commit, abort), attr.go (mode, owner, xattrs,
// checksums), deletion.go, move.go (stripe moves and conversions in
// flight, the switch), filesystems.go, groups.go, feed.go, record.go,
// path.go.
package namespace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
)

// RootID is the container id of "/".
const RootID = 1

// DefaultChecksums are computed while writing when no attribute says
// otherwise: checksum.DefaultTypes, the cheap ones. Others are computed on
// first request (AddChecksums) unless a directory asks for them with
// nsapi.AttrChecksums.
var DefaultChecksums = checksum.DefaultTypes

// Caller is the identity an operation runs as.
type Caller struct {
	UID, GID uint32
	Groups   []uint32
	// Capability skips mode bits, ACLs and ownership checks: the caller's
	// bearer token has already been found to allow the operation on its
	// path (a capability token, auth.Principal.Capability); UID and GID
	// still own what it creates. Root-only operations stay root-only.
	Capability bool
}

// Root is the superuser identity, used by trusted services.
var Root = Caller{}

// Options tunes a namespace.
type Options struct {
	// Sync makes every mutation durable before it returns (group-committed
	// fsync). Without it Pebble may keep the newest commits in a user-space
	// buffer, so even a process crash can lose acknowledged operations:
	// only for benchmarks and throw-away data.
	Sync bool
	Now  func() time.Time // clock; default time.Now
	// FeedSize is how many change events are kept for readers of the feed
	// that fall behind (default 65536).
	FeedSize int
}

// Namespace is safe for concurrent use.
type Namespace struct {
	eng  kv.Store
	opts Options
	feed *feed

	// mu: mutations hold it exclusively, reads shared. Containers loaded
	// into the cache by concurrent readers are inserted under cmu.
	mu       sync.RWMutex
	cmu      sync.Mutex
	dirs     map[uint64]*Inode // cached containers by cid
	dirIndex map[dirKey]uint64 // (parent, name) -> cid for cached containers
	nextID   uint64            // next id to hand out
	idLimit  uint64            // persisted high-water; refill when nextID reaches it
	claimed  map[uint64]bool   // pending uploads a storage server is writing
	quota    map[uint64]*quotaNode
	bookings map[uint64]*booking // quota booked by uploads in flight, by fid
	binID    uint64              // the recycle bin container, once created
	// floors: by version folder, a name no version in it is below
	// (versions.go); changed under mu held exclusively.
	floors map[uint64]string

	handedOver bool            // HandOver ran: claims are refused
	abortedAt  map[uint64]bool // pending uploads AbortStale aborted at start (a previous server's)
}

type dirKey struct {
	parent uint64
	name   string
}

const idBlock = 10000

// Open loads (or initializes) the namespace stored in eng.
func Open(eng kv.Store, opts Options) (*Namespace, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ns := &Namespace{eng: eng, opts: opts, feed: newFeed(opts.FeedSize), dirs: map[uint64]*Inode{},
		dirIndex: map[dirKey]uint64{}, claimed: map[uint64]bool{}, bookings: map[uint64]*booking{},
		floors: map[uint64]string{}}
	v, err := eng.Get([]byte("v"))
	switch {
	case errors.Is(err, kv.ErrNotFound):
		now := opts.Now().UnixNano()
		root := &Inode{ID: RootID, Parent: RootID, IsDir: true, Mode: 0o755, CTime: now, MTime: now, BTime: now, TreeMTime: now}
		b := eng.NewBatch()
		b.Put([]byte("v"), []byte(SchemaVersion))
		b.Put(inodeKey(RootID), root.encode(nil))
		b.Put([]byte("S"), u64(nil, RootID+1))
		if err := b.Commit(true); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	case string(v) != SchemaVersion:
		return nil, fmt.Errorf("namespace: store has schema version %q, this binary reads %q", v, SchemaVersion)
	}
	hw, err := eng.Get([]byte("S"))
	if err != nil || len(hw) != 8 {
		return nil, fmt.Errorf("namespace: missing id high-water mark: %v", err)
	}
	ns.nextID = binary.BigEndian.Uint64(hw)
	ns.idLimit = ns.nextID
	if _, err := ns.dir(RootID); err != nil {
		return nil, err
	}
	if err := ns.loadQuotas(); err != nil {
		return nil, err
	}
	if _, err := ns.bin(nil); err != nil {
		return nil, err
	}
	return ns, nil
}

// txn is one mutation in progress: its batch, the change events it will
// publish, and whether it touched cached state.
type txn struct {
	b      kv.Batch
	writes int
	events []Event
	// dirty is set once cached containers were changed: if the mutation
	// then fails, the cache is dropped (it may be ahead of the store).
	dirty bool
	// binCreated: the recycle bin was created in this mutation.
	binCreated bool
	// result is returned by mutate after the batch was applied: for
	// mutations that record something (an abort) and still fail.
	result error
	// unclaim: uploads whose claim ends when the batch is applied (a
	// batch the store refuses leaves them claimed, as they still are).
	unclaim []uint64
	// lazy: the mutation does not wait for its batch to be durable (the
	// next one that waits makes it so, engines keep batches in order),
	// unless mustSync: it extended the persisted id block.
	lazy, mustSync bool

	// quota changes, applied to memory when the batch is
	quotaDelta map[quotaRef]Amount
	bookDelta  map[quotaRef]Amount
	bookings   []bookingChange
	newQuota   *newQuotaNode
	quotaLimit []quotaLimitChange
}

func (tx *txn) put(k, v []byte) { tx.b.Put(k, v); tx.writes++ }
func (tx *txn) del(k []byte)    { tx.b.Delete(k); tx.writes++ }
func (tx *txn) emit(e Event)    { tx.events = append(tx.events, e) }

// mutate runs fn under the namespace lock with a fresh batch, applies the
// batch (still under the lock, so cache and store change together and in
// order), publishes its events, and waits for durability after releasing
// the lock, so concurrent mutations share one fsync (group commit).
//
// A panic under the lock (a store failing hard, a bug in fn) releases
// it with the cache dropped and goes on to the caller: the HTTP server
// recovers a handler's panic and keeps serving, and a lock left held
// hung every later request.
func (ns *Namespace) mutate(op string, fn func(tx *txn) error) error {
	ns.mu.Lock()
	locked := true
	tx := &txn{b: ns.eng.NewBatch()}
	defer func() {
		if locked {
			r := recover()
			ns.dropCache() // fn or the apply may have left it half-changed
			ns.binID = 0
			ns.mu.Unlock()
			panic(r)
		}
	}()
	err := fn(tx)
	var wait func() error
	if err == nil && tx.writes > 0 {
		if wait, err = tx.b.Apply(ns.opts.Sync && (!tx.lazy || tx.mustSync)); err != nil {
			err = storeError(op, err)
		} else {
			ns.applyQuotaLimits(tx)
			ns.applyQuota(tx)
			for _, fid := range tx.unclaim {
				delete(ns.claimed, fid)
			}
			ns.feed.publish(tx.events)
		}
	}
	if err != nil && tx.dirty {
		ns.dropCache()
	}
	if err != nil && tx.binCreated {
		ns.binID = 0
	}
	tx.b.Discard()
	locked = false
	ns.mu.Unlock()
	if err != nil {
		return err
	}
	if wait != nil {
		if err := wait(); err != nil {
			return storeError(op, err)
		}
	}
	return tx.result
}

// storeError is a failed commit as the caller sees it: the store's own
// kind when it says why (a replicated store without quorum is
// unavailable, not broken), else an internal error.
func storeError(op string, err error) error {
	if ke, ok := err.(*kerr.Error); ok && ke.Op == "" && ke.Path == "" {
		c := *ke // a store may hand one error to many callers
		c.Op = op
		return &c
	}
	return kerr.Wrap(kerr.KindOf(err), op, "", err)
}

// dropCache forgets cached containers; they are reloaded from the store.
// Caller holds ns.mu.
func (ns *Namespace) dropCache() {
	ns.cmu.Lock()
	ns.dirs = map[uint64]*Inode{}
	ns.dirIndex = map[dirKey]uint64{}
	ns.cmu.Unlock()
}

// allocID hands out an inode id; the high-water mark is persisted in blocks
// so restarts never reuse an id. Caller holds ns.mu.
func (ns *Namespace) allocID(tx *txn) uint64 {
	if ns.nextID >= ns.idLimit {
		ns.idLimit = ns.nextID + idBlock
		tx.put([]byte("S"), u64(nil, ns.idLimit))
		tx.mustSync = true // an id handed out must never be handed out again
	}
	id := ns.nextID
	ns.nextID++
	return id
}

// cached returns container cid if it is in the cache.
func (ns *Namespace) cached(cid uint64) (*Inode, bool) {
	ns.cmu.Lock()
	defer ns.cmu.Unlock()
	d, ok := ns.dirs[cid]
	return d, ok
}

// dir returns the cached container cid, loading it if needed.
func (ns *Namespace) dir(cid uint64) (*Inode, error) {
	if d, ok := ns.cached(cid); ok {
		return d, nil
	}
	v, err := ns.eng.Get(inodeKey(cid))
	if err != nil {
		return nil, err
	}
	d, err := decodeInode(v)
	if err != nil {
		return nil, err
	}
	if !d.IsDir {
		return nil, errCorrupt
	}
	ns.cmu.Lock()
	defer ns.cmu.Unlock()
	if old, ok := ns.dirs[cid]; ok { // another reader loaded it meanwhile
		return old, nil
	}
	ns.dirs[cid] = d
	if cid != RootID && d.Parent != cid {
		ns.dirIndex[dirKey{d.Parent, d.Name}] = cid
	}
	return d, nil
}

// cacheDir records a new or moved container. Caller holds ns.mu.
func (ns *Namespace) cacheDir(tx *txn, d *Inode) {
	tx.dirty = true
	ns.cmu.Lock()
	ns.dirs[d.ID] = d
	ns.dirIndex[dirKey{d.Parent, d.Name}] = d.ID
	ns.cmu.Unlock()
}

// uncacheDir forgets a container removed or about to be renamed.
func (ns *Namespace) uncacheDir(tx *txn, d *Inode) {
	tx.dirty = true
	ns.cmu.Lock()
	delete(ns.dirIndex, dirKey{d.Parent, d.Name})
	delete(ns.dirs, d.ID)
	ns.cmu.Unlock()
}

// child looks up name in container parent. It returns the cached container
// or a freshly decoded file record; (nil, nil) when absent.
func (ns *Namespace) child(parent uint64, name string) (*Inode, error) {
	ns.cmu.Lock()
	cid, ok := ns.dirIndex[dirKey{parent, name}]
	ns.cmu.Unlock()
	if ok {
		return ns.dir(cid)
	}
	v, err := ns.eng.Get(dentryKey(parent, name))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ns.decodeDentry(parent, name, v)
}

func (ns *Namespace) decodeDentry(parent uint64, name string, v []byte) (*Inode, error) {
	if len(v) == 9 && v[0] == 'd' {
		return ns.dir(binary.BigEndian.Uint64(v[1:]))
	}
	if len(v) > 1 && v[0] == 'f' {
		n, err := decodeInode(v[1:])
		if err != nil {
			return nil, err
		}
		n.Parent, n.Name = parent, name
		return n, nil
	}
	return nil, errCorrupt
}

// scanDir calls fn for every entry of container d (cached containers as
// they are, files freshly decoded), in name order.
func (ns *Namespace) scanDir(d *Inode, fn func(n *Inode)) error {
	var derr error
	prefix := dentryPrefix(d.ID)
	err := ns.eng.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
		n, err := ns.decodeDentry(d.ID, string(k[9:]), v)
		if err != nil {
			derr = err
			return false
		}
		fn(n)
		return true
	})
	return errors.Join(err, derr)
}

// account applies a subtree delta to container cid and all its ancestors,
// writing their records to the batch. Caller holds ns.mu.
func (ns *Namespace) account(tx *txn, cid uint64, dSize, dFiles, dDirs, mtime int64) error {
	tx.dirty = true
	for {
		d, err := ns.dir(cid)
		if err != nil {
			return err
		}
		d.TreeSize += dSize
		d.TreeFiles += dFiles
		d.TreeDirs += dDirs
		if mtime > d.TreeMTime {
			d.TreeMTime = mtime
		}
		tx.put(inodeKey(d.ID), d.encode(nil))
		if cid == RootID {
			return nil
		}
		cid = d.Parent
	}
}

// touch sets a container's own mtime (its entries changed).
func (ns *Namespace) touch(tx *txn, d *Inode, now int64) {
	tx.dirty = true
	d.MTime, d.CTime = now, now
	tx.put(inodeKey(d.ID), d.encode(nil))
}

// putFile stores file f's record in its directory entry.
func putFile(tx *txn, f *Inode) {
	tx.put(dentryKey(f.Parent, f.Name), f.encodeEntry([]byte{'f'}))
}

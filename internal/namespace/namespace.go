// Package namespace is Kaon's inode-based namespace: containers (cid) and
// files (fid) with attributes, layout policy, subtree accounting and a
// deletion queue, persisted in a kv.Engine (key schema in record.go).
//
// Every container ever touched stays cached in memory (containers are few
// compared to files); file records are read from the engine on demand, one
// Get per stat. Mutations hold one namespace lock and commit one atomic
// batch, so the engine is always consistent with itself.
package namespace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/layout"
)

// RootID is the container id of "/".
const RootID = 1

// Attribute names the namespace itself interprets.
const (
	AttrLayout    = "sys.forced.layout"    // layout of new files below
	AttrChecksums = "sys.forced.checksums" // comma list of checksums computed on write
	AttrMkPath    = "sys.mkpath"           // "off": uploads below do not create missing directories
)

// DefaultChecksums are computed while writing when no attribute says
// otherwise: checksum.DefaultTypes, the cheap ones. Others are computed on
// first request (AddChecksums) unless a directory asks for them with
// AttrChecksums.
var DefaultChecksums = checksum.DefaultTypes

// Caller is the identity an operation runs as.
type Caller struct {
	UID, GID uint32
	Groups   []uint32
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
}

// Namespace is safe for concurrent use.
type Namespace struct {
	eng  kv.Engine
	opts Options

	mu       sync.RWMutex
	dirs     map[uint64]*Inode // cached containers by cid
	dirIndex map[dirKey]uint64 // (parent, name) -> cid for cached containers
	nextID   uint64            // next id to hand out
	idLimit  uint64            // persisted high-water; refill when nextID reaches it
	claimed  map[uint64]bool   // pending uploads a storage server is writing
}

type dirKey struct {
	parent uint64
	name   string
}

const idBlock = 10000

// Open loads (or initializes) the namespace stored in eng.
func Open(eng kv.Engine, opts Options) (*Namespace, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ns := &Namespace{eng: eng, opts: opts, dirs: map[uint64]*Inode{}, dirIndex: map[dirKey]uint64{}, claimed: map[uint64]bool{}}
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
	return ns, nil
}

// Engine exposes the store for packages that keep their own keys beside the
// namespace (filesystem registry).
func (ns *Namespace) Engine() kv.Engine { return ns.eng }

// allocID hands out an inode id; the high-water mark is persisted in blocks
// so restarts never reuse an id. Caller holds ns.mu.
func (ns *Namespace) allocID(b kv.Batch) uint64 {
	if ns.nextID >= ns.idLimit {
		ns.idLimit = ns.nextID + idBlock
		b.Put([]byte("S"), u64(nil, ns.idLimit))
	}
	id := ns.nextID
	ns.nextID++
	return id
}

// commit applies b in order while the caller holds ns.mu, then releases
// the lock while waiting for durability so concurrent operations share one
// fsync (group commit), and takes it back for the caller's deferred unlock.
// Callers must not touch namespace state after commit returns.
func (ns *Namespace) commit(b kv.Batch) error {
	wait, err := b.Apply(ns.opts.Sync)
	if err != nil {
		// Cached containers may now be ahead of the store: drop them.
		ns.dirs = map[uint64]*Inode{}
		ns.dirIndex = map[dirKey]uint64{}
		return kerr.Wrap(kerr.Internal, "commit", "", err)
	}
	ns.mu.Unlock()
	err = wait()
	ns.mu.Lock()
	if err != nil {
		return kerr.Wrap(kerr.Internal, "commit", "", err)
	}
	return nil
}

// dir returns the cached container cid, loading it if needed.
func (ns *Namespace) dir(cid uint64) (*Inode, error) {
	if d, ok := ns.dirs[cid]; ok {
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
	ns.dirs[cid] = d
	if cid != RootID {
		ns.dirIndex[dirKey{d.Parent, d.Name}] = cid
	}
	return d, nil
}

// child looks up name in container parent. It returns the cached container
// or a freshly decoded file record; (nil, nil) when absent.
func (ns *Namespace) child(parent uint64, name string) (*Inode, error) {
	if cid, ok := ns.dirIndex[dirKey{parent, name}]; ok {
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

// resolve walks a clean path checking search permission on every container
// crossed. It returns the inode (nil when the last component is missing)
// and its parent container.
func (ns *Namespace) resolve(c Caller, op, p string) (n, parent *Inode, err error) {
	cur, err := ns.dir(RootID)
	if err != nil {
		return nil, nil, kerr.Wrap(kerr.Internal, op, p, err)
	}
	names := components(p)
	if len(names) == 0 {
		return cur, cur, nil
	}
	for i, name := range names {
		if !cur.IsDir {
			return nil, nil, kerr.New(kerr.NotDir, op, p, "a path component is not a directory")
		}
		if !access(cur, c, 1) {
			return nil, nil, kerr.New(kerr.Permission, op, p, "search permission denied")
		}
		next, err := ns.child(cur.ID, name)
		if err != nil {
			return nil, nil, kerr.Wrap(kerr.Internal, op, p, err)
		}
		if next == nil {
			if i == len(names)-1 {
				return nil, cur, nil
			}
			return nil, nil, kerr.New(kerr.NotFound, op, p, "no such file or directory")
		}
		parent, cur = cur, next
	}
	return cur, parent, nil
}

func (ns *Namespace) lookup(c Caller, op, path string) (string, *Inode, *Inode, error) {
	p, err := CleanPath(path)
	if err != nil {
		return "", nil, nil, kerr.WithOp(err, op)
	}
	n, parent, err := ns.resolve(c, op, p)
	return p, n, parent, err
}

// Permits reports whether c may access n for want (4 read, 2 write,
// 1 search/execute) by its mode bits.
func (n *Inode) Permits(c Caller, want uint32) bool { return access(n, c, want) }

// access checks mode bits (want: 4 read, 2 write, 1 search/execute).
func access(n *Inode, c Caller, want uint32) bool {
	if c.UID == 0 {
		return true
	}
	mode := n.Mode
	switch {
	case c.UID == n.UID:
		mode >>= 6
	case c.GID == n.GID || contains(c.Groups, n.GID):
		mode >>= 3
	}
	return mode&want == want
}

func contains(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// account applies a subtree delta to container cid and all its ancestors,
// writing their records to b. Caller holds ns.mu.
func (ns *Namespace) account(b kv.Batch, cid uint64, dSize, dFiles, dDirs, mtime int64) error {
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
		b.Put(inodeKey(d.ID), d.encode(nil))
		if cid == RootID {
			return nil
		}
		cid = d.Parent
	}
}

// touch sets a container's own mtime (its entries changed).
func (ns *Namespace) touch(b kv.Batch, d *Inode, now int64) {
	d.MTime, d.CTime = now, now
	b.Put(inodeKey(d.ID), d.encode(nil))
}

// Stat returns a copy of the inode at path.
func (ns *Namespace) Stat(c Caller, path string) (*Inode, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	_, n, _, err := ns.lookup(c, "stat", path)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, kerr.New(kerr.NotFound, "stat", path, "no such file or directory")
	}
	if !n.IsDir {
		return visibleTo(c, n), nil // freshly decoded, not shared
	}
	return n.clone(), nil
}

// visibleTo drops from n (a copy) what c may not see: checksums describe
// the content, so they follow the read permission like the bytes do.
func visibleTo(c Caller, n *Inode) *Inode {
	if !n.IsDir && len(n.Checksums) > 0 && !access(n, c, 4) {
		n.Checksums = nil
	}
	return n
}

// List returns the entries of a container sorted by name.
func (ns *Namespace) List(c Caller, path string) ([]*Inode, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	p, d, _, err := ns.lookup(c, "list", path)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, kerr.New(kerr.NotFound, "list", p, "no such file or directory")
	}
	if !d.IsDir {
		return nil, kerr.New(kerr.NotDir, "list", p, "not a directory")
	}
	if !access(d, c, 4) {
		return nil, kerr.New(kerr.Permission, "list", p, "read permission denied")
	}
	var out []*Inode
	var derr error
	prefix := dentryPrefix(d.ID)
	err = ns.eng.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
		n, err := ns.decodeDentry(d.ID, string(k[9:]), v)
		if err != nil {
			derr = err
			return false
		}
		out = append(out, visibleTo(c, n.clone()))
		return true
	})
	if err = errors.Join(err, derr); err != nil {
		return nil, kerr.Wrap(kerr.Internal, "list", p, err)
	}
	return out, nil
}

// Mkdir creates a container; with parents, missing ancestors too and an
// existing container is not an error. New containers inherit the parent's
// sys.* attributes (layout policy) like EOS.
func (ns *Namespace) Mkdir(c Caller, path string, mode uint32, parents bool) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	p, err := CleanPath(path)
	if err != nil {
		return kerr.WithOp(err, "mkdir")
	}
	if p == "/" {
		if parents {
			return nil
		}
		return kerr.New(kerr.Exists, "mkdir", p, "directory exists")
	}
	names := components(p)
	cur, err := ns.dir(RootID)
	if err != nil {
		return kerr.Wrap(kerr.Internal, "mkdir", p, err)
	}
	b := ns.eng.NewBatch()
	defer b.Discard()
	created := false
	now := ns.opts.Now().UnixNano()
	for i, name := range names {
		last := i == len(names)-1
		if !access(cur, c, 1) {
			return kerr.New(kerr.Permission, "mkdir", p, "search permission denied")
		}
		next, err := ns.child(cur.ID, name)
		if err != nil {
			return kerr.Wrap(kerr.Internal, "mkdir", p, err)
		}
		if next != nil {
			if !next.IsDir {
				if last {
					return kerr.New(kerr.Exists, "mkdir", p, "a file with that name exists")
				}
				return kerr.New(kerr.NotDir, "mkdir", p, "a path component is not a directory")
			}
			if last && !parents {
				return kerr.New(kerr.Exists, "mkdir", p, "directory exists")
			}
			cur = next
			continue
		}
		if !last && !parents {
			return kerr.New(kerr.NotFound, "mkdir", p, "parent directory does not exist")
		}
		if !access(cur, c, 3) {
			return kerr.New(kerr.Permission, "mkdir", p, "write permission denied on parent")
		}
		d := &Inode{ID: ns.allocID(b), Parent: cur.ID, Name: name, IsDir: true, Mode: mode & 0o7777,
			UID: c.UID, GID: c.GID, CTime: now, MTime: now, BTime: now, TreeMTime: now}
		for k, v := range cur.XAttrs {
			if strings.HasPrefix(k, "sys.") {
				if d.XAttrs == nil {
					d.XAttrs = map[string]string{}
				}
				d.XAttrs[k] = v
			}
		}
		b.Put(inodeKey(d.ID), d.encode(nil))
		b.Put(dentryKey(cur.ID, name), u64([]byte{'d'}, d.ID))
		ns.dirs[d.ID] = d
		ns.dirIndex[dirKey{cur.ID, name}] = d.ID
		ns.touch(b, cur, now)
		if err := ns.account(b, cur.ID, 0, 0, 1, now); err != nil {
			return kerr.Wrap(kerr.Internal, "mkdir", p, err)
		}
		created = true
		cur = d
	}
	if !created {
		return nil
	}
	return ns.commit(b)
}

// CreateOptions says how BeginCreate behaves.
type CreateOptions struct {
	Exclusive bool   // fail if the file exists
	Mode      uint32 // permission bits (default 0644)
	Layout    string // override the inherited layout (must parse)
}

// Placement chooses one filesystem per stripe for a new file.
type Placement func(l layout.Layout) ([]uint32, error)

// prepareCreate validates a create of path and builds the new file's inode
// (layout and checksum policy from the parent, placed by place). It returns
// the inode, its parent, and the file it replaces (nil if none). Caller
// holds ns.mu.
func (ns *Namespace) prepareCreate(b kv.Batch, c Caller, path string, o CreateOptions, place Placement) (f, parent, old *Inode, err error) {
	p, n, parent, err := ns.lookup(c, "create", path)
	if err != nil {
		return nil, nil, nil, err
	}
	if p == "/" || parent == nil {
		return nil, nil, nil, kerr.New(kerr.IsDir, "create", p, "is a directory")
	}
	if n != nil {
		switch {
		case n.IsDir:
			return nil, nil, nil, kerr.New(kerr.IsDir, "create", p, "is a directory")
		case o.Exclusive:
			return nil, nil, nil, kerr.New(kerr.Exists, "create", p, "file exists")
		case !access(n, c, 2):
			return nil, nil, nil, kerr.New(kerr.Permission, "create", p, "write permission denied")
		}
	}
	if !access(parent, c, 3) {
		return nil, nil, nil, kerr.New(kerr.Permission, "create", p, "write permission denied on parent")
	}
	ls := o.Layout
	if ls == "" {
		ls = parent.XAttrs[AttrLayout]
	}
	if ls == "" {
		ls = "plain"
	}
	l, err := layout.Parse(ls)
	if err != nil {
		return nil, nil, nil, kerr.WithOp(err, "create")
	}
	sums := DefaultChecksums
	if v := parent.XAttrs[AttrChecksums]; v != "" {
		sums = strings.Split(v, ",")
	}
	var locs []uint32
	if place != nil {
		if locs, err = place(l); err != nil {
			var ke *kerr.Error
			if errors.As(err, &ke) {
				ke.Op, ke.Path = "create", p
				return nil, nil, nil, ke
			}
			return nil, nil, nil, kerr.Wrap(kerr.NoSpace, "create", p, err)
		}
	}
	mode := o.Mode & 0o7777
	if mode == 0 {
		mode = 0o644
	}
	now := ns.opts.Now().UnixNano()
	f = &Inode{ID: ns.allocID(b), Parent: parent.ID, Name: p[strings.LastIndexByte(p, '/')+1:],
		Mode: mode, UID: c.UID, GID: c.GID, CTime: now, MTime: now, BTime: now,
		Layout: l.String(), Locations: locs, Checksums: map[string]string{}}
	for _, s := range sums {
		f.Checksums[strings.TrimSpace(s)] = ""
	}
	return f, parent, n, nil
}

// BeginCreate validates a write to path, resolves its layout and checksum
// policy from the parent, places it, and records a pending upload. The file
// stays invisible until Commit.
func (ns *Namespace) BeginCreate(c Caller, path string, o CreateOptions, place Placement) (*Inode, error) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	b := ns.eng.NewBatch()
	defer b.Discard()
	f, _, _, err := ns.prepareCreate(b, c, path, o, place)
	if err != nil {
		return nil, err
	}
	b.Put(pendingKey(f.ID), f.encode(nil))
	if err := ns.commit(b); err != nil {
		return nil, err
	}
	return f, nil
}

// CreateEmpty creates (or, without Exclusive, replaces with) an empty file
// in one atomic step. An empty file needs no stripes: metadata-only creates
// (mdtest, touch, a client that opens for writing and closes at once).
func (ns *Namespace) CreateEmpty(c Caller, path string, o CreateOptions) (*Inode, error) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	b := ns.eng.NewBatch()
	defer b.Discard()
	f, parent, old, err := ns.prepareCreate(b, c, path, o, nil)
	if err != nil {
		return nil, err
	}
	for t := range f.Checksums {
		f.Checksums[t] = emptySum(t)
	}
	if err := ns.link(b, parent, f, old); err != nil {
		return nil, err
	}
	if err := ns.commit(b); err != nil {
		return nil, err
	}
	return f, nil
}

// emptySum is the checksum of zero bytes ("" for an unknown type).
func emptySum(t string) string {
	m, err := checksum.NewMulti(t)
	if err != nil {
		return ""
	}
	return m.Sums()[t]
}

// link makes file f visible in parent, replacing old (whose stripes are
// queued for deletion), and updates the subtree accounting. Caller holds
// ns.mu.
func (ns *Namespace) link(b kv.Batch, parent, f, old *Inode) error {
	now := f.MTime
	b.Put(dentryKey(parent.ID, f.Name), append([]byte{'f'}, f.encode(nil)...))
	b.Put(inodeKey(f.ID), fileIndex(parent.ID, f.Name))
	dFiles, dSize := int64(1), f.Size
	if old != nil {
		dFiles, dSize = 0, f.Size-old.Size
		b.Delete(inodeKey(old.ID))
		ns.queueDeletion(b, old)
	}
	ns.touch(b, parent, now)
	if err := ns.account(b, parent.ID, dSize, dFiles, 0, now); err != nil {
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
// restart aborts every pending upload anyway (AbortStale).
func (ns *Namespace) ClaimUpload(fid uint64) (*Inode, error) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	what := "fid " + strconv.FormatUint(fid, 10)
	f, err := ns.Pending(fid)
	if kerr.Is(err, kerr.NotFound) {
		return nil, kerr.New(kerr.Permission, "write", what, "write capability already used: the upload was committed or aborted")
	}
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, "write", what, err)
	}
	if ns.claimed[fid] {
		return nil, kerr.New(kerr.Permission, "write", what, "write capability already in use by another upload")
	}
	ns.claimed[fid] = true
	return f, nil
}

// Commit makes pending upload fid visible with its final size and checksums,
// replacing (and queueing the data of) any file already at that name.
func (ns *Namespace) Commit(fid uint64, size int64, sums map[string]string) (*Inode, error) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	f, err := ns.Pending(fid)
	if err != nil {
		return nil, err
	}
	parent, err := ns.dir(f.Parent)
	if err != nil {
		// Parent removed while uploading: the upload is void.
		ns.abortLocked(f)
		return nil, kerr.New(kerr.NotFound, "commit", f.Name, "parent directory was removed during upload")
	}
	old, err := ns.child(parent.ID, f.Name)
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, "commit", f.Name, err)
	}
	if old != nil && old.IsDir {
		ns.abortLocked(f)
		return nil, kerr.New(kerr.IsDir, "commit", f.Name, "a directory was created at this path during upload")
	}
	now := ns.opts.Now().UnixNano()
	f.Size, f.MTime, f.CTime = size, now, now
	for k := range f.Checksums {
		f.Checksums[k] = sums[k]
	}
	b := ns.eng.NewBatch()
	defer b.Discard()
	b.Delete(pendingKey(fid))
	delete(ns.claimed, fid)
	if err := ns.link(b, parent, f, old); err != nil {
		return nil, err
	}
	if err := ns.commit(b); err != nil {
		return nil, err
	}
	return f, nil
}

// Abort drops pending upload fid and queues its stripes for deletion.
func (ns *Namespace) Abort(fid uint64) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	f, err := ns.Pending(fid)
	if err != nil {
		return err
	}
	return ns.abortLocked(f)
}

func (ns *Namespace) abortLocked(f *Inode) error {
	b := ns.eng.NewBatch()
	defer b.Discard()
	b.Delete(pendingKey(f.ID))
	delete(ns.claimed, f.ID)
	ns.queueDeletion(b, f)
	return ns.commit(b)
}

func (ns *Namespace) queueDeletion(b kv.Batch, f *Inode) {
	for i, fs := range f.Locations {
		b.Put(deletionKey(fs, f.ID, i), nil)
	}
}

// Deletion is one physical stripe a storage server must remove.
type Deletion struct {
	FsID   uint32 `json:"fsid"`
	Fid    uint64 `json:"fid"`
	Stripe int    `json:"stripe"`
}

// Deletions lists up to max queued deletions for filesystem fsid.
func (ns *Namespace) Deletions(fsid uint32, max int) ([]Deletion, error) {
	prefix := binary.BigEndian.AppendUint32([]byte{'X'}, fsid)
	var out []Deletion
	err := ns.eng.Scan(prefix, kv.PrefixEnd(prefix), func(k, _ []byte) bool {
		if len(k) != 15 {
			return true
		}
		out = append(out, Deletion{FsID: fsid, Fid: binary.BigEndian.Uint64(k[5:]), Stripe: int(binary.BigEndian.Uint16(k[13:]))})
		return len(out) < max
	})
	return out, err
}

// AckDeletions removes done deletions from the queue.
func (ns *Namespace) AckDeletions(ds []Deletion) error {
	if len(ds) == 0 {
		return nil
	}
	b := ns.eng.NewBatch()
	defer b.Discard()
	for _, d := range ds {
		b.Delete(deletionKey(d.FsID, d.Fid, d.Stripe))
	}
	return b.Commit(false)
}

// Remove unlinks a file and queues its data for deletion.
func (ns *Namespace) Remove(c Caller, path string) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	p, n, parent, err := ns.lookup(c, "rm", path)
	if err != nil {
		return err
	}
	if n == nil {
		return kerr.New(kerr.NotFound, "rm", p, "no such file")
	}
	if n.IsDir {
		return kerr.New(kerr.IsDir, "rm", p, "is a directory")
	}
	if !access(parent, c, 3) {
		return kerr.New(kerr.Permission, "rm", p, "write permission denied on parent")
	}
	b := ns.eng.NewBatch()
	defer b.Discard()
	ns.unlinkFile(b, parent, n)
	now := ns.opts.Now().UnixNano()
	ns.touch(b, parent, now)
	if err := ns.account(b, parent.ID, -n.Size, -1, 0, now); err != nil {
		return kerr.Wrap(kerr.Internal, "rm", p, err)
	}
	return ns.commit(b)
}

func (ns *Namespace) unlinkFile(b kv.Batch, parent, f *Inode) {
	b.Delete(dentryKey(parent.ID, f.Name))
	b.Delete(inodeKey(f.ID))
	ns.queueDeletion(b, f)
}

// Rmdir removes an empty container.
func (ns *Namespace) Rmdir(c Caller, path string) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	p, n, parent, err := ns.lookup(c, "rmdir", path)
	if err != nil {
		return err
	}
	switch {
	case n == nil:
		return kerr.New(kerr.NotFound, "rmdir", p, "no such directory")
	case !n.IsDir:
		return kerr.New(kerr.NotDir, "rmdir", p, "not a directory")
	case n.ID == RootID:
		return kerr.New(kerr.Permission, "rmdir", p, "cannot remove the root")
	case n.TreeFiles != 0 || n.TreeDirs != 0:
		return kerr.New(kerr.NotEmpty, "rmdir", p, "directory not empty")
	case !access(parent, c, 3):
		return kerr.New(kerr.Permission, "rmdir", p, "write permission denied on parent")
	}
	b := ns.eng.NewBatch()
	defer b.Discard()
	ns.unlinkDir(b, parent, n)
	now := ns.opts.Now().UnixNano()
	ns.touch(b, parent, now)
	if err := ns.account(b, parent.ID, 0, 0, -1, now); err != nil {
		return kerr.Wrap(kerr.Internal, "rmdir", p, err)
	}
	return ns.commit(b)
}

func (ns *Namespace) unlinkDir(b kv.Batch, parent, d *Inode) {
	b.Delete(dentryKey(parent.ID, d.Name))
	b.Delete(inodeKey(d.ID))
	delete(ns.dirIndex, dirKey{parent.ID, d.Name})
	delete(ns.dirs, d.ID)
}

// RemoveAll removes a file or a whole tree (WebDAV DELETE semantics).
func (ns *Namespace) RemoveAll(c Caller, path string) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	p, n, parent, err := ns.lookup(c, "rm", path)
	if err != nil {
		return err
	}
	if n == nil {
		return kerr.New(kerr.NotFound, "rm", p, "no such file or directory")
	}
	if n.ID == RootID {
		return kerr.New(kerr.Permission, "rm", p, "cannot remove the root")
	}
	if !access(parent, c, 3) {
		return kerr.New(kerr.Permission, "rm", p, "write permission denied on parent")
	}
	b := ns.eng.NewBatch()
	defer b.Discard()
	size, files, dirs := n.Size, int64(1), int64(0)
	if n.IsDir {
		size, files, dirs = n.TreeSize, n.TreeFiles, n.TreeDirs+1
		if err := ns.removeTree(c, b, parent, n); err != nil {
			return kerr.WithOp(err, "rm")
		}
	} else {
		ns.unlinkFile(b, parent, n)
	}
	now := ns.opts.Now().UnixNano()
	ns.touch(b, parent, now)
	if err := ns.account(b, parent.ID, -size, -files, -dirs, now); err != nil {
		return kerr.Wrap(kerr.Internal, "rm", p, err)
	}
	return ns.commit(b)
}

func (ns *Namespace) removeTree(c Caller, b kv.Batch, parent, d *Inode) error {
	if !access(d, c, 3) {
		return kerr.New(kerr.Permission, "", d.Name, "write permission denied")
	}
	var kids []*Inode
	prefix := dentryPrefix(d.ID)
	var derr error
	if err := ns.eng.Scan(prefix, kv.PrefixEnd(prefix), func(k, v []byte) bool {
		n, err := ns.decodeDentry(d.ID, string(k[9:]), v)
		if err != nil {
			derr = err
			return false
		}
		kids = append(kids, n)
		return true
	}); err != nil || derr != nil {
		return kerr.Wrap(kerr.Internal, "", d.Name, errors.Join(err, derr))
	}
	for _, k := range kids {
		if k.IsDir {
			if err := ns.removeTree(c, b, d, k); err != nil {
				return err
			}
		} else {
			ns.unlinkFile(b, d, k)
		}
	}
	ns.unlinkDir(b, parent, d)
	return nil
}

// Rename moves from to to. A file may replace a file when overwrite is set;
// an empty container may replace an empty container. Moving a container
// into its own subtree, or a path onto itself, is refused.
func (ns *Namespace) Rename(c Caller, from, to string, overwrite bool) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	fp, n, fparent, err := ns.lookup(c, "mv", from)
	if err != nil {
		return err
	}
	tp, err := CleanPath(to)
	if err != nil {
		return kerr.WithOp(err, "mv")
	}
	switch {
	case n == nil:
		return kerr.New(kerr.NotFound, "mv", fp, "no such file or directory")
	case n.ID == RootID:
		return kerr.New(kerr.Permission, "mv", fp, "cannot move the root")
	case fp == tp:
		return kerr.New(kerr.Invalid, "mv", fp, "source and destination are the same")
	case n.IsDir && IsAncestor(fp, tp):
		return kerr.New(kerr.Invalid, "mv", tp, "cannot move a directory into its own subtree")
	}
	old, tparent, err := ns.resolve(c, "mv", tp)
	if err != nil {
		return err
	}
	if tp == "/" || tparent == nil || !tparent.IsDir {
		return kerr.New(kerr.NotFound, "mv", tp, "destination parent does not exist")
	}
	if !access(fparent, c, 3) || !access(tparent, c, 3) {
		return kerr.New(kerr.Permission, "mv", tp, "write permission denied")
	}
	b := ns.eng.NewBatch()
	defer b.Discard()
	now := ns.opts.Now().UnixNano()
	if old != nil {
		switch {
		case !overwrite:
			return kerr.New(kerr.Exists, "mv", tp, "destination exists")
		case old.IsDir != n.IsDir:
			if old.IsDir {
				return kerr.New(kerr.IsDir, "mv", tp, "destination is a directory")
			}
			return kerr.New(kerr.NotDir, "mv", tp, "destination is not a directory")
		case old.IsDir && (old.TreeFiles != 0 || old.TreeDirs != 0):
			return kerr.New(kerr.NotEmpty, "mv", tp, "destination directory not empty")
		case old.IsDir:
			ns.unlinkDir(b, tparent, old)
			if err := ns.account(b, tparent.ID, 0, 0, -1, now); err != nil {
				return kerr.Wrap(kerr.Internal, "mv", tp, err)
			}
		default:
			ns.unlinkFile(b, tparent, old)
			if err := ns.account(b, tparent.ID, -old.Size, -1, 0, now); err != nil {
				return kerr.Wrap(kerr.Internal, "mv", tp, err)
			}
		}
	}
	newName := tp[strings.LastIndexByte(tp, '/')+1:]
	size, files, dirs := n.Size, int64(1), int64(0)
	b.Delete(dentryKey(fparent.ID, n.Name))
	if n.IsDir {
		size, files, dirs = n.TreeSize, n.TreeFiles, n.TreeDirs+1
		delete(ns.dirIndex, dirKey{fparent.ID, n.Name})
		n.Parent, n.Name, n.CTime = tparent.ID, newName, now
		ns.dirIndex[dirKey{tparent.ID, newName}] = n.ID
		b.Put(inodeKey(n.ID), n.encode(nil))
		b.Put(dentryKey(tparent.ID, newName), u64([]byte{'d'}, n.ID))
	} else {
		n.Parent, n.Name, n.CTime = tparent.ID, newName, now
		b.Put(dentryKey(tparent.ID, newName), append([]byte{'f'}, n.encode(nil)...))
		b.Put(inodeKey(n.ID), fileIndex(tparent.ID, newName))
	}
	ns.touch(b, fparent, now)
	if err := ns.account(b, fparent.ID, -size, -files, -dirs, now); err != nil {
		return kerr.Wrap(kerr.Internal, "mv", fp, err)
	}
	ns.touch(b, tparent, now)
	if err := ns.account(b, tparent.ID, size, files, dirs, now); err != nil {
		return kerr.Wrap(kerr.Internal, "mv", tp, err)
	}
	return ns.commit(b)
}

// update applies fn to the inode at path and stores it.
func (ns *Namespace) update(c Caller, op, path string, fn func(n *Inode) error) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	p, n, parent, err := ns.lookup(c, op, path)
	if err != nil {
		return err
	}
	if n == nil {
		return kerr.New(kerr.NotFound, op, p, "no such file or directory")
	}
	if err := fn(n); err != nil {
		return kerr.WithOp(err, op)
	}
	n.CTime = ns.opts.Now().UnixNano()
	b := ns.eng.NewBatch()
	defer b.Discard()
	if n.IsDir {
		b.Put(inodeKey(n.ID), n.encode(nil))
	} else {
		b.Put(dentryKey(parent.ID, n.Name), append([]byte{'f'}, n.encode(nil)...))
	}
	return ns.commit(b)
}

func owner(c Caller, n *Inode, p string) error {
	if c.UID != 0 && c.UID != n.UID {
		return kerr.New(kerr.Permission, "", p, "only the owner may change this")
	}
	return nil
}

// Chmod sets permission bits (owner or root).
func (ns *Namespace) Chmod(c Caller, path string, mode uint32) error {
	return ns.update(c, "chmod", path, func(n *Inode) error {
		if err := owner(c, n, path); err != nil {
			return err
		}
		n.Mode = mode & 0o7777
		return nil
	})
}

// Chown sets owner and group (root only).
func (ns *Namespace) Chown(c Caller, path string, uid, gid uint32) error {
	return ns.update(c, "chown", path, func(n *Inode) error {
		if c.UID != 0 {
			return kerr.New(kerr.Permission, "", path, "only root may change ownership")
		}
		n.UID, n.GID = uid, gid
		return nil
	})
}

// checkAttrName validates an attribute name and the caller's right to it:
// sys.* is root-only, user.* needs write permission; values are bounded.
func checkAttrName(c Caller, n *Inode, path, name string, write bool) error {
	switch {
	case name == "" || len(name) > 255 || strings.ContainsAny(name, "\x00="):
		return kerr.New(kerr.Invalid, "", path, fmt.Sprintf("bad attribute name %q", name))
	case strings.HasPrefix(name, "sys."):
		if write && c.UID != 0 {
			return kerr.New(kerr.Permission, "", path, "sys.* attributes are root-only")
		}
	case strings.HasPrefix(name, "user."):
		if write && !access(n, c, 2) {
			return kerr.New(kerr.Permission, "", path, "write permission denied")
		}
	default:
		return kerr.New(kerr.Invalid, "", path, fmt.Sprintf("attribute %q must start with sys. or user.", name))
	}
	return nil
}

// SetXAttr sets an attribute. Setting sys.forced.layout or
// sys.forced.checksums validates the value first.
func (ns *Namespace) SetXAttr(c Caller, path, name, value string) error {
	return ns.update(c, "attr set", path, func(n *Inode) error {
		if err := checkAttrName(c, n, path, name, true); err != nil {
			return err
		}
		if len(value) > 64<<10 {
			return kerr.New(kerr.Invalid, "", path, "attribute value longer than 64 KiB")
		}
		switch name {
		case AttrLayout:
			l, err := layout.Parse(value)
			if err != nil {
				return kerr.New(kerr.Invalid, "", path, err.Error())
			}
			value = l.String()
		case AttrMkPath:
			if value != "on" && value != "off" {
				return kerr.New(kerr.Invalid, "", path, AttrMkPath+" must be on or off")
			}
		case AttrChecksums:
			for _, s := range strings.Split(value, ",") {
				if !validChecksum(s) {
					return kerr.New(kerr.Invalid, "", path, fmt.Sprintf("unknown checksum %q", s))
				}
			}
		}
		if n.XAttrs == nil {
			n.XAttrs = map[string]string{}
		}
		n.XAttrs[name] = value
		return nil
	})
}

func validChecksum(s string) bool {
	switch s {
	case "adler32", "crc32c", "md5", "sha256", "xxhash64":
		return true
	}
	return false
}

// RemoveXAttr deletes an attribute.
func (ns *Namespace) RemoveXAttr(c Caller, path, name string) error {
	return ns.update(c, "attr rm", path, func(n *Inode) error {
		if err := checkAttrName(c, n, path, name, true); err != nil {
			return err
		}
		if _, ok := n.XAttrs[name]; !ok {
			return kerr.New(kerr.NotFound, "", path, fmt.Sprintf("no attribute %q", name))
		}
		delete(n.XAttrs, name)
		return nil
	})
}

// XAttrs returns all attributes of path, sorted by name.
func (ns *Namespace) XAttrs(c Caller, path string) ([][2]string, error) {
	n, err := ns.Stat(c, path)
	if err != nil {
		return nil, err
	}
	out := make([][2]string, 0, len(n.XAttrs))
	for k, v := range n.XAttrs {
		out = append(out, [2]string{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out, nil
}

// AddChecksums records checksums computed after the write (on a client's
// first request for a type the upload did not compute) for committed file
// fid. Values already stored are kept: they came from the stream itself.
func (ns *Namespace) AddChecksums(fid uint64, sums map[string]string) error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	what := "id " + strconv.FormatUint(fid, 10)
	v, err := ns.eng.Get(inodeKey(fid))
	parent, name, isFile := parseFileIndex(v)
	if err != nil || !isFile {
		return kerr.New(kerr.NotFound, "checksum", what, "no such file (removed or replaced meanwhile)")
	}
	n, err := ns.child(parent, name)
	if err != nil || n == nil || n.ID != fid {
		return kerr.New(kerr.NotFound, "checksum", what, "no such file (removed or replaced meanwhile)")
	}
	if n.Checksums == nil {
		n.Checksums = map[string]string{}
	}
	for t, s := range sums {
		if n.Checksums[t] == "" {
			n.Checksums[t] = s
		}
	}
	b := ns.eng.NewBatch()
	defer b.Discard()
	b.Put(dentryKey(parent, name), append([]byte{'f'}, n.encode(nil)...))
	return ns.commit(b)
}

// ByID returns the inode with id and its path.
func (ns *Namespace) ByID(id uint64) (*Inode, string, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	what := "id " + strconv.FormatUint(id, 10)
	v, err := ns.eng.Get(inodeKey(id))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, "", kerr.New(kerr.NotFound, "lookup", what, "no such inode")
	}
	if err != nil {
		return nil, "", kerr.Wrap(kerr.Internal, "lookup", what, err)
	}
	var n *Inode
	if parent, name, isFile := parseFileIndex(v); isFile {
		if n, err = ns.child(parent, name); err != nil || n == nil {
			return nil, "", kerr.New(kerr.Internal, "lookup", what, "dangling file index")
		}
	} else if n, err = ns.dir(id); err != nil {
		return nil, "", kerr.Wrap(kerr.Internal, "lookup", what, err)
	}
	p, err := ns.pathOf(n)
	return n.clone(), p, err
}

func (ns *Namespace) pathOf(n *Inode) (string, error) {
	if n.ID == RootID {
		return "/", nil
	}
	parts := []string{n.Name}
	for cid := n.Parent; cid != RootID; {
		d, err := ns.dir(cid)
		if err != nil {
			return "", err
		}
		parts = append(parts, d.Name)
		cid = d.Parent
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return "/" + strings.Join(parts, "/"), nil
}

// AbortStale aborts pending uploads created before t (their writer died)
// and queues their stripes for deletion. It returns how many it aborted.
func (ns *Namespace) AbortStale(t time.Time) (int, error) {
	var stale []*Inode
	err := ns.eng.Scan([]byte{'P'}, []byte{'Q'}, func(_, v []byte) bool {
		if f, err := decodeInode(v); err == nil && f.CTime < t.UnixNano() {
			stale = append(stale, f)
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for _, f := range stale {
		if err := ns.abortLocked(f); err != nil {
			return 0, err
		}
	}
	return len(stale), nil
}

package mount

import (
	"context"
	"fmt"
	"log"
	"math"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// node is a file or directory of the mount. Its attributes (and a
// directory's listing) are cached until its lease expires, or until an
// invalidation drops them.
type node struct {
	fs.Inode
	fsys *FS

	mu       sync.Mutex
	attr     nsapi.Attr
	valid    time.Time              // attr valid until
	lease    time.Time              // a directory's lease: its entries and their attributes
	ents     map[string]nsapi.Entry // a directory's listing, valid with the lease
	unsure   map[string]bool        // names changed since the listing: asked of the server
	listGen  uint64                 // counts changes of a directory's names (a listing read across one is not kept)
	jr       *journal               // the write-back journal while open for writing
	writers  int                    // handles sharing jr
	opens    int                    // open handles (writers included)
	told     int64                  // the size last told to the kernel
	stale    bool                   // the kernel's size is stale: forget n at its last close
	pageKey  string                 // the content the kernel's page cache holds
	pageVer  uint64                 // the data version the kernel's pages were read at
	gen      uint64                 // counts changes of the content (read-ahead buffers check it)
	unlinked bool
	posix    map[uint64]bool // owners of POSIX locks set here (released at their process's close)
	ptOpens  int             // opens the kernel reads itself (passthrough: direct.go)
	ptKey    string          // the file and data version their backing file holds
	datapath string          // how the last read-only open reads (kaon.datapath)
	// Opens at which the kernel emptied n's page cache, and the data
	// version of the last (a page drop queued before it is done).
	emptied, emptiedVer uint64
	// While flushes of n's journal run, the namespace's news of n's
	// content are held (they are mostly the flushes' own changes) and
	// decided when the last one ends (see flushed).
	flushing     int
	flushBase    uint64 // pageVer when the first of them began
	flushChanges int    // changing requests they sent
	held         []nsapi.Invalidation
	// A file created here (by creator, the client of the caller that
	// created it) and written whole from empty, not closed yet: a chmod
	// and a time set on it meanwhile are held in pend and committed with
	// its content (holdAttrs).
	creator *client.Client
	pend    client.RewriteAttrs
}

var (
	_ = (fs.NodeLookuper)((*node)(nil))
	_ = (fs.NodeGetattrer)((*node)(nil))
	_ = (fs.NodeSetattrer)((*node)(nil))
	_ = (fs.NodeReaddirer)((*node)(nil))
	_ = (fs.NodeMkdirer)((*node)(nil))
	_ = (fs.NodeCreater)((*node)(nil))
	_ = (fs.NodeOpener)((*node)(nil))
	_ = (fs.NodeUnlinker)((*node)(nil))
	_ = (fs.NodeRmdirer)((*node)(nil))
	_ = (fs.NodeRenamer)((*node)(nil))
	_ = (fs.NodeStatfser)((*node)(nil))
	_ = (fs.NodeGetxattrer)((*node)(nil))
	_ = (fs.NodeSetxattrer)((*node)(nil))
	_ = (fs.NodeListxattrer)((*node)(nil))
	_ = (fs.NodeRemovexattrer)((*node)(nil))
	_ = (fs.NodeOnForgetter)((*node)(nil))
	_ = (fs.NodeGetlker)((*node)(nil))
	_ = (fs.NodeSetlker)((*node)(nil))
	_ = (fs.NodeSetlkwer)((*node)(nil))
	_ = (fs.NodeLinker)((*node)(nil))
	_ = (fs.NodeSymlinker)((*node)(nil))
	_ = (fs.NodeReadlinker)((*node)(nil))
)

func (n *node) ino() uint64 { n.mu.Lock(); defer n.mu.Unlock(); return n.attr.ID }

func (n *node) path() string { return n.fsys.nsPath(n.Path(nil)) }

func (n *node) setAttr(a nsapi.Attr, until time.Time) {
	n.mu.Lock()
	n.attr, n.valid = a, until
	n.mu.Unlock()
}

// errno maps a service error to the caller's errno. Failures that are
// not the caller's (the service or the network failed) are logged: the
// errno alone does not say why.
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	k := kerr.KindOf(err)
	if e := kerr.Errno(k); e == syscall.EIO || k == kerr.Unavailable || k == kerr.Internal {
		log.Printf("kaon mount: %v", err)
		return e
	}
	return kerr.Errno(k)
}

func (n *node) client(ctx context.Context) *client.Client { return n.fsys.ids.client(ctx) }

// cacheUntil is how long what a lookup in directory n answers may be
// cached: its lease, or the short time without one.
func (n *node) cacheUntil() time.Time {
	n.mu.Lock()
	l := n.lease
	n.mu.Unlock()
	if time.Now().Before(l) {
		return l
	}
	return time.Now().Add(n.fsys.opts.NoCacheTimeout)
}

// ensureLease subscribes directory n if it holds no lease; it must be
// called before reading what the lease covers, so no change between
// the read and the lease is missed.
func (n *node) ensureLease(ctx context.Context) {
	n.mu.Lock()
	held := time.Now().Before(n.lease)
	n.mu.Unlock()
	if held {
		return
	}
	gen := n.listingGen()
	until, es, listed := n.fsys.subscribe(ctx, n.path())
	n.mu.Lock()
	n.lease = until
	n.mu.Unlock()
	if listed {
		n.setListing(es, gen)
	}
}

func (n *node) renewed(until time.Time) {
	n.mu.Lock()
	if n.lease.Before(until) && !n.lease.IsZero() {
		n.lease = until
	}
	n.mu.Unlock()
}

// invalidate drops n's cached attributes and listing (and with lease
// its lease).
func (n *node) invalidate(lease bool) {
	n.mu.Lock()
	n.valid = time.Time{}
	n.ents, n.unsure = nil, nil
	n.listGen++
	if lease {
		n.lease = time.Time{}
		n.gen++
	}
	n.mu.Unlock()
}

// A directory's listing is cached with its lease, so that lookups,
// negative ones included, and listings are answered without a request.
// Every change of a name the lease covers (an invalidation, or a change
// made here) makes that name unsure — asked of the server from then on
// — without dropping the rest; a listing read while a change arrived
// is not kept (listGen).

// nameChanged notes that directory n's entry name changed.
func (n *node) nameChanged(name string) {
	n.mu.Lock()
	n.listGen++
	if n.ents != nil {
		delete(n.ents, name)
		n.unsure[name] = true
	}
	n.mu.Unlock()
}

// hold keeps ev, a change of n's content, for the end of the flushes
// of n under way; it reports false when none is.
func (n *node) hold(ev nsapi.Invalidation) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.flushing == 0 {
		return false
	}
	n.held = append(n.held, ev)
	return true
}

// listingGen is the generation a listing read from now on is kept at.
func (n *node) listingGen() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.listGen
}

// setListing caches es as directory n's listing if its names did not
// change since gen and its lease holds.
func (n *node) setListing(es []nsapi.Entry, gen uint64) {
	ents := make(map[string]nsapi.Entry, len(es))
	for _, e := range es {
		ents[e.Name] = e
	}
	n.mu.Lock()
	if gen == n.listGen && time.Now().Before(n.lease) {
		n.ents, n.unsure = ents, map[string]bool{}
	}
	n.mu.Unlock()
}

// listed answers name from directory n's cached listing: known says
// whether it can (lease held, name not changed since), found whether
// the name exists.
func (n *node) listed(name string) (e nsapi.Entry, found, known bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ents == nil || !time.Now().Before(n.lease) || n.unsure[name] {
		return e, false, false
	}
	e, found = n.ents[name]
	return e, found, true
}

// created puts e, made here, into directory n's listing (unless the
// name changed meanwhile).
func (n *node) created(e nsapi.Entry) {
	n.mu.Lock()
	if n.ents != nil && !n.unsure[e.Name] {
		n.ents[e.Name] = e
	}
	n.mu.Unlock()
}

// changedHere notes in n's directory that n changed (its listed
// attributes are stale).
func (n *node) changedHere() {
	if name, p := n.Parent(); p != nil {
		if pn, ok := p.Operations().(*node); ok {
			pn.nameChanged(name)
		}
	}
}

// modified applies a change of n's content and reports whether the
// kernel's pages of it must go.
func (n *node) modified(ev nsapi.Invalidation) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.valid = time.Time{}
	if ev.DataVersion != 0 && ev.DataVersion <= n.pageVer {
		return false // our own flush, or older news
	}
	n.pageVer = max(n.pageVer, ev.DataVersion) // the pages go now
	if ev.DataVersion > n.attr.DataVersion {
		// Reads stop at the size known: the new one, at once.
		n.attr.Size, n.attr.DataVersion = ev.Size, ev.DataVersion
		n.attr.MTime = time.Unix(0, ev.MTime)
	}
	n.pageKey = ""
	n.gen++
	return true
}

// contentKey names a file's content: the kernel's pages of it are kept
// across opens while it is unchanged.
func contentKey(a nsapi.Attr) string {
	return fmt.Sprintf("%d/%d/%d/%d", a.ID, a.DataVersion, a.Size, a.MTime.UnixNano())
}

// fresh returns n's attributes, from the cache while valid.
func (n *node) fresh(ctx context.Context) (nsapi.Attr, time.Time, syscall.Errno) {
	n.mu.Lock()
	a, until := n.attr, n.valid
	n.mu.Unlock()
	if time.Now().Before(until) {
		return a, until, 0
	}
	var until2 time.Time
	if p := n.parentNode(); p != nil {
		p.ensureLease(ctx)
		until2 = p.cacheUntil()
		name, _ := n.Parent()
		if e, found, known := p.listed(name); known && found && e.ID == a.ID && a.ID != 0 {
			n.mu.Lock()
			if n.jr == nil {
				n.attr, n.valid = e.Attr, until2
			}
			a, until2 = n.attr, n.valid
			n.mu.Unlock()
			return a, until2, 0
		}
	} else { // the root: its own lease
		n.ensureLease(ctx)
		until2 = n.cacheUntil()
	}
	e, err := n.client(ctx).Stat(ctx, n.path())
	if err != nil {
		return a, until, errno(err)
	}
	n.mu.Lock()
	replaced := e.ID != n.attr.ID && n.attr.ID != 0
	if !replaced {
		if e.DataVersion != n.attr.DataVersion {
			n.gen++ // changed: what was read ahead is stale
		}
		n.attr, n.valid = e.Attr, until2
	}
	a = n.attr
	n.mu.Unlock()
	if replaced {
		// The name is another file now (replaced while no event told
		// us): the kernel must look it up again.
		if name, p := n.Parent(); p != nil {
			n.fsys.queue(func() { p.NotifyEntry(name) })
		}
		return a, time.Now(), 0
	}
	return a, until2, 0
}

func (n *node) emptiedCount() uint64 { n.mu.Lock(); defer n.mu.Unlock(); return n.emptied }

// knownAs reports whether the kernel knows n as name in directory dir
// (an inode number), and n is not unlinked.
func (n *node) knownAs(dir uint64, name string) bool {
	n.mu.Lock()
	unlinked := n.unlinked
	n.mu.Unlock()
	got, p := n.Parent()
	if unlinked || p == nil || got != name {
		return false
	}
	pn, ok := p.Operations().(*node)
	return ok && pn.ino() == dir
}

// cacheUntilHere is how long n's own attributes may be cached: its
// directory's lease (the root's own).
func (n *node) cacheUntilHere() time.Time {
	if p := n.parentNode(); p != nil {
		return p.cacheUntil()
	}
	return n.cacheUntil()
}

func (n *node) parentNode() *node {
	_, p := n.Parent()
	if p == nil {
		return nil
	}
	pn, _ := p.Operations().(*node)
	return pn
}

// fill writes a into out as the kernel sees it.
func (n *node) fill(a nsapi.Attr, out *fuse.Attr) {
	out.Ino = a.ID
	out.Mode = a.Mode & 0o7777
	out.Nlink = 1
	switch {
	case a.IsDir:
		out.Mode |= syscall.S_IFDIR
		out.Nlink = 2
		out.Size = 4096
	case a.IsLink():
		out.Mode = syscall.S_IFLNK | 0o777
		out.Size = uint64(len(a.Target))
	default:
		out.Mode |= syscall.S_IFREG
		out.Size = uint64(a.Size)
	}
	// The journal's lock is never taken under n.mu: a read holds it
	// while it asks n for its content generation.
	n.mu.Lock()
	jr, unlinked, pd := n.jr, n.unlinked, n.pend
	n.mu.Unlock()
	if jr != nil {
		out.Size = uint64(jr.Size())
	}
	if pd.SetMode { // held for the content's commit (holdAttrs)
		out.Mode = out.Mode&syscall.S_IFMT | pd.Mode
	}
	if !pd.MTime.IsZero() {
		a.MTime = pd.MTime
	}
	if !a.IsDir {
		n.mu.Lock()
		n.told = int64(out.Size)
		n.mu.Unlock()
	}
	if unlinked {
		out.Nlink = 0
	}
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 1 << 20
	out.Owner = fuse.Owner{Uid: a.UID, Gid: a.GID}
	out.SetTimes(nil, &a.MTime, &a.CTime)
	out.Atime, out.Atimensec = out.Mtime, out.Mtimensec
}

func timeout(until time.Time) time.Duration {
	return max(time.Until(until), 0)
}

// child makes (or finds) the node of entry e below n.
func (n *node) child(ctx context.Context, e nsapi.Entry, until time.Time, out *fuse.EntryOut) *fs.Inode {
	mode := fileType(e.Attr)
	// go-fuse makes a new Inode for every NewInode and keeps the one it
	// knows by inode number only after Lookup returned: the node the
	// kernel knows is found here first, so its state (a journal) answers.
	cn := n.fsys.lookupNode(e.ID)
	if cn != nil && cn.IsDir() == e.IsDir {
		cn.mu.Lock()
		if cn.jr == nil { // a file open for writing knows its size better
			cn.attr, cn.valid = e.Attr, until
		}
		cn.mu.Unlock()
	} else {
		cn = &node{fsys: n.fsys}
		cn.attr, cn.valid = e.Attr, until
		n.NewInode(ctx, cn, fs.StableAttr{Mode: mode, Ino: e.ID})
		n.fsys.register(cn)
	}
	ch := &cn.Inode
	a, _ := cn.snapshot()
	cn.fill(a, &out.Attr)
	out.SetEntryTimeout(timeout(until))
	out.SetAttrTimeout(timeout(until))
	return ch
}

func (n *node) snapshot() (nsapi.Attr, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.attr, n.valid
}

// Lookup answers from the directory's listing while its lease holds,
// else asks the namespace service.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (_ *fs.Inode, eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("lookup").Done(time.Now(), &eno)
	if len(name) > 255 {
		return nil, syscall.ENAMETOOLONG
	}
	n.ensureLease(ctx)
	until := n.cacheUntil()
	if e, found, known := n.listed(name); known {
		if !found {
			out.SetEntryTimeout(timeout(until))
			n.fsys.Stats.Counter("negative_cached").Add(1)
			return nil, syscall.ENOENT
		}
		n.fsys.Stats.Counter("lookup_cached").Add(1)
		return n.child(ctx, e, until, out), 0
	}
	e, err := n.client(ctx).Stat(ctx, path.Join(n.path(), name))
	if kerr.Is(err, kerr.NotFound) {
		out.SetEntryTimeout(timeout(until))
		return nil, syscall.ENOENT
	}
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, e, until, out), 0
}

// Getattr answers from the cache while the lease holds.
func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) (eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("getattr").Done(time.Now(), &eno)
	n.mu.Lock()
	unlinked := n.unlinked
	n.mu.Unlock()
	a, until := n.snapshot()
	if !unlinked {
		if a, until, eno = n.fresh(ctx); eno != 0 {
			return eno
		}
	}
	n.fill(a, &out.Attr)
	out.SetTimeout(timeout(until))
	return 0
}

// Readdir lists the directory (and caches the listing with its lease).
func (n *node) Readdir(ctx context.Context) (_ fs.DirStream, eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("readdir").Done(time.Now(), &eno)
	n.ensureLease(ctx)
	es := n.cachedListing()
	if es == nil {
		gen := n.listingGen()
		var err error
		if es, err = n.client(ctx).List(ctx, n.path()); err != nil {
			return nil, errno(err)
		}
		n.setListing(es, gen)
	} else {
		n.fsys.Stats.Counter("readdir_cached").Add(1)
	}
	list := make([]fuse.DirEntry, 0, len(es))
	for _, e := range es {
		list = append(list, fuse.DirEntry{Name: e.Name, Ino: e.ID, Mode: fileType(e.Attr)})
	}
	return fs.NewListDirStream(list), 0
}

// cachedListing is directory n's listing, by name, when the cache holds
// all of it (nil otherwise).
func (n *node) cachedListing() []nsapi.Entry {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ents == nil || len(n.unsure) > 0 || !time.Now().Before(n.lease) {
		return nil
	}
	es := make([]nsapi.Entry, 0, len(n.ents))
	for _, e := range n.ents {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b nsapi.Entry) int { return strings.Compare(a.Name, b.Name) })
	return es
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("mkdir").Done(time.Now(), &eno)
	if len(name) > 255 {
		return nil, syscall.ENAMETOOLONG
	}
	c := n.client(ctx)
	p := path.Join(n.path(), name)
	perm := mode & 0o7777
	e, err := c.MkdirStat(ctx, p, perm, false)
	if err != nil {
		return nil, errno(err)
	}
	if perm == 0 { // the service reads mode 0 as its default
		if e, err = c.ChmodStat(ctx, p, 0); err != nil {
			return nil, errno(err)
		}
	}
	if e.ID == 0 { // a server that does not answer the entry
		if e, err = c.Stat(ctx, p); err != nil {
			return nil, errno(err)
		}
	}
	n.created(e)
	return n.child(ctx, e, n.cacheUntil(), out), 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (_ *fs.Inode, _ fs.FileHandle, _ uint32, eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("create").Done(time.Now(), &eno)
	if len(name) > 255 {
		return nil, nil, 0, syscall.ENAMETOOLONG
	}
	c := n.client(ctx)
	p := path.Join(n.path(), name)
	perm := mode & 0o7777
	e, err := c.Touch(ctx, p, true, perm)
	var creator *client.Client // nil: it existed, opened
	if err == nil {
		creator = c
	}
	if kerr.Is(err, kerr.Exists) && flags&syscall.O_EXCL == 0 {
		e, err = c.Stat(ctx, p) // made meanwhile elsewhere: open it
	}
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	if perm == 0 && e.Mode != 0 { // the service reads mode 0 as its default
		if err := c.Chmod(ctx, p, 0); err != nil {
			n.nameChanged(name)
			return nil, nil, 0, errno(err)
		}
		e.Mode = 0
	}
	n.created(e)
	ch := n.child(ctx, e, n.cacheUntil(), out)
	cn := ch.Operations().(*node)
	cn.mu.Lock()
	cn.creator = creator
	cn.mu.Unlock()
	fh, fl, eno := cn.open(ctx, flags, c)
	return ch, fh, fl, eno
}

func (n *node) Open(ctx context.Context, flags uint32) (_ fs.FileHandle, _ uint32, eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("open").Done(time.Now(), &eno)
	a, _, eno := n.fresh(ctx)
	if eno != 0 {
		return nil, 0, eno
	}
	if n.fsys.squashedDenies(ctx, a, flags) {
		return nil, 0, syscall.EACCES
	}
	return n.open(ctx, flags, n.client(ctx))
}

func (n *node) Unlink(ctx context.Context, name string) (eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("unlink").Done(time.Now(), &eno)
	return n.remove(ctx, name, false)
}

func (n *node) Rmdir(ctx context.Context, name string) (eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("rmdir").Done(time.Now(), &eno)
	return n.remove(ctx, name, true)
}

func (n *node) remove(ctx context.Context, name string, dir bool) syscall.Errno {
	c := n.client(ctx)
	p := path.Join(n.path(), name)
	e, err := c.Stat(ctx, p)
	if err != nil {
		return errno(err)
	}
	switch {
	case dir && !e.IsDir:
		return syscall.ENOTDIR
	case !dir && e.IsDir:
		return syscall.EISDIR
	}
	err = c.Remove(ctx, p, false)
	n.nameChanged(name) // the session's event would too, later
	if err != nil {
		return errno(err)
	}
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*node); ok {
			cn.mu.Lock()
			cn.unlinked = true
			cn.mu.Unlock()
		}
	}
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) (eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("rename").Done(time.Now(), &eno)
	if flags&^uint32(unix.RENAME_NOREPLACE) != 0 {
		return syscall.EINVAL // RENAME_EXCHANGE, RENAME_WHITEOUT: not supported
	}
	if len(newName) > 255 {
		return syscall.ENAMETOOLONG
	}
	np := newParent.(*node)
	c := n.client(ctx)
	from, to := path.Join(n.path(), name), path.Join(np.path(), newName)
	// A file open for writing here is flushed first: the rename then
	// moves what was written.
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*node); ok {
			if eno := cn.flush(ctx, c); eno != 0 {
				return eno
			}
		}
	}
	replaced := np.GetChild(newName)
	err := c.Rename(ctx, from, to, flags&unix.RENAME_NOREPLACE == 0)
	n.nameChanged(name) // the session's events would too, later
	np.nameChanged(newName)
	if err != nil {
		return errno(err)
	}
	if replaced != nil {
		// A file open here that the rename replaced is gone: its journal
		// must not be flushed onto the name it had.
		if rn, ok := replaced.Operations().(*node); ok && !rn.IsDir() {
			rn.mu.Lock()
			rn.unlinked = true
			rn.mu.Unlock()
		}
	}
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("setattr").Done(time.Now(), &eno)
	a, _ := n.snapshot()
	// Times: the namespace keeps the modification time, no access time
	// (an atime set is accepted and not kept, as on a noatime mount).
	// With the write-back cache the kernel keeps a file's mtime and sends
	// it (mtime and ctime, no atime) before it writes the file back: while
	// this mount holds unwritten data, that is answered here — the commit
	// of the data stamps the file, and a close or fsync must not fail
	// while the servers restart (the grace). It is answered before the
	// caller's identity is looked for: the kernel sends it from a process
	// closing the file, at exec too (below).
	kernelTimes := n.fsys.opts.Writeback && !a.IsDir &&
		in.Valid&(fuse.FATTR_ATIME|fuse.FATTR_MTIME|fuse.FATTR_CTIME) == fuse.FATTR_MTIME|fuse.FATTR_CTIME &&
		in.Valid&(fuse.FATTR_MODE|fuse.FATTR_UID|fuse.FATTR_GID|fuse.FATTR_SIZE|fuse.FATTR_KILL_SUIDGID) == 0
	if kernelTimes && n.dirty() {
		a, until := n.snapshot()
		n.fill(a, &out.Attr)
		out.SetTimeout(timeout(until))
		return 0
	}
	// A SETATTR naming an open file (ftruncate; the kernel's times of a
	// file it writes back) acts as that file's opener. The kernel sends
	// the times from the process closing a descriptor, and exec closes
	// every O_CLOEXEC one while it holds the process's exec_update_lock:
	// the caller's identity (its token, found in /proc/PID/environ, whose
	// open waits for that lock) could not be read, the exec never ended
	// (TestWritebackExecWithDirtyFile; DESIGN-NOTES).
	var c *client.Client
	if h := asHandle(f); h != nil {
		c = h.c
	} else {
		c = n.client(ctx)
	}
	if n.holdAttrs(c, in, a, out) {
		return 0
	}
	// Sent now: what was held of the same kind is older, and must not
	// follow it (sendPend).
	n.mu.Lock()
	if in.Valid&fuse.FATTR_MODE != 0 {
		n.pend.SetMode = false
	}
	if in.Valid&fuse.FATTR_MTIME != 0 {
		n.pend.MTime = time.Time{}
	}
	n.mu.Unlock()
	p := n.path()
	// The entry after the last change, as the server answered it: no
	// stat after a chmod or chown (ID 0: none yet, or stale).
	var after nsapi.Entry
	if m, ok := in.GetMode(); ok {
		e, err := c.ChmodStat(ctx, p, m&0o7777)
		if err != nil {
			return errno(err)
		}
		after = e
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		if !uok {
			uid = a.UID
		}
		if !gok {
			gid = a.GID
		}
		e, err := c.ChownStat(ctx, p, uid, gid)
		if err != nil {
			return errno(err)
		}
		after = e
	}
	// FATTR_KILL_SUIDGID: a chown, or a truncate by anyone but root
	// (fusecore's ServerKillsPriv leaves it to the mount).
	if in.Valid&fuse.FATTR_KILL_SUIDGID != 0 && !a.IsDir {
		if _, setMode := in.GetMode(); !setMode && killsPriv(a.Mode) {
			if eno := n.killPriv(ctx, c); eno != 0 {
				return eno
			}
			after.ID = 0
		}
	}
	if sz, ok := in.GetSize(); ok {
		n.mu.Lock()
		jr := n.jr
		n.mu.Unlock()
		var err error
		if jr != nil {
			err = jr.Truncate(int64(sz))
		} else {
			err = c.Truncate(ctx, p, int64(sz))
		}
		if err != nil {
			return errno(err)
		}
		after.ID = 0
	}
	// An explicit time: written data is replayed first, or its commit at
	// close would stamp the file with the time of the close (cp -p sets
	// times before it closes).
	if in.Valid&fuse.FATTR_MTIME != 0 {
		if eno := n.flush(ctx, c); eno != 0 {
			return eno
		}
		mt, _ := in.GetMTime()
		// With the write-back cache the kernel sends a touch (and an
		// O_TRUNC) as an explicit time; having checked permissions
		// (default_permissions), it lets only the owner or root set any
		// other time than now, so another caller's time is "now".
		now := in.Valid&fuse.FATTR_MTIME_NOW != 0
		if cl, ok := fuse.FromContext(ctx); ok && cl.Uid != 0 && cl.Uid != a.UID {
			now = true
		}
		if err := c.SetMTime(ctx, p, mt, now); err != nil {
			return errno(err)
		}
		after.ID = 0
	}
	n.invalidate(false)
	n.changedHere()
	if after.ID != 0 && after.ID == a.ID { // as fresh would have stored it
		until := n.cacheUntilHere()
		n.mu.Lock()
		if after.DataVersion != n.attr.DataVersion {
			n.gen++ // changed: what was read ahead is stale
		}
		n.attr, n.valid = after.Attr, until
		n.mu.Unlock()
		n.fill(after.Attr, &out.Attr)
		out.SetTimeout(timeout(until))
		return 0
	}
	a, until, eno := n.fresh(ctx)
	if eno != 0 {
		return eno
	}
	n.fill(a, &out.Attr)
	out.SetTimeout(timeout(until))
	return 0
}

// holdAttrs holds a chmod, a chown that changes nothing, and a time set
// by the client that created n here while n is written whole from empty
// and not closed (its flush sends it as one upload that rewrites it,
// client.Rewrite): they are committed with the content, in the upload's
// one commit, instead of one durable commit each — tar's fchown and
// fchmod of every file it extracts (docs/DESIGN-NOTES.md). The creator
// owns the file on the server, so the server grants at the flush what
// it would have granted now (chmod, an explicit time: owner or root).
// Until the close other clients see the file as created (empty, its
// create mode), never a mode not committed; this mount shows the held
// values (fill). What a flush cannot send with the content is sent as
// its own change after it (sendPend). It reports whether it answered.
func (n *node) holdAttrs(c *client.Client, in *fuse.SetAttrIn, a nsapi.Attr, out *fuse.AttrOut) bool {
	const (
		holdable = fuse.FATTR_MODE | fuse.FATTR_UID | fuse.FATTR_GID | fuse.FATTR_MTIME | fuse.FATTR_MTIME_NOW |
			fuse.FATTR_ATIME | fuse.FATTR_ATIME_NOW | fuse.FATTR_CTIME | fuse.FATTR_FH | fuse.FATTR_LOCKOWNER | fuse.FATTR_KILL_SUIDGID
		changes = fuse.FATTR_MODE | fuse.FATTR_UID | fuse.FATTR_GID | fuse.FATTR_MTIME
	)
	if a.IsDir || in.Valid&^holdable != 0 || in.Valid&changes == 0 {
		return false
	}
	if uid, ok := in.GetUID(); ok && uid != a.UID {
		return false
	}
	if gid, ok := in.GetGID(); ok && gid != a.GID {
		return false
	}
	if _, setMode := in.GetMode(); in.Valid&fuse.FATTR_KILL_SUIDGID != 0 && !setMode && killsPriv(a.Mode) {
		return false
	}
	// Not held: setuid and setgid (a later write may have to clear
	// them). A time is: the write-back cache writes the pages dirtied
	// before it back first (write_inode_now before a SETATTR of mode,
	// owner or times), and a write after it drops it (Write).
	if m, ok := in.GetMode(); ok && m&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
		return false
	}
	n.mu.Lock()
	jr, creator, unlinked := n.jr, n.creator, n.unlinked
	n.mu.Unlock()
	if jr == nil || unlinked || c != creator || n.fsys.noRewrite.Load() || !jr.rewritable() {
		return false
	}
	n.mu.Lock()
	if m, ok := in.GetMode(); ok {
		n.pend.SetMode, n.pend.Mode = true, m&0o7777
		n.attr.Mode = m & 0o7777
	}
	if in.Valid&fuse.FATTR_MTIME != 0 {
		mt, _ := in.GetMTime()
		if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
			mt = time.Time{} // the commit's own time
		}
		n.pend.MTime = mt
		n.attr.MTime = mt
		if mt.IsZero() {
			n.attr.MTime = time.Now()
		}
	}
	a, until := n.attr, n.valid
	n.mu.Unlock()
	n.fsys.Stats.Counter("attrs_held").Add(1)
	n.fill(a, &out.Attr)
	out.SetTimeout(timeout(until))
	return true
}

// sendPend sends what holdAttrs held for n that no rewrite took (the
// file was not sent whole after all, or the server predates it) as the
// changes they were: after the content, so its time stays.
func (n *node) sendPend(ctx context.Context) syscall.Errno {
	n.mu.Lock()
	pd, c, unlinked := n.pend, n.creator, n.unlinked
	n.pend = client.RewriteAttrs{}
	n.mu.Unlock()
	if unlinked || c == nil || !pd.SetMode && pd.MTime.IsZero() {
		return 0
	}
	p := n.path()
	if pd.SetMode {
		if err := c.Chmod(ctx, p, pd.Mode); err != nil {
			return errno(err)
		}
	}
	if !pd.MTime.IsZero() {
		if err := c.SetMTime(ctx, p, pd.MTime, false); err != nil {
			return errno(err)
		}
	}
	n.mu.Lock()
	n.valid = time.Time{} // asked again
	n.mu.Unlock()
	return 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) (eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("statfs").Done(time.Now(), &eno)
	st, err := n.client(ctx).StatFS(ctx, n.path())
	if err != nil {
		return errno(err)
	}
	const bs = 4096
	out.Bsize, out.Frsize = bs, bs
	out.Blocks, out.Bfree, out.Bavail = st.Total/bs, st.Free/bs, st.Free/bs
	out.Files, out.Ffree = math.MaxUint32, math.MaxUint32
	out.NameLen = 255
	return 0
}

// Extended attributes are the namespace's (user.*, and sys.* where the
// caller may); system.* and security.* are not kept.
func xattrSupported(name string) bool {
	return !(len(name) >= 7 && name[:7] == "system.") && !(len(name) >= 9 && name[:9] == "security.")
}

func (n *node) xattrs(ctx context.Context) ([][2]string, syscall.Errno) {
	as, err := n.client(ctx).Attrs(ctx, n.path())
	return as, errno(err)
}

func (n *node) Getxattr(ctx context.Context, name string, dest []byte) (_ uint32, eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("getxattr").Done(time.Now(), &eno)
	if !xattrSupported(name) {
		return 0, syscall.ENODATA
	}
	value, ok := "", false
	if strings.HasPrefix(name, "kaon.") {
		value, ok, eno = n.virtualXattr(ctx, name)
	} else {
		var as [][2]string
		as, eno = n.xattrs(ctx)
		for _, kv := range as {
			if kv[0] == name {
				value, ok = kv[1], true
			}
		}
	}
	switch {
	case eno != 0:
		return 0, eno
	case !ok:
		return 0, syscall.ENODATA
	case len(dest) < len(value):
		return uint32(len(value)), syscall.ERANGE
	}
	return uint32(copy(dest, value)), 0
}

// virtualXattr answers the kaon.* attributes, which the mount makes up
// from what the namespace records, as eosxd's eos.* ones. They are not
// listed by listxattr (as eosxd does not list its own): cp -a, rsync -X
// and tar --xattrs copy what listxattr names, and a copied kaon.* value
// would be stale where it landed and refused by the namespace.
//   - kaon.tsize, kaon.fcount, kaon.dcount, kaon.ttime: a directory's
//     subtree accounting (bytes, files, directories, latest change as
//     SECONDS.NANOSECONDS), kept by the namespace on every change, so
//     reading them costs one stat (uncached: a change deep below is
//     not a change of the directory's lease); a file answers its own
//     size, 1, 0 and mtime.
//   - kaon.quota: the quotas that apply to the caller (their uid and
//     gid, and the project) at this place, one line each: the node, the
//     kind and id, bytes and files used of their limits (0: none).
//   - kaon.checksum: the file's checksums as TYPE:HEX, one per line; a
//     file with none recorded (written in place since) gets adler32,
//     computed by the service from the stored data and recorded.
//   - kaon.url.root, kaon.url.https: the file's URLs for xrdcp and curl
//     (root:// from --xrootd, else from ns status).
//   - kaon.stats: the mount's counters (operations, latencies, bytes;
//     direct_passthrough, direct_local, direct_server: read-only opens
//     by data path; direct_behind: open handles that found their local
//     stripe behind a change and read through the storage server since),
//     JSON, with "direct": the mode and whether the kernel took
//     passthrough.
//   - kaon.datapath: how this mount's last read-only open of the file
//     reads it (direct.go): passthrough, local or server; "" before any.
func (n *node) virtualXattr(ctx context.Context, name string) (string, bool, syscall.Errno) {
	switch name {
	case "kaon.url.https":
		return n.fsys.opts.URL + escapePath(n.path()), true, 0
	case "kaon.url.root":
		ep, err := n.fsys.xrootd(ctx)
		if err != nil || ep == "" {
			return "", false, errno(err)
		}
		return "root://" + ep + "/" + n.path(), true, 0
	case "kaon.stats":
		return string(n.fsys.Stats.JSON(map[string]any{"session": n.fsys.SessionID(), "direct": n.fsys.directStats()})), true, 0
	case "kaon.datapath":
		n.mu.Lock()
		dp := n.datapath
		n.mu.Unlock()
		return dp, true, 0
	case "kaon.quota":
		return n.quota(ctx)
	case "kaon.tsize", "kaon.fcount", "kaon.dcount", "kaon.ttime":
		// Asked each time: a change deep below moves them, and the
		// lease's invalidations cover a directory's own entries only.
		e, err := n.client(ctx).Stat(ctx, n.path())
		if err != nil {
			return "", false, errno(err)
		}
		a := e.Attr
		size, files, dirs, t := a.Size, int64(1), int64(0), a.MTime
		if a.IsDir {
			size, files, dirs = a.TreeSize, a.TreeFiles, a.TreeDirs
			if a.TreeMTime != nil {
				t = *a.TreeMTime
			}
		}
		switch name {
		case "kaon.tsize":
			return strconv.FormatInt(size, 10), true, 0
		case "kaon.fcount":
			return strconv.FormatInt(files, 10), true, 0
		case "kaon.dcount":
			return strconv.FormatInt(dirs, 10), true, 0
		}
		return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()), true, 0
	case "kaon.checksum":
		a, _, eno := n.fresh(ctx)
		if eno != 0 || a.IsDir {
			return "", false, eno
		}
		sums := a.Checksums
		if len(sums) == 0 {
			sum, err := n.client(ctx).Checksum(ctx, n.path(), "adler32")
			if err != nil {
				return "", false, errno(err)
			}
			sums = map[string]string{"adler32": sum}
		}
		types := make([]string, 0, len(sums))
		for t := range sums {
			types = append(types, t)
		}
		sort.Strings(types)
		var b strings.Builder
		for _, t := range types {
			fmt.Fprintf(&b, "%s:%s\n", t, sums[t])
		}
		return b.String(), true, 0
	}
	return "", false, 0
}

// quota answers kaon.quota: the quota nodes at or above n's place, for
// the caller's keys (uid, gids, project).
func (n *node) quota(ctx context.Context) (string, bool, syscall.Errno) {
	c := n.client(ctx)
	who, err := c.Whoami(ctx)
	if err != nil {
		return "", false, errno(err)
	}
	// quota/ls lists the nodes at or below a path: ask from the top
	// (quota nodes are few) and keep n's ancestors.
	qs, err := c.Quotas(ctx, "/")
	if err != nil {
		return "", false, errno(err)
	}
	p := n.path()
	var b strings.Builder
	for _, q := range qs {
		above := q.Path == "/" || p == q.Path || strings.HasPrefix(p, strings.TrimSuffix(q.Path, "/")+"/")
		mine := above && q.Kind == nsapi.QuotaProject ||
			q.Kind == nsapi.QuotaUser && q.ID == who.UID ||
			q.Kind == nsapi.QuotaGroup && (q.ID == who.GID || slices.Contains(who.Groups, q.ID))
		if mine {
			fmt.Fprintf(&b, "%s %s %d bytes %d/%d files %d/%d\n", q.Path, q.Kind, q.ID, q.UsedBytes, q.LimitBytes, q.UsedFiles, q.LimitFiles)
		}
	}
	return b.String(), true, 0
}

// escapePath escapes each name of a namespace path for a URL.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (_ uint32, eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("listxattr").Done(time.Now(), &eno)
	as, eno := n.xattrs(ctx)
	if eno != 0 {
		return 0, eno
	}
	var b []byte
	for _, kv := range as {
		b = append(append(b, kv[0]...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}

func (n *node) Setxattr(ctx context.Context, name string, data []byte, flags uint32) (eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("setxattr").Done(time.Now(), &eno)
	if !xattrSupported(name) {
		return syscall.EOPNOTSUPP
	}
	if flags&(0x1|0x2) != 0 { // XATTR_CREATE, XATTR_REPLACE
		as, eno := n.xattrs(ctx)
		if eno != 0 {
			return eno
		}
		have := false
		for _, kv := range as {
			have = have || kv[0] == name
		}
		if flags&0x1 != 0 && have {
			return syscall.EEXIST
		}
		if flags&0x2 != 0 && !have {
			return syscall.ENODATA
		}
	}
	return errno(n.client(ctx).SetAttr(ctx, n.path(), name, string(data)))
}

func (n *node) Removexattr(ctx context.Context, name string) (eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("removexattr").Done(time.Now(), &eno)
	if !xattrSupported(name) {
		return syscall.ENODATA
	}
	err := n.client(ctx).RemoveAttr(ctx, n.path(), name)
	if kerr.Is(err, kerr.NotFound) {
		return syscall.ENODATA
	}
	return errno(err)
}

// fileType is the S_IF* type of a.
func fileType(a nsapi.Attr) uint32 {
	switch {
	case a.IsDir:
		return syscall.S_IFDIR
	case a.IsLink():
		return syscall.S_IFLNK
	}
	return syscall.S_IFREG
}

// Symlink creates a symbolic link; its target is stored as given. The
// mount never resolves a link: the kernel reads it (Readlink) and
// follows it itself, within the mount or out of it, as for any local
// file system.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (_ *fs.Inode, eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("symlink").Done(time.Now(), &eno)
	if len(name) > 255 {
		return nil, syscall.ENAMETOOLONG
	}
	e, err := n.client(ctx).Symlink(ctx, target, path.Join(n.path(), name))
	if err != nil {
		return nil, errno(err)
	}
	n.nameChanged(name) // the session's event would too, later
	return n.child(ctx, e, n.cacheUntil(), out), 0
}

// Readlink answers a link's target from its attributes: a link's target
// never changes (a new one is a new inode).
func (n *node) Readlink(ctx context.Context) (_ []byte, eno syscall.Errno) {
	defer n.fsys.Stats.Op("readlink").Done(time.Now(), &eno)
	a, _ := n.snapshot()
	if !a.IsLink() {
		return nil, syscall.EINVAL
	}
	return []byte(a.Target), 0
}

// Link refuses hard links with EPERM, link(2)'s answer for a file
// system that has none: the namespace names each inode once (its record
// holds its one parent and name), and EPERM is what ln, cp -l, rsync
// and git expect before they fall back to copying.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *node) OnForget() { n.fsys.forget(n) }

// detach makes a FUSE request's context deaf to interrupts. The kernel
// interrupts a request whenever its caller gets a signal — every Go
// program gets SIGURG for preemption all the time — and a create or a
// rename abandoned half-way (done at the server, failed to the caller)
// is worse than one that completes: the request runs to its end (bounded
// by the client's timeout). Only a blocking lock wait listens (Setlkw).
func detach(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

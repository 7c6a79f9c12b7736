package metafs

import (
	"container/list"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/fusecore"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// The overlay speaks the raw FUSE protocol: node IDs are computed from the
// entry index, so serving a tree costs no per-entry Go objects.
//
// Node ID layout: the root is always 1 and answers from the current index.
// Every other node is (generation<<32 | entry+1); a reload installs a new
// generation, invalidates the kernel's cached names, and keeps serving an
// old generation to the kernel inodes still referring to it until they are
// all forgotten (a process whose cwd is inside the old tree keeps a
// consistent, if old, view).

// MountOptions configures Mount.
type MountOptions struct {
	Force         bool          // mount even if the index is stale
	TTL           time.Duration // entry/attr/negative cache lifetime in the kernel (default 24h)
	NoPassthrough bool          // serve reads with pread instead of kernel passthrough
	FdCache       int           // lower files kept open after close (default 1024)
	AllowOther    bool          // let other users use the mount (`kaon metafs mount` sets it as root)
	CleanStale    bool          // lazily unmount a stale FUSE mount on the mountpoint first
	Debug         bool
	Logger        *log.Logger
}

// Stats counts what the overlay did, in the fusecore.Stats every Kaon
// mount keeps (per-operation counts and latencies); the fields are
// shortcuts into it. Opens that reach the tree below are LowerOpens,
// and every read (the read operation) does; nothing else does.
type Stats struct {
	*fusecore.Stats
	lookup, getattr, readlink, getxattr, listxattr, statfs, readdir, open, read *fusecore.OpStats

	NegLookups  *atomic.Int64 // lookups of names not in the index
	Refused     *atomic.Int64 // opens of files changed below
	LowerOpens  *atomic.Int64 // files opened below
	Passthrough *atomic.Int64 // of those, served by kernel passthrough
	Reloads     *atomic.Int64
}

func newStats() Stats {
	s := fusecore.NewStats()
	return Stats{Stats: s,
		lookup: s.Op("lookup"), getattr: s.Op("getattr"), readlink: s.Op("readlink"),
		getxattr: s.Op("getxattr"), listxattr: s.Op("listxattr"), statfs: s.Op("statfs"),
		readdir: s.Op("readdir"), open: s.Op("open"), read: s.Op("read"),
		NegLookups: s.Counter("negative_lookups"), Refused: s.Counter("refused_opens"),
		LowerOpens: s.Counter("lower_opens"), Passthrough: s.Counter("passthrough_opens"), Reloads: s.Counter("reloads"),
	}
}

type generation struct {
	id    uint32
	x     *Index
	refs  []atomic.Int32 // kernel lookup references per entry
	total atomic.Int64
}

func (g *generation) nodeid(i int) uint64 {
	if i == 0 {
		return 1
	}
	return uint64(g.id)<<32 | uint64(i+1)
}

func (g *generation) ref(i int, n int32) {
	if i != 0 {
		g.refs[i].Add(n)
		g.total.Add(int64(n))
	}
}

type lowerFile struct {
	key     uint64
	fd      int
	backing int32
	refs    int
	idle    *list.Element
}

// FS is the read-only overlay filesystem.
type FS struct {
	fuse.RawFileSystem // ENOSYS for anything not implemented below

	opt    MountOptions
	rootfd int
	lower  string
	mnt    string // for logs: the mountpoint, or lower before Mount
	srv    *fuse.Server
	ttl    time.Duration

	cur    atomic.Pointer[generation]
	gensMu sync.RWMutex
	gens   map[uint32]*generation
	loadMu sync.Mutex // serializes reloads

	fmu         sync.Mutex
	files       map[uint64]*lowerFile
	opening     map[uint64]chan struct{} // lower opens in flight
	idle        list.List                // *lowerFile with refs == 0, oldest first
	passthrough atomic.Bool

	Stats Stats
}

// Mounted is a running overlay, served by fusecore (which its daemon
// runs with a fusecore.Daemon).
type Mounted struct {
	*fusecore.Mount
	FS *FS
}

var _ = (fusecore.Served)((*Mounted)(nil))

// Mount serves x over mountpoint, reading data from lowerDir. lowerDir is
// opened before mounting, so mountpoint may be lowerDir itself.
func Mount(x *Index, lowerDir, mountpoint string, opt MountOptions) (*Mounted, error) {
	fd, err := unix.Open(lowerDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, kerr.Wrap(kerr.KindOf(err), "metafs mount", lowerDir, err)
	}
	fs, err := NewFS(x, fd, lowerDir, opt)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	if abs, err := filepath.Abs(mountpoint); err == nil {
		fs.mnt = abs
	}
	m, err := fusecore.NewRaw(fs, fusecore.Config{
		Mountpoint: mountpoint, FsName: "kaon-metafs:" + lowerDir, Name: "kaon-metafs",
		ReadOnly: true, AllowOther: opt.AllowOther, Passthrough: !opt.NoPassthrough, CleanStale: opt.CleanStale,
		Debug: opt.Debug, Logger: fs.opt.Logger,
	})
	if err != nil {
		fs.closeAll()
		return nil, err
	}
	if !opt.NoPassthrough && !m.PassthroughActive() {
		// Older kernel or missing CAP_SYS_ADMIN.
		fs.passthrough.Store(false)
		fs.opt.Logger.Printf("kernel passthrough unavailable; serving reads with pread")
	}
	return &Mounted{Mount: m, FS: fs}, nil
}

// Wait blocks until the overlay is unmounted, then releases the tree
// below.
func (m *Mounted) Wait() error {
	err := m.Mount.Wait()
	m.FS.closeAll()
	return err
}

// Reload switches the mount to x (see FS.Reload).
func (m *Mounted) Reload(x *Index, force bool) error { return m.FS.Reload(x, force) }

// Summary is the overlay's account (FS.Summary) and its statistics.
func (m *Mounted) Summary() string { return m.FS.Summary() + "\n" + m.FS.Stats.Summary() }

// NewFS builds the overlay over an open directory fd (checked for
// staleness unless opt.Force). Mount mounts it.
func NewFS(x *Index, rootfd int, lowerName string, opt MountOptions) (*FS, error) {
	if !opt.Force {
		if err := x.CheckFresh(rootfd, lowerName); err != nil {
			return nil, err
		}
	}
	if opt.TTL <= 0 {
		opt.TTL = 24 * time.Hour
	}
	if opt.FdCache <= 0 {
		opt.FdCache = 1024
	}
	if opt.Logger == nil {
		opt.Logger = log.New(os.Stderr, "kaon metafs: ", log.LstdFlags)
	}
	fs := &FS{RawFileSystem: fuse.NewDefaultRawFileSystem(), opt: opt, rootfd: rootfd, lower: lowerName, mnt: lowerName,
		ttl: opt.TTL, gens: map[uint32]*generation{}, files: map[uint64]*lowerFile{}, opening: map[uint64]chan struct{}{},
		Stats: newStats()}
	fs.passthrough.Store(!opt.NoPassthrough)
	g := &generation{id: 1, x: x, refs: make([]atomic.Int32, x.Len())}
	fs.gens[1] = g
	fs.cur.Store(g)
	return fs, nil
}

// Index returns the index currently served.
func (fs *FS) Index() *Index { return fs.cur.Load().x }

// Reload switches to x without unmounting: later lookups see x, and the
// kernel is told to drop every name it cached from the previous index.
func (fs *FS) Reload(x *Index, force bool) error {
	if !force {
		if err := x.CheckFresh(fs.rootfd, fs.lower); err != nil {
			return err
		}
	}
	fs.loadMu.Lock()
	defer fs.loadMu.Unlock()
	old := fs.cur.Load()
	g := &generation{id: old.id + 1, x: x, refs: make([]atomic.Int32, x.Len())}
	fs.gensMu.Lock()
	fs.gens[g.id] = g
	fs.gensMu.Unlock()
	fs.cur.Store(g)
	fs.Stats.Reloads.Add(1)
	fs.dropIdleFiles()
	if fs.srv == nil {
		return nil
	}
	// Root: attributes and cached listing, plus every root name old or new
	// (a new name may be hidden by a cached negative entry).
	fs.srv.InodeNotify(1, 0, 0)
	seen := map[string]bool{}
	for _, ix := range []*Index{old.x, x} {
		f, n := ix.Children(0)
		for c := f; c < f+n; c++ {
			if nm := ix.Name(c); !seen[nm] {
				seen[nm] = true
				fs.srv.EntryNotify(1, nm)
			}
		}
	}
	// Deeper names the kernel holds: dropping a directory's dentry also
	// drops its cached children, negative ones included.
	for i := range old.refs {
		if old.refs[i].Load() > 0 && old.x.Parent(i) != 0 {
			fs.srv.EntryNotify(old.nodeid(old.x.Parent(i)), old.x.Name(i))
		}
	}
	fs.maybeDropGen(old)
	return nil
}

func (fs *FS) maybeDropGen(g *generation) {
	if g.total.Load() == 0 && fs.cur.Load() != g {
		fs.gensMu.Lock()
		delete(fs.gens, g.id)
		fs.gensMu.Unlock()
	}
}

func (fs *FS) node(id uint64) (*generation, int, bool) {
	if id == 1 {
		return fs.cur.Load(), 0, true
	}
	fs.gensMu.RLock()
	g := fs.gens[uint32(id>>32)]
	fs.gensMu.RUnlock()
	i := int(uint32(id)) - 1
	if g == nil || i <= 0 || i >= g.x.Len() {
		return nil, 0, false
	}
	return g, i, true
}

func (fs *FS) fillAttr(x *Index, i int, a *fuse.Attr) {
	at := x.Attr(i)
	a.Ino = at.Ino
	a.Size = at.Size
	a.Blocks = at.Blocks
	a.Atime, a.Atimensec = uint64(at.Atime/1e9), uint32(at.Atime%1e9)
	a.Mtime, a.Mtimensec = uint64(at.Mtime/1e9), uint32(at.Mtime%1e9)
	a.Ctime, a.Ctimensec = uint64(at.Ctime/1e9), uint32(at.Ctime%1e9)
	a.Mode = at.Mode
	a.Nlink = at.Nlink
	a.Uid, a.Gid = at.Uid, at.Gid
	a.Rdev = uint32(unix.Mkdev(uint32(unix.Major(at.Rdev)), uint32(unix.Minor(at.Rdev))))
	a.Blksize = x.StatFS.Bsize
}

func (fs *FS) fillEntry(g *generation, i int, out *fuse.EntryOut) {
	out.NodeId = g.nodeid(i)
	out.Generation = uint64(g.id)
	out.SetEntryTimeout(fs.ttl)
	out.SetAttrTimeout(fs.ttl)
	fs.fillAttr(g.x, i, &out.Attr)
}

var estale = fuse.Status(syscall.ESTALE)

func (fs *FS) String() string { return "kaon-metafs" }

// Init keeps the server (for cache invalidations and backing files); it
// runs before the first request.
func (fs *FS) Init(s *fuse.Server) { fs.srv = s }

func (fs *FS) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer fs.Stats.lookup.DoneStatus(time.Now(), &st)
	g, p, ok := fs.node(h.NodeId)
	if !ok {
		return estale
	}
	c, ok := g.x.Lookup(p, name)
	if !ok {
		// Negative entry: node 0 with a lifetime makes the kernel cache
		// the miss, so library-path probing stops reaching us at all.
		fs.Stats.NegLookups.Add(1)
		*out = fuse.EntryOut{}
		out.SetEntryTimeout(fs.ttl)
		return fuse.OK
	}
	fs.fillEntry(g, c, out)
	g.ref(c, 1)
	return fuse.OK
}

func (fs *FS) Forget(id, n uint64) {
	if id == 1 {
		return
	}
	g, i, ok := fs.node(id)
	if !ok {
		return
	}
	g.ref(i, -int32(n))
	if g.total.Load() == 0 {
		fs.maybeDropGen(g)
	}
}

func (fs *FS) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) (st fuse.Status) {
	defer fs.Stats.getattr.DoneStatus(time.Now(), &st)
	g, i, ok := fs.node(in.NodeId)
	if !ok {
		return estale
	}
	fs.fillAttr(g.x, i, &out.Attr)
	out.SetTimeout(fs.ttl)
	return fuse.OK
}

func (fs *FS) Readlink(_ <-chan struct{}, h *fuse.InHeader) (_ []byte, st fuse.Status) {
	defer fs.Stats.readlink.DoneStatus(time.Now(), &st)
	g, i, ok := fs.node(h.NodeId)
	if !ok {
		return nil, estale
	}
	t := g.x.Readlink(i)
	if t == nil {
		return nil, fuse.EINVAL
	}
	return t, fuse.OK
}

func (fs *FS) Access(_ <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	g, i, ok := fs.node(in.NodeId)
	if !ok {
		return estale
	}
	if in.Mask&unix.W_OK != 0 {
		return fuse.EROFS
	}
	a := g.x.Attr(i)
	if in.Uid == 0 {
		if in.Mask&unix.X_OK != 0 && a.Mode&0o111 == 0 && a.Mode&0o170000 != 0o040000 {
			return fuse.EACCES
		}
		return fuse.OK
	}
	perm := a.Mode & 7
	if in.Uid == a.Uid {
		perm = a.Mode >> 6 & 7
	} else if in.Gid == a.Gid {
		perm = a.Mode >> 3 & 7
	}
	if in.Mask&perm != in.Mask {
		return fuse.EACCES
	}
	return fuse.OK
}

func (fs *FS) GetXAttr(_ <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (_ uint32, st fuse.Status) {
	defer fs.Stats.getxattr.DoneStatus(time.Now(), &st)
	g, i, ok := fs.node(h.NodeId)
	if !ok {
		return 0, estale
	}
	var val []byte
	found := false
	g.x.Xattrs(i, func(n string, v []byte) bool {
		if n == attr {
			val, found = v, true
			return false
		}
		return true
	})
	if !found {
		return 0, fuse.ENOATTR
	}
	if len(dest) < len(val) {
		return uint32(len(val)), fuse.ERANGE
	}
	return uint32(copy(dest, val)), fuse.OK
}

func (fs *FS) ListXAttr(_ <-chan struct{}, h *fuse.InHeader, dest []byte) (_ uint32, st fuse.Status) {
	defer fs.Stats.listxattr.DoneStatus(time.Now(), &st)
	g, i, ok := fs.node(h.NodeId)
	if !ok {
		return 0, estale
	}
	var b []byte
	g.x.Xattrs(i, func(n string, _ []byte) bool {
		b = append(append(b, n...), 0)
		return true
	})
	if len(dest) < len(b) {
		return uint32(len(b)), fuse.ERANGE
	}
	return uint32(copy(dest, b)), fuse.OK
}

func (fs *FS) StatFs(_ <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) (st fuse.Status) {
	defer fs.Stats.statfs.DoneStatus(time.Now(), &st)
	s := fs.cur.Load().x.StatFS
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, 0, 0
	out.Files, out.Ffree = s.Files, 0
	out.Bsize, out.NameLen, out.Frsize = s.Bsize, s.Namelen, s.Frsize
	return fuse.OK
}

// ---- directories ----

// OpenDir answers ENOSYS on purpose: the kernel then stops sending
// OPENDIR/RELEASEDIR at all (zero-message opendir) and caches listings with
// FOPEN_CACHE_DIR|FOPEN_KEEP_CACHE by default, which saves one round trip
// per directory opened -- the whole difference between a warm `ls -R`
// through the mount and on a local disk.
func (fs *FS) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

func (fs *FS) ReleaseDir(in *fuse.ReleaseIn) {}

func (fs *FS) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) (st fuse.Status) {
	defer fs.Stats.readdir.DoneStatus(time.Now(), &st)
	g, d, ok := fs.node(in.NodeId)
	if !ok {
		return estale
	}
	x := g.x
	first, count := x.Children(d)
	for pos := int(in.Offset); pos < count+2; pos++ {
		var e fuse.DirEntry
		c := -1
		switch pos {
		case 0:
			e = fuse.DirEntry{Name: ".", Mode: unix.S_IFDIR, Ino: x.Attr(d).Ino}
		case 1:
			e = fuse.DirEntry{Name: "..", Mode: unix.S_IFDIR, Ino: x.Attr(x.Parent(d)).Ino}
		default:
			c = first + pos - 2
			e = fuse.DirEntry{Name: x.Name(c), Mode: x.Mode(c), Ino: x.Attr(c).Ino}
		}
		e.Off = uint64(pos + 1)
		if !plus {
			if !out.AddDirEntry(e) {
				break
			}
			continue
		}
		eo := out.AddDirLookupEntry(e)
		if eo == nil {
			break
		}
		if c >= 0 { // the kernel links (and counts) every entry we return
			fs.fillEntry(g, c, eo)
			g.ref(c, 1)
		}
	}
	return fuse.OK
}

func (fs *FS) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return fs.readDir(in, out, false)
}

func (fs *FS) ReadDirPlus(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return fs.readDir(in, out, true)
}

func (fs *FS) FsyncDir(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status { return fuse.OK }

// ---- files: the only path to the filesystem below ----

func (fs *FS) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) (st fuse.Status) {
	defer fs.Stats.open.DoneStatus(time.Now(), &st)
	if in.Flags&(unix.O_WRONLY|unix.O_RDWR|unix.O_TRUNC) != 0 {
		return fuse.EROFS
	}
	g, i, ok := fs.node(in.NodeId)
	if !ok {
		return estale
	}
	if g.x.IsDir(i) {
		return fuse.EISDIR
	}
	lf, errno := fs.openLower(g, i)
	if errno != 0 {
		return fuse.Status(errno)
	}
	out.Fh = lf.key
	if lf.backing != 0 {
		out.BackingID = lf.backing
		out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
	} else {
		out.OpenFlags |= fuse.FOPEN_KEEP_CACHE
	}
	return fuse.OK
}

// openLower returns the shared lower file for entry i, opening it (relative
// to the kept root fd, never following symlinks nor leaving the tree) only
// if it is not already open or cached. Either way the file must still
// match the index (checkOpen), or the open is refused.
func (fs *FS) openLower(g *generation, i int) (*lowerFile, syscall.Errno) {
	key := g.nodeid(i)
	fs.fmu.Lock()
	for {
		if lf := fs.files[key]; lf != nil {
			fs.acquire(lf)
			fs.fmu.Unlock()
			// Open since an earlier open: it may have changed below since.
			if err := g.x.checkOpen(i, lf.fd, fs.lower); err != nil {
				fs.fmu.Lock()
				fs.release(lf, true)
				fs.fmu.Unlock()
				return nil, fs.refuse(g, i, err)
			}
			return lf, 0
		}
		wait := fs.opening[key]
		if wait == nil {
			break
		}
		// Another open of the same file is in flight: share its result
		// instead of opening the lower file twice.
		fs.fmu.Unlock()
		<-wait
		fs.fmu.Lock()
	}
	done := make(chan struct{})
	fs.opening[key] = done
	fs.fmu.Unlock()
	defer func() {
		fs.fmu.Lock()
		delete(fs.opening, key)
		fs.fmu.Unlock()
		close(done)
	}()

	fs.Stats.LowerOpens.Add(1)
	fd, err := unix.Openat2(fs.rootfd, g.x.Path(i), &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) {
		fd, err = unix.Openat(fs.rootfd, g.x.Path(i), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		var en syscall.Errno
		if errors.As(err, &en) {
			return nil, en
		}
		return nil, syscall.EIO
	}
	if err := g.x.checkOpen(i, fd, fs.lower); err != nil {
		unix.Close(fd)
		return nil, fs.refuse(g, i, err)
	}
	lf := &lowerFile{key: key, fd: fd}
	if fs.passthrough.Load() && fs.srv != nil {
		id, errno := fs.srv.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
		if errno != 0 {
			// Older kernel or missing CAP_SYS_ADMIN: fall back to pread.
			fs.passthrough.Store(false)
			fs.opt.Logger.Printf("kernel passthrough unavailable (%v); serving reads with pread", errno)
		} else {
			lf.backing = id
			fs.Stats.Passthrough.Add(1)
		}
	}
	fs.fmu.Lock()
	fs.files[key] = lf
	lf.refs = 1
	fs.fmu.Unlock()
	return lf, 0
}

// refuse counts and logs an open refused because entry i changed below,
// and returns the errno the opener gets (EIO).
func (fs *FS) refuse(g *generation, i int, err error) syscall.Errno {
	fs.Stats.Refused.Add(1)
	fs.opt.Logger.Printf("open of %s refused: %v", filepath.Join(fs.mnt, g.x.Path(i)), err)
	return kerr.Errno(kerr.KindOf(err))
}

// acquire takes a reference; fmu held.
func (fs *FS) acquire(lf *lowerFile) {
	if lf.idle != nil {
		fs.idle.Remove(lf.idle)
		lf.idle = nil
	}
	lf.refs++
}

func (fs *FS) closeLower(lf *lowerFile) {
	if lf.backing != 0 && fs.srv != nil {
		fs.srv.UnregisterBackingFd(lf.backing)
	}
	unix.Close(lf.fd)
}

func (fs *FS) Release(_ <-chan struct{}, in *fuse.ReleaseIn) {
	fs.fmu.Lock()
	defer fs.fmu.Unlock()
	if lf := fs.files[in.Fh]; lf != nil {
		fs.release(lf, false)
	}
}

// release drops a reference; fmu held. The last one keeps the file open
// (the next open of the same file by any process costs nothing below),
// unless it changed below: then it is closed, and the next open looks
// the path up again.
func (fs *FS) release(lf *lowerFile, changed bool) {
	lf.refs--
	if lf.refs > 0 {
		return
	}
	if changed {
		delete(fs.files, lf.key)
		fs.closeLower(lf)
		return
	}
	lf.idle = fs.idle.PushBack(lf)
	for fs.idle.Len() > fs.opt.FdCache {
		old := fs.idle.Remove(fs.idle.Front()).(*lowerFile)
		delete(fs.files, old.key)
		fs.closeLower(old)
	}
}

// dropIdleFiles closes cached lower files of non-current generations.
func (fs *FS) dropIdleFiles() {
	cur := fs.cur.Load().id
	fs.fmu.Lock()
	defer fs.fmu.Unlock()
	for e := fs.idle.Front(); e != nil; {
		next := e.Next()
		lf := e.Value.(*lowerFile)
		if uint32(lf.key>>32) != cur {
			fs.idle.Remove(e)
			delete(fs.files, lf.key)
			fs.closeLower(lf)
		}
		e = next
	}
}

func (fs *FS) closeAll() {
	fs.fmu.Lock()
	for k, lf := range fs.files {
		unix.Close(lf.fd)
		delete(fs.files, k)
	}
	fs.idle.Init()
	if fs.rootfd >= 0 {
		unix.Close(fs.rootfd)
		fs.rootfd = -1
	}
	fs.fmu.Unlock()
}

func (fs *FS) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (_ fuse.ReadResult, st fuse.Status) {
	defer fs.Stats.read.DoneStatus(time.Now(), &st)
	fs.fmu.Lock()
	lf := fs.files[in.Fh]
	fs.fmu.Unlock()
	if lf == nil {
		return nil, fuse.EBADF
	}
	n, err := unix.Pread(lf.fd, buf[:min(int(in.Size), len(buf))], int64(in.Offset))
	if err != nil {
		return nil, fuse.ToStatus(err)
	}
	fs.Stats.BytesOut.Add(int64(n))
	return fuse.ReadResultData(buf[:n]), fuse.OK
}

// Flush: ENOSYS makes the kernel stop sending FLUSH on every close(2);
// there is nothing to flush on a read-only mount.
func (fs *FS) Flush(_ <-chan struct{}, in *fuse.FlushIn) fuse.Status { return fuse.ENOSYS }
func (fs *FS) Fsync(_ <-chan struct{}, in *fuse.FsyncIn) fuse.Status { return fuse.OK }

// ---- every write-type operation is refused ----

func (fs *FS) SetAttr(_ <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	return fuse.EROFS
}
func (fs *FS) Mknod(_ <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}
func (fs *FS) Mkdir(_ <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}
func (fs *FS) Unlink(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status { return fuse.EROFS }
func (fs *FS) Rmdir(_ <-chan struct{}, h *fuse.InHeader, name string) fuse.Status  { return fuse.EROFS }
func (fs *FS) Rename(_ <-chan struct{}, in *fuse.RenameIn, o, n string) fuse.Status {
	return fuse.EROFS
}
func (fs *FS) Link(_ <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}
func (fs *FS) Symlink(_ <-chan struct{}, h *fuse.InHeader, to, name string, out *fuse.EntryOut) fuse.Status {
	return fuse.EROFS
}
func (fs *FS) SetXAttr(_ <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	return fuse.EROFS
}
func (fs *FS) RemoveXAttr(_ <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	return fuse.EROFS
}
func (fs *FS) Create(_ <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	return fuse.EROFS
}
func (fs *FS) Tmpfile(_ <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	return fuse.EROFS
}
func (fs *FS) Write(_ <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	return 0, fuse.EROFS
}
func (fs *FS) Fallocate(_ <-chan struct{}, in *fuse.FallocateIn) fuse.Status { return fuse.EROFS }
func (fs *FS) CopyFileRange(_ <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	return 0, fuse.EROFS
}

// Summary is a one-line report of the counters.
func (fs *FS) Summary() string {
	s := &fs.Stats
	return fmt.Sprintf("lookups=%d (negative %d) getattr=%d readdir=%d readlink=%d xattr=%d opens=%d (refused %d) | below: opens=%d reads=%d passthrough=%d | reloads=%d",
		s.lookup.Count(), s.NegLookups.Load(), s.getattr.Count(), s.readdir.Count(), s.readlink.Count(),
		s.getxattr.Count()+s.listxattr.Count(), s.open.Count(), s.Refused.Load(), s.LowerOpens.Load(), s.read.Count(), s.Passthrough.Load(), s.Reloads.Load())
}

package cfsd

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kaon-storage/kaon/internal/fusecore"
	"golang.org/x/sys/unix"
)

// node is one backend inode. Directories keep an O_PATH fd so every
// operation is relative (openat, fstatat, ...) and path length never
// matters; other nodes are addressed as (parent dir fd, name).
type node struct {
	fs.Inode
	cfs *FS
	fd  int // O_PATH directory fd, -1 for non-directories

	mu      sync.Mutex
	size    int64   // size last charged to quota (regular files)
	handles []*file // open handles, for getattr of unlinked files
	gone    bool    // unlinked: stop quota accounting
	// binned: the last name went into the recycle bin, whose link is
	// none of the object's names: open handles see nlink 0.
	binned atomic.Bool

	// noCaps: a file created through us has no security.capability
	// (asked on every write and chown) until one is set through us.
	noCaps atomic.Bool
	xattrs xattrCache
}

var (
	_ = (fs.NodeLookuper)((*node)(nil))
	_ = (fs.NodeGetattrer)((*node)(nil))
	_ = (fs.NodeSetattrer)((*node)(nil))
	_ = (fs.NodeOpener)((*node)(nil))
	_ = (fs.NodeCreater)((*node)(nil))
	_ = (fs.NodeMkdirer)((*node)(nil))
	_ = (fs.NodeMknoder)((*node)(nil))
	_ = (fs.NodeSymlinker)((*node)(nil))
	_ = (fs.NodeLinker)((*node)(nil))
	_ = (fs.NodeReadlinker)((*node)(nil))
	_ = (fs.NodeUnlinker)((*node)(nil))
	_ = (fs.NodeRmdirer)((*node)(nil))
	_ = (fs.NodeRenamer)((*node)(nil))
	_ = (fs.NodeOpendirHandler)((*node)(nil))
	_ = (fs.NodeStatfser)((*node)(nil))
	_ = (fs.NodeGetxattrer)((*node)(nil))
	_ = (fs.NodeSetxattrer)((*node)(nil))
	_ = (fs.NodeListxattrer)((*node)(nil))
	_ = (fs.NodeRemovexattrer)((*node)(nil))
	_ = (fs.NodeOnForgetter)((*node)(nil))
	_ = (fs.NodeOnAdder)((*node)(nil))
)

func caller(ctx context.Context) *fuse.Caller {
	if c, ok := fuse.FromContext(ctx); ok {
		return c
	}
	return &fuse.Caller{}
}

func asNode(in *fs.Inode) *node {
	if in == nil {
		return nil
	}
	n, _ := in.Operations().(*node)
	return n
}

// at returns (dirfd, name, flags) addressing n for *at() calls: a
// directory by its own fd with AT_EMPTY_PATH, anything else by its
// parent's fd and name without following symlinks.
func (n *node) at() (int, string, int, bool) {
	if n.fd >= 0 {
		return n.fd, "", unix.AT_EMPTY_PATH, true
	}
	name, p := n.Parent()
	pn := asNode(p)
	if pn == nil || pn.fd < 0 {
		return -1, "", 0, false
	}
	return pn.fd, name, unix.AT_SYMLINK_NOFOLLOW, true
}

// procPath names n through /proc/self/fd for the few calls without an
// *at() form (chmod of a directory, truncate, xattrs); it stays short at
// any depth. A directory is its own fd's link /proc/self/fd/N, which the
// kernel resolves to the directory without a lookup inside it, so no
// search permission on the directory is needed (its owner may chmod a
// 0000 directory, as on the backend); anything else is parent/name.
func (n *node) procPath() (backendPath, bool) {
	if n.fd >= 0 {
		return backendPath{p: "/proc/self/fd/" + strconv.Itoa(n.fd), follow: true}, true
	}
	dfd, name, _, ok := n.at()
	if !ok {
		return backendPath{}, false
	}
	return backendPath{p: "/proc/self/fd/" + strconv.Itoa(dfd) + "/" + name}, true
}

func (n *node) stat(st *syscall.Stat_t) syscall.Errno {
	dfd, name, flags, ok := n.at()
	if !ok {
		n.mu.Lock()
		var fd = -1
		if len(n.handles) > 0 {
			fd = n.handles[0].fd
		}
		n.mu.Unlock()
		if fd < 0 {
			return syscall.ENOENT
		}
		return errnoOf(syscall.Fstat(fd, st))
	}
	if n.fd >= 0 {
		return errnoOf(syscall.Fstat(n.fd, st))
	}
	return errnoOf(fstatat(dfd, name, st, flags))
}

func (n *node) OnAdd(ctx context.Context) {
	if n == n.cfs.root {
		n.cfs.addProc(ctx, &n.Inode)
	}
}

func (n *node) OnForget() {
	if n.fd >= 0 && n != n.cfs.root {
		syscall.Close(n.fd)
		n.fd = -1
	}
}

// newChild turns a backend entry into an Inode (reusing the existing one
// for hard links and repeated lookups) and fills out.
func (n *node) newChild(ctx context.Context, name string, st *syscall.Stat_t, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	sa := n.cfs.stableAttr(st)
	if in := n.GetChild(name); in != nil && in.StableAttr().Ino == sa.Ino && in.StableAttr().Mode == sa.Mode {
		// Known already (repeated lookup, readdirplus): no new fd.
		out.Attr.FromStat(st)
		return in, 0
	}
	fd := -1
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		var err error
		fd, err = unix.Openat(n.fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, errnoOf(err)
		}
	}
	ch := &node{cfs: n.cfs, fd: fd, size: st.Size}
	in := n.NewInode(ctx, ch, sa)
	if old := asNode(in); old != ch {
		if fd >= 0 {
			syscall.Close(fd)
		}
		if old != nil {
			old.revive(st)
		}
	}
	out.Attr.FromStat(st)
	return in, 0
}

// revive marks a node found under a name again (restored from the
// recycle bin while still open, say) as live.
func (n *node) revive(st *syscall.Stat_t) {
	if !n.binned.Load() {
		return
	}
	n.mu.Lock()
	n.gone, n.size = false, st.Size
	n.mu.Unlock()
	n.binned.Store(false)
}

// attr fills out from st as applications must see it.
func (n *node) attr(out *fuse.Attr, st *syscall.Stat_t) {
	out.FromStat(st)
	if n.binned.Load() {
		out.Nlink = 0
	}
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	defer n.cfs.op.lookup.Done(time.Now(), &errno)
	if n == n.cfs.root {
		if name == procName {
			if p := n.GetChild(procName); p != nil {
				out.Mode = syscall.S_IFDIR | 0o555
				out.SetEntryTimeout(0)
				out.SetAttrTimeout(0)
				return p, 0
			}
		}
		if n.cfs.hidden(n, name) {
			return nil, syscall.ENOENT
		}
	}
	var st syscall.Stat_t
	if err := fstatat(n.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, errnoOf(err)
	}
	return n.newChild(ctx, name, &st, out)
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	defer n.cfs.op.getattr.Done(time.Now(), &errno)
	var st syscall.Stat_t
	if f, ok := fh.(fileOf); ok {
		errno = errnoOf(syscall.Fstat(f.base().fd, &st))
	} else {
		errno = n.stat(&st)
	}
	if errno == 0 {
		n.attr(&out.Attr, &st)
	}
	return errno
}

func timespec(t time.Time, ok, now bool) unix.Timespec {
	switch {
	case !ok:
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	case now:
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	}
	return unix.NsecToTimespec(t.UnixNano())
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	defer n.cfs.op.setattr.Done(time.Now(), &errno)
	ffd := -1
	if f, ok := fh.(fileOf); ok {
		ffd = f.base().fd
	}
	dfd, name, flags, ok := n.at()
	if !ok && ffd < 0 {
		return syscall.ENOENT
	}
	c := caller(ctx)
	q := n.cfs.quota
	var before syscall.Stat_t
	if q != nil {
		if e := n.stat(&before); e != 0 {
			return e
		}
	}
	cr := fusecore.Enter(c)
	defer func() { cr.Leave() }() // cr is reset once the changes are done

	if mode, ok := in.GetMode(); ok {
		var err error
		switch {
		case ffd >= 0:
			err = syscall.Fchmod(ffd, mode)
		case n.fd >= 0:
			// fchmod refuses O_PATH fds; the fd's /proc link does not.
			p, _ := n.procPath()
			err = syscall.Chmod(p.p, mode)
		default:
			err = unix.Fchmodat(dfd, name, mode, 0)
		}
		if err != nil {
			return errnoOf(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		var err error
		if ffd >= 0 {
			err = syscall.Fchown(ffd, u, g)
		} else {
			err = unix.Fchownat(dfd, name, u, g, flags)
		}
		if err != nil {
			return errnoOf(err)
		}
		if q != nil && uok && uid != before.Uid {
			// Ownership moves the usage with it.
			sz := int64(0)
			if before.Mode&syscall.S_IFMT == syscall.S_IFREG {
				sz = before.Size
			}
			q.Charge(before.Uid, -sz, -1)
			q.Charge(uid, sz, 1)
			before.Uid = uid
		}
	}
	if sz, ok := in.GetSize(); ok {
		if q != nil && int64(sz) > before.Size {
			if e := q.Check(before.Uid, int64(sz)-before.Size, 0); e != 0 {
				return e
			}
		}
		var err error
		if ffd >= 0 {
			err = syscall.Ftruncate(ffd, int64(sz))
		} else {
			p, ok := n.procPath()
			if !ok {
				return syscall.ENOENT
			}
			err = syscall.Truncate(p.p, int64(sz))
		}
		if err != nil {
			return errnoOf(err)
		}
	}
	mt, mok := in.GetMTime()
	at, aok := in.GetATime()
	if mok || aok {
		ts := []unix.Timespec{
			timespec(at, aok, in.Valid&fuse.FATTR_ATIME_NOW != 0),
			timespec(mt, mok, in.Valid&fuse.FATTR_MTIME_NOW != 0),
		}
		var err error
		if ffd >= 0 {
			err = unix.UtimesNanoAt(ffd, "", ts, unix.AT_EMPTY_PATH)
		} else {
			err = unix.UtimesNanoAt(dfd, name, ts, flags)
		}
		if err != nil {
			return errnoOf(err)
		}
	}
	cr.Leave()
	cr = fusecore.Cred{}
	var st syscall.Stat_t
	if ffd >= 0 {
		errno = errnoOf(syscall.Fstat(ffd, &st))
	} else {
		errno = n.stat(&st)
	}
	if errno != 0 {
		return errno
	}
	if q != nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
		n.reconcile(&st)
	}
	n.attr(&out.Attr, &st)
	out.SetTimeout(n.cfs.opts.AttrTimeout)
	return 0
}

// reconcile charges the owner for the change of size since the last
// accounting of this file.
func (n *node) reconcile(st *syscall.Stat_t) {
	q := n.cfs.quota
	if q == nil {
		return
	}
	n.mu.Lock()
	d := st.Size - n.size
	n.size = st.Size
	gone := n.gone
	n.mu.Unlock()
	if d != 0 && !gone {
		q.Charge(st.Uid, d, 0)
	}
}

func openFlags(flags uint32) int {
	// The kernel has already handled O_CREAT/O_EXCL/O_TRUNC semantics for
	// open; FMODE_EXEC and friends must not reach openat.
	f := int(flags) &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_NOCTTY | 0x20)
	return f | syscall.O_CLOEXEC | syscall.O_NOFOLLOW
}

func (n *node) Open(ctx context.Context, flags uint32) (fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	defer n.cfs.op.open.Done(time.Now(), &errno)
	dfd, name, _, ok := n.at()
	if !ok {
		return nil, 0, syscall.ENOENT
	}
	cr := fusecore.Enter(caller(ctx))
	fd, err := unix.Openat(dfd, name, openFlags(flags), 0)
	cr.Leave()
	if err != nil {
		return nil, 0, errnoOf(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, 0, errnoOf(err)
	}
	return n.newHandle(fd, &st), fuse.FOPEN_KEEP_CACHE, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (in *fs.Inode, fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	defer n.cfs.op.create.Done(time.Now(), &errno)
	if n.cfs.hidden(n, name) {
		return nil, nil, 0, syscall.EPERM
	}
	c := caller(ctx)
	if q := n.cfs.quota; q != nil {
		if e := q.Check(c.Uid, 0, 1); e != 0 {
			return nil, nil, 0, e
		}
	}
	// Try exclusive creation first so quota knows whether a new inode
	// appeared; fall back to opening an existing file when the caller did
	// not ask for O_EXCL.
	created := true
	cr := fusecore.Enter(c)
	fd, err := unix.Openat(n.fd, name, openFlags(flags)|syscall.O_CREAT|syscall.O_EXCL, mode)
	if err == unix.EEXIST && flags&syscall.O_EXCL == 0 {
		created = false
		fd, err = unix.Openat(n.fd, name, openFlags(flags)|syscall.O_CREAT, mode)
	}
	cr.Leave()
	if err != nil {
		return nil, nil, 0, errnoOf(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, nil, 0, errnoOf(err)
	}
	in, errno = n.newChild(ctx, name, &st, out)
	if errno != 0 {
		syscall.Close(fd)
		return nil, nil, 0, errno
	}
	if q := n.cfs.quota; q != nil && created {
		q.Charge(st.Uid, 0, 1)
	}
	if created {
		asNode(in).noCaps.Store(true)
	}
	return in, asNode(in).newHandle(fd, &st), 0, 0
}

// made finishes mkdir/mknod/symlink: stat the new entry, build its
// inode, charge one inode.
func (n *node) made(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var st syscall.Stat_t
	if err := fstatat(n.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, errnoOf(err)
	}
	if q := n.cfs.quota; q != nil {
		q.Charge(st.Uid, 0, 1)
	}
	return n.newChild(ctx, name, &st, out)
}

func (n *node) precreate(ctx context.Context, name string) syscall.Errno {
	if n.cfs.hidden(n, name) {
		return syscall.EPERM
	}
	if q := n.cfs.quota; q != nil {
		return q.Check(caller(ctx).Uid, 0, 1)
	}
	return 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	defer n.cfs.op.mkdir.Done(time.Now(), &errno)
	if e := n.precreate(ctx, name); e != 0 {
		return nil, e
	}
	cr := fusecore.Enter(caller(ctx))
	err := unix.Mkdirat(n.fd, name, mode)
	cr.Leave()
	if err != nil {
		return nil, errnoOf(err)
	}
	return n.made(ctx, name, out)
}

func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	defer n.cfs.op.mknod.Done(time.Now(), &errno)
	if e := n.precreate(ctx, name); e != 0 {
		return nil, e
	}
	cr := fusecore.Enter(caller(ctx))
	err := unix.Mknodat(n.fd, name, mode, int(dev))
	cr.Leave()
	if err != nil {
		return nil, errnoOf(err)
	}
	return n.made(ctx, name, out)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	defer n.cfs.op.symlink.Done(time.Now(), &errno)
	if e := n.precreate(ctx, name); e != 0 {
		return nil, e
	}
	cr := fusecore.Enter(caller(ctx))
	err := unix.Symlinkat(target, n.fd, name)
	cr.Leave()
	if err != nil {
		return nil, errnoOf(err)
	}
	return n.made(ctx, name, out)
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (in *fs.Inode, errno syscall.Errno) {
	defer n.cfs.op.link.Done(time.Now(), &errno)
	if n.cfs.hidden(n, name) {
		return nil, syscall.EPERM
	}
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	dfd, tname, _, ok := t.at()
	if !ok || t.fd >= 0 {
		return nil, syscall.EPERM
	}
	cr := fusecore.Enter(caller(ctx))
	err := unix.Linkat(dfd, tname, n.fd, name, 0)
	cr.Leave()
	if err != nil {
		return nil, errnoOf(err)
	}
	var st syscall.Stat_t
	if err := fstatat(n.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, errnoOf(err)
	}
	return n.newChild(ctx, name, &st, out)
}

func (n *node) Readlink(ctx context.Context) (b []byte, errno syscall.Errno) {
	defer n.cfs.op.readlink.Done(time.Now(), &errno)
	dfd, name, _, ok := n.at()
	if !ok {
		return nil, syscall.ENOENT
	}
	buf := make([]byte, 4096)
	for {
		k, err := unix.Readlinkat(dfd, name, buf)
		if err != nil {
			return nil, errnoOf(err)
		}
		if k < len(buf) {
			return buf[:k], 0
		}
		buf = make([]byte, 2*len(buf))
	}
}

// remove unlinks (or rmdirs) name, diverting it to the recycle bin when
// that is enabled, and releases its quota.
func (n *node) remove(ctx context.Context, name string, dir bool) syscall.Errno {
	if n.cfs.hidden(n, name) {
		return syscall.EPERM
	}
	c := caller(ctx)
	rc := n.cfs.recycle
	q := n.cfs.quota
	var st syscall.Stat_t
	var errno syscall.Errno
	binned := false
	if rc.Enabled() {
		binned, errno = rc.Remove(c, n, name, &st, dir)
	} else {
		if q != nil {
			if err := fstatat(n.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return errnoOf(err)
			}
		}
		flags := 0
		if dir {
			flags = unix.AT_REMOVEDIR
		}
		cr := fusecore.Enter(c)
		errno = errnoOf(unix.Unlinkat(n.fd, name, flags))
		cr.Leave()
	}
	if errno != 0 {
		return errno
	}
	if ch := asNode(n.GetChild(name)); ch != nil && (dir || st.Nlink <= 1) {
		ch.mu.Lock()
		ch.gone = true
		ch.mu.Unlock()
		ch.binned.Store(binned)
	}
	if q != nil && (dir || st.Nlink <= 1) {
		sz := int64(0)
		if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			sz = st.Size
		}
		q.Charge(st.Uid, -sz, -1)
	}
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) (errno syscall.Errno) {
	defer n.cfs.op.unlink.Done(time.Now(), &errno)
	return n.remove(ctx, name, false)
}

func (n *node) Rmdir(ctx context.Context, name string) (errno syscall.Errno) {
	defer n.cfs.op.rmdir.Done(time.Now(), &errno)
	return n.remove(ctx, name, true)
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) (errno syscall.Errno) {
	defer n.cfs.op.rename.Done(time.Now(), &errno)
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if n.cfs.hidden(n, name) || n.cfs.hidden(np, newName) {
		return syscall.EPERM
	}
	q := n.cfs.quota
	var victim syscall.Stat_t
	replaced := false
	if q != nil && flags&(unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE) == 0 {
		replaced = fstatat(np.fd, newName, &victim, unix.AT_SYMLINK_NOFOLLOW) == nil
	}
	cr := fusecore.Enter(caller(ctx))
	err := unix.Renameat2(n.fd, name, np.fd, newName, uint(flags))
	cr.Leave()
	if err != nil {
		return errnoOf(err)
	}
	if replaced && victim.Nlink <= 1 || replaced && victim.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		sz := int64(0)
		if victim.Mode&syscall.S_IFMT == syscall.S_IFREG {
			sz = victim.Size
		}
		q.Charge(victim.Uid, -sz, -1)
		if ch := asNode(np.GetChild(newName)); ch != nil {
			ch.mu.Lock()
			ch.gone = true
			ch.mu.Unlock()
		}
	}
	return 0
}

// OpendirHandle opens the backend directory and lets the kernel cache
// the listing (FOPEN_CACHE_DIR|KEEP_CACHE): repeated listings are served
// from the kernel until the directory changes through the mount or its
// mtime moves on the backend (seen after the attribute timeout).
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	defer n.cfs.op.readdir.Done(time.Now(), &errno)
	fd, err := unix.Openat(n.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, errnoOf(err)
	}
	ds, errno := fs.NewLoopbackDirStreamFd(fd)
	if errno != 0 {
		return nil, 0, errno
	}
	fuseFlags = fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	if n != n.cfs.root {
		return ds.(fs.FileHandle), fuseFlags, 0
	}
	return &filterStream{DirStream: ds, skip: func(name string) bool { return n.cfs.hidden(n, name) }}, fuseFlags, 0
}

// filterStream hides the control and state entries of the root.
type filterStream struct {
	fs.DirStream
	skip func(string) bool
	next *fuse.DirEntry
	err  syscall.Errno
}

var (
	_ = (fs.FileReaddirenter)((*filterStream)(nil))
	_ = (fs.FileSeekdirer)((*filterStream)(nil))
	_ = (fs.FileReleasedirer)((*filterStream)(nil))
)

func (s *filterStream) HasNext() bool {
	for s.next == nil && s.err == 0 && s.DirStream.HasNext() {
		e, errno := s.DirStream.Next()
		if errno != 0 {
			s.err = errno
			break
		}
		if !s.skip(e.Name) {
			s.next = &e
		}
	}
	return s.next != nil || s.err != 0
}

func (s *filterStream) Next() (fuse.DirEntry, syscall.Errno) {
	if !s.HasNext() {
		return fuse.DirEntry{}, syscall.EIO
	}
	if s.err != 0 {
		return fuse.DirEntry{}, s.err
	}
	e := *s.next
	s.next = nil
	return e, 0
}

func (s *filterStream) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if !s.HasNext() {
		return nil, 0
	}
	e, errno := s.Next()
	return &e, errno
}

func (s *filterStream) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	sd, ok := s.DirStream.(fs.FileSeekdirer)
	if !ok {
		return syscall.ENOTSUP
	}
	s.next, s.err = nil, 0
	return sd.Seekdir(ctx, off)
}

func (s *filterStream) Releasedir(ctx context.Context, flags uint32) { s.DirStream.Close() }

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) (errno syscall.Errno) {
	defer n.cfs.op.statfs.Done(time.Now(), &errno)
	var s syscall.Statfs_t
	if err := syscall.Fstatfs(n.cfs.rootFd, &s); err != nil {
		return errnoOf(err)
	}
	out.FromStatfsT(&s)
	return 0
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (sz uint32, errno syscall.Errno) {
	defer n.cfs.op.getxattr.Done(time.Now(), &errno)
	if n.cfs.opts.NoXattr {
		return 0, syscall.ENOSYS
	}
	if n.cfs.opts.NoACL && isACLXattr(attr) {
		return 0, syscall.EOPNOTSUPP
	}
	if attr == idXattr {
		v := []byte(identity(caller(ctx)))
		if len(dest) == 0 {
			return uint32(len(v)), 0
		}
		if len(dest) < len(v) {
			return uint32(len(v)), syscall.ERANGE
		}
		return uint32(copy(dest, v)), 0
	}
	caps := attr == capsXattr
	if caps && n.noCaps.Load() {
		return 0, syscall.ENODATA
	}
	p, ok := n.procPath()
	if !ok {
		return 0, syscall.ENOENT
	}
	if n.xattrs.absent(p, attr, n.cfs.opts.AttrTimeout) {
		if attr == selinuxXattr && !selinuxHost {
			// No SELinux on this host: say labels are unsupported, so
			// ls -l and friends stop asking for every file of the mount
			// (they remember it per device). A label that exists on the
			// backend is still returned as is.
			return 0, syscall.EOPNOTSUPP
		}
		return 0, syscall.ENODATA
	}
	cr := fusecore.Enter(caller(ctx))
	k, err := p.getxattr(attr, dest)
	cr.Leave()
	if caps && err == unix.ENODATA {
		n.noCaps.Store(true)
	}
	return uint32(k), errnoOf(err)
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) (errno syscall.Errno) {
	defer n.cfs.op.setxattr.Done(time.Now(), &errno)
	if n.cfs.opts.NoXattr {
		return syscall.ENOSYS
	}
	if n.cfs.opts.NoACL && isACLXattr(attr) {
		return syscall.EOPNOTSUPP
	}
	if attr == idXattr {
		return syscall.EPERM
	}
	p, ok := n.procPath()
	if !ok {
		return syscall.ENOENT
	}
	n.noCaps.Store(false)
	defer n.xattrs.invalidate()
	cr := fusecore.Enter(caller(ctx))
	defer cr.Leave()
	return errnoOf(p.setxattr(attr, data, int(flags)))
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (sz uint32, errno syscall.Errno) {
	defer n.cfs.op.listxattr.Done(time.Now(), &errno)
	if n.cfs.opts.NoXattr {
		return 0, syscall.ENOSYS
	}
	p, ok := n.procPath()
	if !ok {
		return 0, syscall.ENOENT
	}
	if n.cfs.opts.NoACL {
		return listNoACL(ctx, p, dest)
	}
	cr := fusecore.Enter(caller(ctx))
	k, err := p.listxattr(dest)
	cr.Leave()
	return uint32(k), errnoOf(err)
}

func (n *node) Removexattr(ctx context.Context, attr string) (errno syscall.Errno) {
	defer n.cfs.op.removexattr.Done(time.Now(), &errno)
	if n.cfs.opts.NoXattr {
		return syscall.ENOSYS
	}
	if n.cfs.opts.NoACL && isACLXattr(attr) {
		return syscall.EOPNOTSUPP
	}
	if attr == idXattr {
		return syscall.EPERM
	}
	p, ok := n.procPath()
	if !ok {
		return syscall.ENOENT
	}
	defer n.xattrs.invalidate()
	cr := fusecore.Enter(caller(ctx))
	defer cr.Leave()
	return errnoOf(p.removexattr(attr))
}

package metafs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kaon-storage/kaon/internal/fusecore"
	"github.com/kaon-storage/kaon/internal/kerr"
	"golang.org/x/sys/unix"
)

// Kernel mode: the index is materialized as a skeleton tree on a private
// tmpfs (every entry with its mode, owner, times, size, xattrs, hard links
// and listing order; files sparse and empty) and a read-only view of that
// tmpfs is mounted. stat, readdir, readlink, getxattr, access and failed
// lookups are answered by the kernel from tmpfs, whose dentries and inodes
// are the filesystem itself and so are never evicted: cold is as fast as
// warm, and there is no FUSE round trip (25-80 us on this project's 2-core
// VM) and no stacking layer (overlayfs, the composefs design, was tried
// first: its per-component permission and getattr checks made every warm
// lookup 15-20 % slower than ext4).
//
// File data is copied in on first open: the view carries a fanotify
// permission mark (FAN_OPEN_PERM), so the first open of each file blocks
// while the daemon copies it from the tree below (after checking that its
// size, mtime and ctime still match the index), then marks the inode ignored, so
// later opens and all reads never leave the kernel. The data stays in the
// tmpfs (memory or swap) for the life of the mount, as in a CVMFS cache.
//
// What differs from the real tree: inode numbers, ctime (the mount or fill
// time), st_blocks of files not yet opened, and directory sizes.

// moveMountBeneath is MOVE_MOUNT_BENEATH (Linux 6.5), not in x/sys yet.
const moveMountBeneath = 0x200

// fanDenyErrno is FAN_DENY_ERRNO(err) (Linux 6.14): the denied open fails
// with err instead of EPERM. Pre-content groups only.
func fanDenyErrno(err unix.Errno) uint32 { return unix.FAN_DENY | uint32(err&0xff)<<24 }

// KernelMount serves one mountpoint in kernel mode. Its daemon side only
// fills files on first open. It has no FUSE connection but the same
// life as a FUSE mount (fusecore.Served): a fusecore.Daemon runs it.
type KernelMount struct {
	Mountpoint, Lower string
	lowerfd           int
	fan               *os.File
	logf              func(format string, a ...any)
	served            chan struct{} // closed when the fanotify loop ends
	serveErr          error         // why it ended
	unmount           sync.Once

	mu   sync.Mutex
	gens map[uint64]*skelGen // by the skeleton's st_dev

	// Stats: "open" is every first open answered (errors: refused),
	// "fill" every copy from below; "fill_bytes" what those copied.
	Stats     *fusecore.Stats
	open      *fusecore.OpStats
	fillOp    *fusecore.OpStats
	fillBytes *atomic.Int64
}

var _ = (fusecore.Served)((*KernelMount)(nil))

// skelGen is one index materialized on its own tmpfs; a reload adds one,
// and the old one keeps serving processes that still use the old view.
type skelGen struct {
	x      *Index
	rwroot int                  // a detached, writable clone of the skeleton's root
	files  map[uint64]*skelFile // skeleton inode -> file with data; fixed once built
}

// skelFile is a skeleton file that holds data once filled. Its lock makes
// racing first opens share one copy.
type skelFile struct {
	entry  int32
	mu     sync.Mutex
	filled bool
}

// MountKernel mounts x over mountpoint in kernel mode, reading file data
// from lowerDir, and starts serving first opens. The caller waits (Wait)
// until Unmount.
func MountKernel(x *Index, lowerDir, mountpoint string, force bool, logf func(string, ...any)) (*KernelMount, error) {
	op := "metafs mount"
	if pid, ok := KernelMountPid(mountpoint); ok {
		return nil, kerr.New(kerr.Exists, op, mountpoint,
			fmt.Sprintf("already served in kernel mode by pid %d; send it SIGHUP to switch to a rebuilt index", pid))
	}
	if _, ok := KernelMountPid(lowerDir); ok {
		return nil, kerr.New(kerr.Unsupported, op, lowerDir,
			"the directory is covered by a kernel-mode metafs; unmount it first")
	}
	rootfd, err := unix.Open(lowerDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, kerr.Wrap(kerr.KindOf(err), op, lowerDir, err)
	}
	if !force {
		if err := x.CheckFresh(rootfd, lowerDir); err != nil {
			unix.Close(rootfd)
			return nil, err
		}
	}
	fan, err := unix.FanotifyInit(unix.FAN_CLASS_PRE_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|unix.FAN_UNLIMITED_QUEUE,
		unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		unix.Close(rootfd)
		return nil, kerr.Wrap(kerr.KindOf(err), op, mountpoint, fmt.Errorf("fanotify (needs root): %w", err))
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	st := fusecore.NewStats()
	k := &KernelMount{Mountpoint: mountpoint, Lower: lowerDir, lowerfd: rootfd,
		fan: os.NewFile(uintptr(fan), "fanotify"), logf: logf, gens: map[uint64]*skelGen{}, served: make(chan struct{}),
		Stats: st, open: st.Op("open"), fillOp: st.Op("fill"), fillBytes: st.Counter("fill_bytes")}
	if err := k.attach(x, false); err != nil {
		k.fan.Close()
		unix.Close(rootfd)
		return nil, err
	}
	go func() {
		err := k.serve()
		if err != nil { // nobody would fill files: take the mount away
			k.Unmount()
		}
		k.serveErr = err
		close(k.served)
	}()
	return k, nil
}

// Reload switches the mountpoint to a new index: the new view is slid
// beneath the current one, which is then detached, so the switch is atomic
// for new lookups and processes inside the old view keep it.
func (k *KernelMount) Reload(x *Index, force bool) error {
	if !force {
		if err := x.CheckFresh(k.lowerfd, k.Lower); err != nil {
			return err
		}
	}
	return k.attach(x, true)
}

// attach builds x's skeleton and mounts a read-only, watched view of it.
func (k *KernelMount) attach(x *Index, beneath bool) error {
	op := "metafs mount"
	skel, err := os.MkdirTemp("", "kaon-metafs-skeleton-")
	if err != nil {
		return kerr.Wrap(kerr.IO, op, k.Mountpoint, err)
	}
	defer os.Remove(skel)
	src := fmt.Sprintf("%s%d:%s", mountSource, os.Getpid(), k.Lower)
	if err := unix.Mount(src, skel, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return kerr.Wrap(kerr.KindOf(err), op, skel, fmt.Errorf("tmpfs for the skeleton: %w", err))
	}
	// The clones below keep the tmpfs alive; once they exist it leaves the
	// mount table and can be reached only through them.
	defer unix.Unmount(skel, unix.MNT_DETACH)
	files, err := buildSkeleton(x, skel)
	if err != nil {
		return kerr.Wrap(kerr.IO, op, k.Mountpoint, fmt.Errorf("building the skeleton: %w", err))
	}
	var st unix.Stat_t
	if err := unix.Stat(skel, &st); err != nil {
		return kerr.Wrap(kerr.IO, op, skel, err)
	}
	rw, err := unix.OpenTree(unix.AT_FDCWD, skel, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return kerr.Wrap(kerr.KindOf(err), op, skel, err)
	}
	view, err := unix.OpenTree(unix.AT_FDCWD, skel, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		unix.Close(rw)
		return kerr.Wrap(kerr.KindOf(err), op, skel, err)
	}
	defer unix.Close(view)
	fail := func(what string, err error) error {
		unix.Close(rw)
		return kerr.Wrap(kerr.KindOf(err), op, k.Mountpoint, fmt.Errorf("%s: %w", what, err))
	}
	if err := unix.MountSetattr(view, "", unix.AT_EMPTY_PATH, &unix.MountAttr{
		Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID}); err != nil {
		return fail("read-only view", err)
	}
	// Watched before it is visible: no open can slip past the fill.
	if err := unix.FanotifyMark(int(k.fan.Fd()), unix.FAN_MARK_ADD|unix.FAN_MARK_MOUNT, unix.FAN_OPEN_PERM, view, "."); err != nil {
		return fail("fanotify mark", err)
	}
	g := &skelGen{x: x, rwroot: rw, files: files}
	k.mu.Lock()
	k.gens[st.Dev] = g
	k.mu.Unlock()
	flags := unix.MOVE_MOUNT_F_EMPTY_PATH
	if beneath {
		flags |= moveMountBeneath
	}
	if err := unix.MoveMount(view, "", unix.AT_FDCWD, k.Mountpoint, flags); err != nil {
		k.mu.Lock()
		delete(k.gens, st.Dev)
		k.mu.Unlock()
		return fail("mounting the view", err)
	}
	if beneath {
		if err := unix.Unmount(k.Mountpoint, unix.MNT_DETACH); err != nil { // the old view, now on top
			return kerr.Wrap(kerr.KindOf(err), op, k.Mountpoint, fmt.Errorf("detaching the previous index: %w", err))
		}
	}
	return nil
}

// Wait blocks until the mount is unmounted (Unmount).
func (k *KernelMount) Wait() error {
	<-k.served
	return k.serveErr
}

// serve answers open events until Unmount. Each first open of a file is
// held until its data is in the skeleton.
func (k *KernelMount) serve() error {
	buf := make([]byte, 64*1024)
	sem := make(chan struct{}, 8) // fills in parallel
	for {
		n, err := k.fan.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return nil
			}
			return kerr.Wrap(kerr.IO, "metafs serve", k.Mountpoint, err)
		}
		for off := 0; off+int(unsafe.Sizeof(unix.FanotifyEventMetadata{})) <= n; {
			ev := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
			off += int(ev.Event_len)
			if ev.Event_len == 0 {
				break
			}
			if ev.Fd < 0 { // queue overflow; cannot happen with an unlimited queue
				continue
			}
			fd := int(ev.Fd)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				verdict := uint32(unix.FAN_ALLOW)
				if k.decide(fd) != nil {
					verdict = fanDenyErrno(unix.EIO)
				}
				k.respond(fd, verdict)
			}()
		}
	}
}

func (k *KernelMount) respond(fd int, verdict uint32) {
	r := unix.FanotifyResponse{Fd: int32(fd), Response: verdict}
	b := (*[unsafe.Sizeof(r)]byte)(unsafe.Pointer(&r))[:]
	if _, err := k.fan.Write(b); err != nil {
		k.logf("kaon metafs: answering an open on %s: %v", k.Mountpoint, err)
	}
	unix.Close(fd)
}

// decide decides an open of the file behind fd (opened for us by
// fanotify): nil allows it.
func (k *KernelMount) decide(fd int) (err error) {
	defer k.open.DoneErr(time.Now(), &err)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	k.mu.Lock()
	g := k.gens[st.Dev]
	k.mu.Unlock()
	if g == nil {
		return errors.New("not a file of this mount")
	}
	if f := g.files[st.Ino]; f != nil {
		if err := k.fill(g, f); err != nil {
			k.logf("kaon metafs: open of %s refused: %v", filepath.Join(k.Mountpoint, g.x.Path(int(f.entry))), err)
			return err
		}
	}
	// Filled (or holding no data): later opens need not ask.
	if err := unix.FanotifyMark(int(k.fan.Fd()), unix.FAN_MARK_ADD|unix.FAN_MARK_IGNORED_MASK|unix.FAN_MARK_IGNORED_SURV_MODIFY,
		unix.FAN_OPEN_PERM, fd, ""); err != nil {
		k.logf("kaon metafs: ignore mark: %v", err)
	}
	return nil
}

// fill copies f's data from the tree below into the skeleton, once
// however many opens race for it (a failed copy is retried by the next).
func (k *KernelMount) fill(g *skelGen, f *skelFile) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.filled {
		return nil
	}
	if err := k.copyIn(g, int(f.entry)); err != nil {
		return err
	}
	f.filled = true
	return nil
}

func (k *KernelMount) copyIn(g *skelGen, i int) (err error) {
	defer k.fillOp.DoneErr(time.Now(), &err)
	p, a := g.x.Path(i), g.x.Attr(i)
	how := func(flags int) *unix.OpenHow {
		return &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV}
	}
	sfd, err := unix.Openat2(k.lowerfd, p, how(unix.O_RDONLY))
	if err != nil {
		return fmt.Errorf("opening it in %s: %w", k.Lower, err)
	}
	defer unix.Close(sfd)
	if err := g.x.checkOpen(i, sfd, k.Lower); err != nil {
		return err
	}
	dfd, err := unix.Openat2(g.rwroot, p, how(unix.O_WRONLY))
	if err != nil {
		return fmt.Errorf("skeleton: %w", err)
	}
	defer unix.Close(dfd)
	n, err := copyData(dfd, sfd, int64(a.Size))
	if err == nil {
		// Changed while it was copied (truncated, say: the extents
		// below would have ended early and left zeros)?
		err = g.x.checkOpen(i, sfd, k.Lower)
	}
	if err != nil {
		unix.Ftruncate(dfd, 0) // keep the skeleton's sparse, unfilled state
		unix.Ftruncate(dfd, int64(a.Size))
		return err
	}
	k.fillBytes.Add(n)
	ts := []unix.Timespec{unix.NsecToTimespec(a.Atime), unix.NsecToTimespec(a.Mtime)}
	return unix.UtimesNanoAt(g.rwroot, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// copyData copies the data of the first size bytes of src into dst, a
// file of that size holding only a hole, and returns the bytes copied.
// Only the data extents below are copied (SEEK_DATA/SEEK_HOLE), so holes
// stay holes: a sparse file takes in the skeleton what its data takes.
// Below a file system that cannot tell holes, everything is data. Reads
// are pread/pwrite with no read past the end: every call reaching the
// tree below counts, and copy_file_range refuses to cross from the
// tree's file system to tmpfs (EXDEV) on this kernel.
func copyData(dst, src int, size int64) (int64, error) {
	var buf []byte
	var n int64
	for off := int64(0); off < size; {
		data, err := unix.Seek(src, off, unix.SEEK_DATA)
		if err == unix.ENXIO { // a hole up to the end
			break
		}
		end := size
		if err != nil { // no hole information
			data = off
		} else if end, err = unix.Seek(src, data, unix.SEEK_HOLE); err != nil {
			return n, err
		}
		end = min(end, size)
		if buf == nil {
			buf = make([]byte, min(size, 1<<20))
		}
		for data < end {
			m, err := unix.Pread(src, buf[:min(int64(len(buf)), end-data)], data)
			if err != nil {
				return n, err
			}
			if m == 0 {
				return n, fmt.Errorf("the file ended at %d, before the %d bytes the index has", data, size)
			}
			if _, err := unix.Pwrite(dst, buf[:m], data); err != nil {
				return n, err
			}
			data += int64(m)
			n += int64(m)
		}
		off = end
	}
	return n, nil
}

// Unmount detaches the view (if it is still the one on the mountpoint),
// removes the names of files never filled, so a process still inside a
// detached view gets ENOENT rather than a file of zeros once nobody
// answers its open, and stops serving. Calls after the first do nothing.
func (k *KernelMount) Unmount() error {
	var err error = kerr.New(kerr.NotFound, "metafs umount", k.Mountpoint, "already unmounted")
	k.unmount.Do(func() { err = k.detach() })
	return err
}

func (k *KernelMount) detach() error {
	var err error
	if pid, ok := KernelMountPid(k.Mountpoint); ok && pid == os.Getpid() {
		err = unix.Unmount(k.Mountpoint, unix.MNT_DETACH)
	}
	k.mu.Lock()
	for _, g := range k.gens {
		for i := 0; i < g.x.Len(); i++ {
			a := g.x.Attr(i)
			if a.Mode&unix.S_IFMT == unix.S_IFREG && a.Size > 0 && !g.filledPath(i) {
				unix.Unlinkat(g.rwroot, g.x.Path(i), 0)
			}
		}
		unix.Close(g.rwroot)
	}
	k.gens = map[uint64]*skelGen{}
	k.mu.Unlock()
	k.fan.Close()
	unix.Close(k.lowerfd)
	return err
}

// filledPath reports whether entry i's inode was filled, waiting for a
// copy in progress.
func (g *skelGen) filledPath(i int) bool {
	var st unix.Stat_t
	if unix.Fstatat(g.rwroot, g.x.Path(i), &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	f := g.files[st.Ino]
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.filled
}

// Summary is an account for logs: the fills, then the statistics.
func (k *KernelMount) Summary() string {
	f := k.fillOp
	return fmt.Sprintf("%d files filled from the tree below (%d bytes), %d opens refused\n%s",
		f.Count()-f.Errors(), k.fillBytes.Load(), f.Errors(), k.Stats.Summary())
}

// Unmount unmounts either kind of metafs mount on mnt. A kernel-mode
// mount's daemon is asked to stop (SIGTERM; it detaches its mount
// itself) and waited for; a mount whose daemon is gone is detached here.
func Unmount(mnt string) error {
	pid, ok := KernelMountPid(mnt)
	if !ok {
		return fusecore.Unmount(mnt)
	}
	if err := unix.Kill(pid, unix.SIGTERM); err != nil {
		return unix.Unmount(mnt, unix.MNT_DETACH)
	}
	for range 200 {
		if p, ok := KernelMountPid(mnt); !ok || p != pid {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return kerr.New(kerr.Busy, "metafs umount", mnt, fmt.Sprintf("daemon pid %d did not unmount within 10s", pid))
}

// mountSource names kernel-mode mounts in the mount table:
// "kaon-metafs:PID:" + the tree below, PID being the daemon's.
const mountSource = "kaon-metafs:"

// KernelMountPid reports whether the topmost mount on p is a kernel-mode
// metafs, and the pid of the daemon serving it.
func KernelMountPid(p string) (int, bool) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return 0, false
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return 0, false
	}
	pid, ours := 0, false
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 || unescapeMountinfo(f[4]) != abs {
			continue
		}
		// Later lines are on top.
		rest, isOurs := strings.CutPrefix(unescapeMountinfo(g[1]), mountSource)
		ours = g[0] == "tmpfs" && isOurs
		if ours {
			n, _, _ := strings.Cut(rest, ":")
			pid, _ = strconv.Atoi(n)
		}
	}
	return pid, ours
}

// unescapeMountinfo undoes the octal escapes (\040 for a space...) of
// /proc/self/mountinfo fields.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out = append(out, byte(n))
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}

// buildSkeleton creates x's tree below dir and returns its files that hold
// data, by skeleton inode. Directories are walked with descriptors, so
// paths longer than PATH_MAX are no problem.
func buildSkeleton(x *Index, dir string) (map[uint64]*skelFile, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	newest, err := newestFirst(dir)
	if err != nil {
		return nil, err
	}
	b := &skeleton{x: x, links: map[uint64]string{}, files: map[uint64]*skelFile{}, rootfd: fd, reverse: newest}
	if err := b.dir(fd, 0); err != nil {
		return nil, err
	}
	a := x.Attr(0)
	if err := b.xattrs(fd, 0); err != nil {
		return nil, err
	}
	if err := unix.Fchown(fd, int(a.Uid), int(a.Gid)); err != nil {
		return nil, err
	}
	if err := unix.Fchmod(fd, a.Mode&0o7777); err != nil {
		return nil, err
	}
	return b.files, unix.UtimesNano(dir, []unix.Timespec{unix.NsecToTimespec(a.Atime), unix.NsecToTimespec(a.Mtime)})
}

type skeleton struct {
	x       *Index
	links   map[uint64]string    // inode -> path below the root, for hard links
	files   map[uint64]*skelFile // skeleton inode -> file with data
	rootfd  int
	reverse bool // create children last to first (see newestFirst)
}

// newestFirst reports whether directories in dir list their newest entry
// first (tmpfs does on recent kernels, older ones list oldest first). The
// skeleton is created in the order that reproduces the index's listings.
func newestFirst(dir string) (bool, error) {
	probe, err := os.MkdirTemp(dir, ".order-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(probe)
	for _, n := range []string{"1", "2"} {
		if err := os.WriteFile(filepath.Join(probe, n), nil, 0o600); err != nil {
			return false, err
		}
	}
	f, err := os.Open(probe)
	if err != nil {
		return false, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	return len(names) == 2 && names[0] == "2", err
}

func (b *skeleton) err(i int, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", b.x.Path(i), err)
}

// dir fills the directory open at fd with the children of entry d.
func (b *skeleton) dir(fd, d int) error {
	x := b.x
	first, count := x.Children(d)
	for k := 0; k < count; k++ {
		c := first + k
		if b.reverse {
			c = first + count - 1 - k
		}
		name, a := x.Name(c), x.Attr(c)
		var err error
		switch a.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			err = b.subdir(fd, name, c)
		case unix.S_IFREG:
			if first, ok := b.links[a.Ino]; ok && a.Nlink > 1 {
				if err := unix.Linkat(b.rootfd, first, fd, name, 0); err != nil {
					return b.err(c, err)
				}
				continue // one inode: attributes already set
			}
			if a.Nlink > 1 {
				b.links[a.Ino] = x.Path(c)
			}
			err = b.file(fd, name, c, a)
		case unix.S_IFLNK:
			err = unix.Symlinkat(string(x.Readlink(c)), fd, name)
		default: // fifos, sockets, devices
			err = unix.Mknodat(fd, name, a.Mode&unix.S_IFMT|0o600, int(a.Rdev))
		}
		if err == nil {
			err = b.attrs(fd, name, a)
		}
		if err != nil {
			return b.err(c, err)
		}
	}
	return nil
}

func (b *skeleton) subdir(fd int, name string, c int) error {
	if err := unix.Mkdirat(fd, name, 0o700); err != nil {
		return err
	}
	cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(cfd)
	if err := b.dir(cfd, c); err != nil {
		return err
	}
	return b.xattrs(cfd, c)
}

// file creates a skeleton file: sized (sparse) and with its xattrs.
func (b *skeleton) file(dirfd int, name string, i int, a Attr) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := b.xattrs(fd, i); err != nil || a.Size == 0 {
		return err
	}
	if err := unix.Ftruncate(fd, int64(a.Size)); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	b.files[st.Ino] = &skelFile{entry: int32(i)}
	return nil
}

func (b *skeleton) xattrs(fd, i int) error {
	var err error
	b.x.Xattrs(i, func(n string, v []byte) bool {
		err = unix.Fsetxattr(fd, n, v, 0)
		return err == nil
	})
	return err
}

// attrs sets owner, mode and times of a child by name; nothing here
// follows a symlink. Directories get theirs after their children, which
// change their mtime.
func (b *skeleton) attrs(dirfd int, name string, a Attr) error {
	if err := unix.Fchownat(dirfd, name, int(a.Uid), int(a.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if a.Mode&unix.S_IFMT != unix.S_IFLNK {
		// After chown, which clears set-id bits.
		if err := unix.Fchmodat(dirfd, name, a.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(a.Atime), unix.NsecToTimespec(a.Mtime)}
	return unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

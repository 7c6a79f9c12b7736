package metafs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

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
// while the daemon copies it from the tree below (after checking that
// its size, mtime and ctime still match the index), then marks the inode
// ignored, so later opens and all reads never leave the kernel. Only the
// data extents are copied (SEEK_DATA/SEEK_HOLE): holes stay holes. The
// data stays in the tmpfs (memory or swap) for the life of the mount, as
// in a CVMFS cache. Should the daemon die, a keeper process holding the
// same fanotify group refuses the opens and takes the view down
// (keeper.go).
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
	Mountpoint, Lower string // absolute
	lowerfd           int
	fan               *os.File
	logf              func(format string, a ...any)
	self              viewOwner   // this daemon, as its views' mount source names it
	keeper            *keeperLink // takes the views down if this daemon dies (keeper.go)

	closing  atomic.Bool    // taking the mount down: no more fills
	handlers sync.WaitGroup // open events being answered
	loopDone chan struct{}  // closed when the event loop has stopped
	unmount  sync.Once
	served   chan struct{} // closed once the mount is down
	faultMu  sync.Mutex
	fault    error // why it went down without being asked to

	mu   sync.Mutex
	gens map[uint64]*skelGen // by the skeleton's st_dev

	// Stats: "open" is every first open answered (errors: refused),
	// "fill" every copy from below; "fill_bytes" what those copied.
	Stats     *fusecore.Stats
	open      *fusecore.OpStats
	fillOp    *fusecore.OpStats
	fillBytes *atomic.Int64
}

// KernelOptions configures MountKernel.
type KernelOptions struct {
	Force      bool // mount even if the index is stale
	CleanStale bool // clear a view whose daemon is dead from the mountpoint first
	// Keeper is the command line of the keeper, a command that runs
	// RunKeeper (`kaon metafs keeper`); MountKernel adds the
	// mountpoint. Required.
	Keeper []string
	Logf   func(format string, a ...any)
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
// from lowerDir, and starts serving first opens; a keeper process takes
// the view down should this daemon die. The caller waits (Wait) until
// Unmount.
func MountKernel(x *Index, lowerDir, mountpoint string, opt KernelOptions) (*KernelMount, error) {
	op := "metafs mount"
	logf := opt.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	mnt, err := filepath.Abs(mountpoint)
	if err != nil {
		return nil, kerr.Wrap(kerr.Invalid, op, mountpoint, err)
	}
	if o, ok := viewOn(mnt); ok {
		switch {
		case o.alive():
			return nil, kerr.New(kerr.Exists, op, mnt,
				fmt.Sprintf("already served in kernel mode by pid %d; send it SIGHUP to switch to a rebuilt index", o.pid))
		case !opt.CleanStale:
			return nil, kerr.New(kerr.Busy, op, mnt, fmt.Sprintf("stale kernel-mode metafs view: its daemon, pid %d, is no longer running; "+
				"unmount it (`kaon metafs umount %s`) or mount with --clean-stale", o.pid, mnt))
		}
		n, err := clearStale(mnt, o)
		if err != nil {
			return nil, kerr.Wrap(kerr.Busy, op, mnt, fmt.Errorf("clearing the stale view of dead pid %d: %w", o.pid, err))
		}
		logf("kaon metafs: %s: stale view of dead pid %d cleared (%d names of files holding data removed) and detached", mnt, o.pid, n)
	}
	if _, ok := viewOn(lowerDir); ok {
		return nil, kerr.New(kerr.Unsupported, op, lowerDir,
			"the directory is covered by a kernel-mode metafs; unmount it first")
	}
	rootfd, err := unix.Open(lowerDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, kerr.Wrap(kerr.KindOf(err), op, lowerDir, err)
	}
	if !opt.Force {
		if err := x.CheckFresh(rootfd, lowerDir); err != nil {
			unix.Close(rootfd)
			return nil, err
		}
	}
	start, err := procStart(os.Getpid())
	if err != nil {
		unix.Close(rootfd)
		return nil, kerr.Wrap(kerr.Internal, op, mnt, err)
	}
	fan, err := unix.FanotifyInit(unix.FAN_CLASS_PRE_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|unix.FAN_UNLIMITED_QUEUE,
		unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		unix.Close(rootfd)
		return nil, kerr.Wrap(kerr.KindOf(err), op, mnt, fmt.Errorf("fanotify (needs root): %w", err))
	}
	st := fusecore.NewStats()
	k := &KernelMount{Mountpoint: mnt, Lower: lowerDir, lowerfd: rootfd,
		fan: os.NewFile(uintptr(fan), "fanotify"), logf: logf, self: viewOwner{pid: os.Getpid(), start: start},
		gens: map[uint64]*skelGen{}, loopDone: make(chan struct{}), served: make(chan struct{}),
		Stats: st, open: st.Op("open"), fillOp: st.Op("fill"), fillBytes: st.Counter("fill_bytes")}
	// The keeper holds the group before there is anything to guard.
	if k.keeper, err = startKeeper(opt.Keeper, k.fan, k.self, mnt); err != nil {
		k.fan.Close()
		unix.Close(rootfd)
		return nil, kerr.Wrap(kerr.Internal, op, mnt, err)
	}
	if err := k.attach(x, false); err != nil {
		k.keeper.bye()
		k.fan.Close()
		unix.Close(rootfd)
		return nil, err
	}
	go func() {
		err := k.serve()
		close(k.loopDone)
		if err != nil { // nobody would fill files: take the mount away
			k.fail(err)
		}
	}()
	go func() {
		<-k.keeper.exited
		if !k.closing.Load() {
			k.fail(fmt.Errorf("its keeper, pid %d, exited (%v), and without it a crash of this daemon would leave files reading as zeros",
				k.keeper.cmd.Process.Pid, k.keeper.err))
		}
	}()
	logf("kaon metafs: keeper pid %d takes %s down should this daemon (pid %d) die", k.keeper.cmd.Process.Pid, mnt, k.self.pid)
	return k, nil
}

// fail takes the mount down for err, which Wait then returns.
func (k *KernelMount) fail(err error) {
	k.faultMu.Lock()
	if k.fault == nil {
		k.fault = &kerr.Error{Kind: kerr.IO, Op: "metafs serve", Path: k.Mountpoint, Msg: "taken down", Err: err}
	}
	k.faultMu.Unlock()
	k.logf("kaon metafs: %s: %v; unmounting", k.Mountpoint, err)
	k.Unmount()
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
	src := fmt.Sprintf("%s%d:%d:%s", mountSource, k.self.pid, k.self.start, k.Lower)
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
	// Guarded before it is visible: no open can slip past the fill, nor
	// past the keeper should this daemon die.
	if err := k.keeper.send([]byte{'G'}, rw); err != nil {
		return fail("handing the skeleton to the keeper", err)
	}
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

// Wait blocks until the mount is down (Unmount), and says why if nobody
// asked for it.
func (k *KernelMount) Wait() error {
	<-k.served
	k.faultMu.Lock()
	defer k.faultMu.Unlock()
	return k.fault
}

// serve answers open events until Unmount stops it. Each first open of a
// file is held until its data is in the skeleton.
func (k *KernelMount) serve() error {
	buf := make([]byte, 64*1024)
	sem := make(chan struct{}, 8) // fills in parallel
	for {
		n, err := k.fan.Read(buf)
		if err != nil {
			if k.closing.Load() {
				return nil
			}
			return fmt.Errorf("reading open events: %w", err)
		}
		forEachEvent(buf[:n], func(fd int) {
			sem <- struct{}{}
			k.handlers.Add(1)
			go func() {
				defer func() { <-sem; k.handlers.Done() }()
				verdict := uint32(unix.FAN_ALLOW)
				if k.decide(fd) != nil {
					verdict = fanDenyErrno(unix.EIO)
				}
				if err := respond(int(k.fan.Fd()), int32(fd), verdict); err != nil {
					k.logf("kaon metafs: answering an open on %s: %v", k.Mountpoint, err)
				}
				unix.Close(fd)
			}()
		})
	}
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
// While the mount is taken down nothing more is filled.
func (k *KernelMount) fill(g *skelGen, f *skelFile) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.filled {
		return nil
	}
	if k.closing.Load() {
		return errors.New("the mount is being taken down")
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

// Unmount takes the mount down: it detaches the view (if it is still the
// one on the mountpoint), lets the fills in progress finish and fills no
// more, removes the names of files never filled, so a process still
// inside a detached view gets ENOENT rather than a file of zeros once
// nobody answers its open, refuses (EIO) the opens still waiting, and
// stops serving and the keeper. Calls after the first do nothing.
func (k *KernelMount) Unmount() error {
	var err error = kerr.New(kerr.NotFound, "metafs umount", k.Mountpoint, "already unmounted")
	k.unmount.Do(func() { err = k.detach() })
	return err
}

func (k *KernelMount) detach() error {
	defer close(k.served)
	k.closing.Store(true)
	var err error
	if o, ok := viewOn(k.Mountpoint); ok && o == k.self {
		err = unix.Unmount(k.Mountpoint, unix.MNT_DETACH)
	}
	// Stop the event loop, and wait until every open it read is answered.
	if derr := k.fan.SetReadDeadline(time.Now()); derr != nil {
		k.logf("kaon metafs: stopping the event loop of %s: %v", k.Mountpoint, derr)
	}
	<-k.loopDone
	k.handlers.Wait()
	k.mu.Lock()
	for _, g := range k.gens {
		if _, serr := scrub(g.rwroot, g.filled); serr != nil {
			k.logf("kaon metafs: removing unfilled files from a view of %s: %v", k.Mountpoint, serr)
		}
	}
	k.mu.Unlock()
	if n := drainDeny(k.fan, 250*time.Millisecond, 5*time.Second); n > 0 {
		k.logf("kaon metafs: %d opens on %s refused while it went down", n, k.Mountpoint)
	}
	k.mu.Lock()
	for _, g := range k.gens {
		unix.Close(g.rwroot)
	}
	k.gens = map[uint64]*skelGen{}
	k.mu.Unlock()
	k.keeper.bye()
	k.fan.Close()
	unix.Close(k.lowerfd)
	return err
}

// filled reports whether the skeleton file st holds its data.
func (g *skelGen) filled(st *unix.Stat_t) bool {
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
// itself) and waited for; a view whose daemon is dead is cleared
// (clearStale) and detached here.
func Unmount(mnt string) error {
	o, ok := viewOn(mnt)
	if !ok {
		return fusecore.Unmount(mnt)
	}
	if !o.alive() {
		if _, err := clearStale(mnt, o); err != nil {
			return kerr.Wrap(kerr.Busy, "metafs umount", mnt, fmt.Errorf("clearing the stale view of dead pid %d: %w", o.pid, err))
		}
		return nil
	}
	if err := unix.Kill(o.pid, unix.SIGTERM); err != nil {
		return kerr.Wrap(kerr.KindOf(err), "metafs umount", mnt, fmt.Errorf("stopping daemon pid %d: %w", o.pid, err))
	}
	for range 200 {
		if cur, ok := viewOn(mnt); !ok || cur != o {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return kerr.New(kerr.Busy, "metafs umount", mnt, fmt.Sprintf("daemon pid %d did not unmount within 10s", o.pid))
}

// mountSource names kernel-mode views in the mount table:
// "kaon-metafs:PID:START:" + the tree below, PID and START (its start
// time in clock ticks since boot, /proc/PID/stat) being the daemon's.
const mountSource = "kaon-metafs:"

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

package metafs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/kaon-storage/kaon/internal/fusecore"
	"golang.org/x/sys/unix"
)

// The keeper: what stands between a kernel-mode view and zeros when its
// daemon dies.
//
// A file the daemon has not filled yet is a sparse placeholder of the
// right size, and reads as zeros once nothing holds its open: when the
// last descriptor of a fanotify group closes, the kernel allows every
// open the group was asked about and watches nothing more. So the daemon
// starts a keeper process (`kaon metafs keeper`, its own session) that
// holds a second descriptor of the same group and the writable root of
// every skeleton, and waits on a socket only the daemon holds the other
// end of. The keeper reads no event while the daemon lives. If the daemon
// dies, however (SIGKILL, OOM, a crash), the socket ends while the group
// lives on in the keeper, so no open gets past it, and the keeper:
//
//  1. denies (EIO) the opens the daemon had read and not answered. Their
//     events are answered by the descriptor number the daemon got them
//     under, which died with it, so every number below the daemon's
//     descriptor limit is answered (20 000 answers take 10 ms);
//  2. detaches the view from the mountpoint, if it is still on top there;
//  3. removes, in every skeleton (the one on the mountpoint and those a
//     reload left to processes inside them), the name of every file
//     holding data, so a process still inside a view finds no file that
//     could read as zeros once the group is gone;
//  4. denies the opens still queued until none has come for a moment,
//     then exits, which releases the group.
//
// If the keeper dies first, the daemon sees it (it is its child) and
// takes the mount down itself, exactly. Only a daemon and a keeper that
// die together (SIGKILL of both at once) leave a view behind; its mount
// source names the daemon's pid and start time, so the next mount sees
// that the pid is dead and refuses the mountpoint as stale or, with
// --clean-stale, clears it (clearStale), as `kaon metafs umount` does.
//
// The control socket (SOCK_SEQPACKET) carries, daemon to keeper:
//
//	'H' u32 pid, u64 start time, u64 descriptor limit, mountpoint   first
//	'G' + one descriptor (SCM_RIGHTS): a writable skeleton root
//	'B' the daemon took its views down itself: exit
//
// The end of the socket without 'B' is the daemon's death.

// keeperFan and keeperCtl are the descriptors the keeper finds the
// fanotify group and its end of the control socket under.
const keeperFan, keeperCtl = 3, 4

// maxDeny bounds the descriptor numbers answered for a dead daemon.
const maxDeny = 1 << 21

// keeperLink is the daemon's side of its keeper.
type keeperLink struct {
	cmd    *exec.Cmd
	ctl    int
	exited chan struct{} // closed once the keeper has exited (and is reaped)
	err    error         // how it exited
}

// viewOwner names the daemon of a kernel-mode view, in its mount source.
type viewOwner struct {
	pid   int
	start uint64 // process start time (clock ticks since boot), 0 if unknown
}

// procStart is pid's start time, so a pid reused by another process is
// not taken for the daemon; an error if it is gone (or a zombie).
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ... starttime is the 22nd field; comm may
	// hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, fmt.Errorf("pid %d has exited", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// alive reports whether the view's daemon still runs.
func (o viewOwner) alive() bool {
	start, err := procStart(o.pid)
	return err == nil && (o.start == 0 || start == o.start)
}

// startKeeper starts argv (a command calling RunKeeper) as the keeper of
// the view self will mount on mnt, guarding fan.
func startKeeper(argv []string, fan *os.File, self viewOwner, mnt string) (*keeperLink, error) {
	if len(argv) == 0 {
		return nil, errors.New("no keeper command")
	}
	// The keeper gets the group and its socket and nothing else: a
	// descriptor this daemon inherited without close-on-exec (a
	// supervisor's pipe, a FUSE device) would stay open for as long as
	// the keeper runs.
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, e := range fds {
			if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
				unix.CloseOnExec(fd)
			}
		}
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	theirs := os.NewFile(uintptr(sp[1]), "keeper control")
	cmd := exec.Command(argv[0], append(argv[1:], mnt)...) // the mountpoint for ps
	cmd.ExtraFiles = []*os.File{fan, theirs}               // keeperFan, keeperCtl
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Dir = "/" // never inside a view
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		unix.Close(sp[0])
		return nil, fmt.Errorf("starting the keeper: %w", err)
	}
	l := &keeperLink{cmd: cmd, ctl: sp[0], exited: make(chan struct{})}
	go func() { l.err = cmd.Wait(); close(l.exited) }()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		lim.Cur = maxDeny
	}
	h := []byte{'H'}
	h = binary.LittleEndian.AppendUint32(h, uint32(self.pid))
	h = binary.LittleEndian.AppendUint64(h, self.start)
	h = binary.LittleEndian.AppendUint64(h, min(lim.Cur, maxDeny))
	if err := l.send(append(h, mnt...), -1); err != nil {
		cmd.Process.Kill()
		<-l.exited
		unix.Close(l.ctl)
		return nil, err
	}
	return l, nil
}

// send sends one message, with fd attached unless it is negative.
func (l *keeperLink) send(msg []byte, fd int) error {
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	if err := unix.Sendmsg(l.ctl, msg, oob, nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("keeper pid %d: %w", l.cmd.Process.Pid, err)
	}
	return nil
}

// bye tells the keeper the views are down and waits (a while) for it to
// exit.
func (l *keeperLink) bye() {
	l.send([]byte{'B'}, -1)
	unix.Close(l.ctl)
	select {
	case <-l.exited:
	case <-time.After(10 * time.Second):
	}
}

// RunKeeper is the keeper's life (see above); `kaon metafs keeper` runs
// it, started by MountKernel with the group and the control socket as
// descriptors 3 and 4. It returns the exit status. It ends only when the
// daemon says goodbye or dies (after taking the view down), or by
// SIGKILL: SIGTERM, SIGINT and SIGHUP are ignored (a service manager
// stopping both processes stops the daemon, which dismisses it), and so
// is SIGPIPE, so a log reader that went away cannot kill it mid-way.
func RunKeeper() int {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, "kaon metafs keeper: "+format+"\n", a...)
	}
	if l, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(keeperFan)); l != "anon_inode:[fanotify]" {
		logf("started without a fanotify group; `kaon metafs mount --kernel` starts the keeper itself")
		return 2
	}
	fan := os.NewFile(keeperFan, "fanotify")
	var (
		h     viewOwner
		limit uint64
		mnt   string
		roots []int
	)
	buf := make([]byte, 64*1024)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(keeperCtl, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			break // the daemon is gone
		}
		switch m := buf[:n]; m[0] {
		case 'H':
			if len(m) < 21 {
				logf("malformed hello")
				return 2
			}
			h = viewOwner{pid: int(binary.LittleEndian.Uint32(m[1:])), start: binary.LittleEndian.Uint64(m[5:])}
			limit, mnt = binary.LittleEndian.Uint64(m[13:]), string(m[21:])
		case 'G':
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err == nil && len(msgs) == 1 {
				fds, err := unix.ParseUnixRights(&msgs[0])
				if err == nil {
					roots = append(roots, fds...)
				}
			}
		case 'B':
			return 0
		}
	}
	if h.pid == 0 {
		return 0 // died before it mounted anything
	}
	logf("daemon pid %d is gone: refusing opens on %s and taking it down", h.pid, mnt)
	answered := denyPending(int(fan.Fd()), limit)
	if o, ok := viewOn(mnt); ok && o == h {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			logf("detaching %s: %v", mnt, err)
		}
	}
	removed := 0
	for _, r := range roots {
		n, err := scrub(r, nil)
		if err != nil {
			logf("removing names from a skeleton of %s: %v", mnt, err)
		}
		removed += n
		unix.Close(r)
	}
	answered += drainDeny(fan, 250*time.Millisecond, 5*time.Second)
	logf("%s taken down: %d opens refused, %d names of files holding data removed from its views", mnt, answered, removed)
	return 0
}

// denyPending answers (EIO) every open a dead reader of the group had
// read and not answered, trying each descriptor number it could have
// received one under (below limit, its descriptor limit): an answer to a
// number no pending open has is refused by the kernel (ENOENT) and does
// nothing. It returns the opens it answered.
func denyPending(fan int, limit uint64) int {
	n := 0
	for fd := uint64(0); fd < limit; fd++ {
		if respond(fan, int32(fd), fanDenyErrno(unix.EIO)) == nil {
			n++
		}
	}
	return n
}

// drainDeny reads the opens queued on the group and denies them (EIO)
// until none has come for quiet, or for at most limit in all, and
// returns how many. A taken-down view is left with no name an open could
// get zeros from, but an open that looked its file up before the name
// went still asks the group: it must find it still there.
func drainDeny(fan *os.File, quiet, limit time.Duration) int {
	buf := make([]byte, 4096)
	end := time.Now().Add(limit)
	n := 0
	for {
		until := time.Now().Add(quiet)
		if until.After(end) {
			until = end
		}
		if err := fan.SetReadDeadline(until); err != nil {
			return n
		}
		m, err := fan.Read(buf)
		if err != nil {
			return n
		}
		forEachEvent(buf[:m], func(fd int) {
			respond(int(fan.Fd()), int32(fd), fanDenyErrno(unix.EIO))
			unix.Close(fd)
			n++
		})
	}
}

// forEachEvent calls fn with the descriptor of each event in buf.
func forEachEvent(buf []byte, fn func(fd int)) {
	for off := 0; off+int(unsafe.Sizeof(unix.FanotifyEventMetadata{})) <= len(buf); {
		ev := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
		if ev.Event_len == 0 {
			return
		}
		off += int(ev.Event_len)
		if ev.Fd >= 0 { // negative: a queue overflow, impossible with an unlimited queue
			fn(int(ev.Fd))
		}
	}
}

// respond answers the open whose event came under descriptor fd.
func respond(fan int, fd int32, verdict uint32) error {
	r := unix.FanotifyResponse{Fd: fd, Response: verdict}
	_, err := unix.Write(fan, (*[unsafe.Sizeof(r)]byte)(unsafe.Pointer(&r))[:])
	return err
}

// scrub removes, below the directory open at dirfd, the name of every
// regular file holding data that keep (nil: none) does not keep, and
// returns how many it removed. Directories are walked by descriptor.
func scrub(dirfd int, keep func(st *unix.Stat_t) bool) (int, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	d := os.NewFile(uintptr(fd), "skeleton directory")
	defer d.Close()
	names, err := d.Readdirnames(-1)
	n := 0
	for _, name := range names {
		var st unix.Stat_t
		if e := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); e != nil {
			err = errors.Join(err, e)
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			cfd, e := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if e != nil {
				err = errors.Join(err, e)
				continue
			}
			m, e := scrub(cfd, keep)
			unix.Close(cfd)
			n += m
			err = errors.Join(err, e)
		case unix.S_IFREG:
			if st.Size > 0 && (keep == nil || !keep(&st)) {
				if e := unix.Unlinkat(fd, name, 0); e != nil {
					err = errors.Join(err, e)
					continue
				}
				n++
			}
		}
	}
	return n, err
}

// viewOn reports whether the topmost mount on p is a kernel-mode view,
// and its daemon.
func viewOn(p string) (viewOwner, bool) {
	m, ok := fusecore.TopMount(p)
	if !ok || m.FsType != "tmpfs" {
		return viewOwner{}, false
	}
	rest, ok := strings.CutPrefix(m.Source, mountSource)
	if !ok {
		return viewOwner{}, false
	}
	pid, rest, _ := strings.Cut(rest, ":")
	start, _, _ := strings.Cut(rest, ":")
	n, err := strconv.Atoi(pid)
	t, _ := strconv.ParseUint(start, 10, 64) // 0 (unknown) in a source without it
	return viewOwner{pid: n, start: t}, err == nil
}

// clearStale takes down a view on mnt whose daemon o is dead (and whose
// keeper died with it): the name of every file holding data is removed
// from it (nobody knows any more which were filled), then it is detached.
// It returns how many names it removed.
func clearStale(mnt string, o viewOwner) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, mnt, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	// The clone is a mount of the same tmpfs of its own: writable, it
	// reaches the skeleton the read-only view shows.
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return 0, err
	}
	n, err := scrub(fd, nil)
	if err != nil {
		return n, err
	}
	if cur, ok := viewOn(mnt); ok && cur == o {
		err = unix.Unmount(mnt, unix.MNT_DETACH)
	}
	return n, err
}

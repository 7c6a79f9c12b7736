package metafs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kaon-storage/kaon/integration/fusetest"
	"golang.org/x/sys/unix"
)

// gatedLower serves a directory through a FUSE loopback mount of this
// test process on which reads of files named "gated..." block until
// release is closed: a kernel-mode daemon copying one is caught in the
// middle of its fill. entered gets a value when such a read blocks.
type gatedLower struct {
	mnt              string
	entered, release chan struct{}
}

type gateNode struct {
	*fs.LoopbackNode
	g *gatedLower
}

type gatedFile struct {
	*fs.LoopbackFile
	g *gatedLower
}

var (
	_ = (fs.NodeWrapChilder)((*gateNode)(nil))
	_ = (fs.NodeOpener)((*gateNode)(nil))
	_ = (fs.FileReader)((*gatedFile)(nil))
)

// WrapChild makes every node of the tree a gateNode.
func (n *gateNode) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &gateNode{LoopbackNode: ops.(*fs.LoopbackNode), g: n.g}
}

func (n *gateNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 || !strings.HasPrefix(filepath.Base(n.Path(nil)), "gated") {
		return fh, fl, errno
	}
	return &gatedFile{LoopbackFile: fh.(*fs.LoopbackFile), g: n.g}, fl | fuse.FOPEN_DIRECT_IO, 0
}

func (f *gatedFile) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	select {
	case f.g.entered <- struct{}{}:
	default:
	}
	<-f.g.release
	return f.LoopbackFile.Read(ctx, dest, off)
}

// open lets every read through.
func (g *gatedLower) open() {
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}

func newGatedLower(t *testing.T, dir string) *gatedLower {
	t.Helper()
	g := &gatedLower{mnt: t.TempDir(), entered: make(chan struct{}, 16), release: make(chan struct{})}
	var st syscall.Stat_t
	must(t, syscall.Stat(dir, &st))
	root := &fs.LoopbackRoot{Path: dir, Dev: uint64(st.Dev)}
	root.RootNode = &gateNode{LoopbackNode: &fs.LoopbackNode{RootData: root}, g: g}
	srv, err := fs.Mount(g.mnt, root.RootNode, &fs.Options{MountOptions: fuse.MountOptions{FsName: "gated", DirectMount: true}})
	must(t, err)
	// go-fuse opens /dev/fuse without O_CLOEXEC: the kaon processes this
	// test starts would hold the connection, and a daemon killed in the
	// middle of a read of it could then never exit.
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == "/dev/fuse" {
			fd, _ := strconv.Atoi(e.Name())
			unix.CloseOnExec(fd)
		}
	}
	t.Cleanup(func() {
		g.open()
		if err := srv.Unmount(); err != nil {
			exec.Command("fusermount3", "-u", "-z", g.mnt).Run()
		}
	})
	return g
}

// bg is a command running in the background.
type bg struct {
	cmd         *exec.Cmd
	out, stderr bytes.Buffer
	done        chan error
}

func start(t *testing.T, name string, args ...string) *bg {
	t.Helper()
	b := &bg{cmd: exec.Command(name, args...), done: make(chan error, 1)}
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.stderr
	must(t, b.cmd.Start())
	go func() { b.done <- b.cmd.Wait() }()
	t.Cleanup(func() { b.cmd.Process.Kill() })
	return b
}

func (b *bg) wait(t *testing.T, step string) error {
	t.Helper()
	select {
	case err := <-b.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("timeout (30s): %s", step)
		return nil
	}
}

// waitBlockedOpen waits until pid sleeps in a fanotify permission event:
// its open waits for an answer.
func waitBlockedOpen(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		if string(b) == "fanotify_handle_event" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timeout (30s): %s never waited for an answer to its open (wchan %q)", what, b)
		}
	}
}

// stopAll stops pid (SIGSTOP) and waits until it is stopped: until
// then it may still act. kill(2) returns once the stop is pending, but
// the kernel tells one thread, and the others only once that one is
// scheduled and enters the stop: under load the others run on meanwhile
// (and a daemon whose keeper dies then takes its mount down). pid is
// stopped when every thread is: in the stop ("T"), or waiting for the
// answer of a FUSE request in its killable wait ("D" in
// request_wait_answer), which it enters only once told of a signal and
// leaves only into the stop.
func stopAll(t *testing.T, pid int) {
	t.Helper()
	must(t, syscall.Kill(pid, syscall.SIGSTOP))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		running := threadsRunning(t, pid)
		if len(running) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timeout (30s): pid %d never stopped after SIGSTOP; threads not stopped: %v", pid, running)
		}
	}
}

// threadsRunning lists the threads of pid neither stopped nor held in a
// FUSE request's killable wait, with their state and wait channel.
func threadsRunning(t *testing.T, pid int) []string {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	must(t, err)
	var out []string
	for _, task := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, task.Name())
		stat, _ := os.ReadFile(dir + "stat")
		wchan, _ := os.ReadFile(dir + "wchan")
		// pid (comm) state ...: comm may hold spaces and parentheses.
		state := ""
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
			state = string(stat[i+2])
		}
		if state != "T" && !(state == "D" && string(wchan) == "request_wait_answer") {
			out = append(out, fmt.Sprintf("%s %s %s", task.Name(), state, wchan))
		}
	}
	return out
}

// killAll kills the daemon and every process it started at once, as a
// SIGKILL of its whole cgroup would: it is stopped first, so it cannot
// react to its children's deaths.
func killAll(t *testing.T, d *daemon) {
	t.Helper()
	pid := d.cmd.Process.Pid
	stopAll(t, pid)
	for _, c := range children(t, pid) {
		syscall.Kill(c, syscall.SIGKILL)
	}
	must(t, syscall.Kill(pid, syscall.SIGKILL))
	within(t, "exit of the daemon and its children after SIGKILL", func() { <-d.done })
}

// kaonWithin runs kaon with a deadline (a mount that should have been
// refused would serve in the foreground for ever).
func kaonWithin(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kaonBin, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("timeout (30s): kaon %s: %s", strings.Join(args, " "), out)
	}
	return string(out), err
}

// noDataFile checks that a process inside a view that was taken down
// (holding a directory of it open) cannot open a file holding data there:
// it would read zeros.
func noDataFile(t *testing.T, dirfd int, name string) {
	t.Helper()
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		b := make([]byte, 16)
		n, _ := unix.Read(fd, b)
		unix.Close(fd)
		t.Errorf("open of %s inside the view taken down succeeded and read %q...", name, b[:max(n, 0)])
	} else if err != unix.ENOENT {
		t.Errorf("open of %s inside the view taken down: %v, want ENOENT", name, err)
	}
}

// TestKernelModeDaemonKilled: a kernel-mode daemon killed with SIGKILL
// lets no file it did not fill be read: its keeper refuses (EIO) the open
// it was filling when it died and an open still waiting for it, takes the
// view off the mountpoint, and leaves a process still inside the view no
// file holding data to open; the mountpoint takes a new mount at once.
func TestKernelModeDaemonKilled(t *testing.T) {
	backing := fusetest.MakeTree(t)
	must(t, os.WriteFile(filepath.Join(backing, "gated"), []byte("the gated file's own bytes\n"), 0o644))
	lower := newGatedLower(t, backing)
	idx := filepath.Join(t.TempDir(), "sw.metafs")
	index(t, lower.mnt, idx)
	mnt := t.TempDir()
	d := mount(t, "--kernel", "--index", idx, lower.mnt, mnt)
	t.Cleanup(lower.open) // before the daemon is stopped: it may be filling gated
	pid := d.cmd.Process.Pid

	want, err := os.ReadFile(filepath.Join(backing, "bin/tool"))
	must(t, err)
	if got, err := os.ReadFile(filepath.Join(mnt, "bin/tool")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read before the kill: %d bytes, %v", len(got), err)
	}
	dirfd, err := unix.Open(filepath.Join(mnt, "lib/python3/site"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(dirfd)

	// An open the daemon is filling when it dies, and one queued behind
	// it (the daemon is stopped, so it cannot read it).
	filling := start(t, "cat", filepath.Join(mnt, "gated"))
	select {
	case <-lower.entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("timeout (30s): the daemon's copy of gated never read the tree below:\n%s", d.output())
	}
	stopAll(t, pid) // else it might yet fill the open queued next
	queued := start(t, "cat", filepath.Join(mnt, "lib/libfoo.so.1.2"))
	waitBlockedOpen(t, queued.cmd.Process.Pid, "cat lib/libfoo.so.1.2")
	must(t, syscall.Kill(pid, syscall.SIGKILL))
	// Its thread reading gated exits once the read is answered (a FUSE
	// request the server has taken is not abandoned).
	lower.open()
	within(t, "exit of the daemon (and its keeper) after SIGKILL", func() { <-d.done })

	for _, c := range []struct {
		name string
		b    *bg
	}{{"gated (being filled)", filling}, {"lib/libfoo.so.1.2 (queued)", queued}} {
		err := c.b.wait(t, "cat "+c.name)
		if err == nil || c.b.out.Len() != 0 || !strings.Contains(c.b.stderr.String(), "Input/output error") {
			t.Errorf("cat %s when the daemon was killed: %v, %d bytes %q..., stderr %q; want EIO and no bytes",
				c.name, err, c.b.out.Len(), c.b.out.Bytes()[:min(c.b.out.Len(), 16)], c.b.stderr.String())
		}
	}
	if isMounted(mnt) {
		t.Errorf("the view of the killed daemon is still on %s", mnt)
		unix.Unmount(mnt, unix.MNT_DETACH)
	}
	noDataFile(t, dirfd, "mod.py")
	out := d.output()
	for _, w := range []string{fmt.Sprintf("keeper: daemon pid %d is gone", pid), "opens refused"} {
		if !strings.Contains(out, w) {
			t.Errorf("daemon output lacks %q:\n%s", w, out)
		}
	}

	mount(t, "--kernel", "--index", idx, lower.mnt, mnt)
	if got, err := os.ReadFile(filepath.Join(mnt, "bin/tool")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read through the new mount: %d bytes, %v", len(got), err)
	}
}

// TestKernelModeStaleView: a view left on the mountpoint because its
// daemon and keeper died together is stale: the next mount says so,
// naming the dead pid and the ways out, instead of "already served";
// --clean-stale, or `kaon metafs umount`, removes from it every file
// holding data (which would read as zeros), detaches it, and the
// mountpoint is served again.
func TestKernelModeStaleView(t *testing.T) {
	for _, how := range []string{"--clean-stale", "umount"} {
		t.Run(how, func(t *testing.T) {
			lower := fusetest.MakeTree(t)
			idx := filepath.Join(t.TempDir(), "sw.metafs")
			index(t, lower, idx)
			mnt := t.TempDir()
			d := mount(t, "--kernel", "--index", idx, lower, mnt)
			pid := d.cmd.Process.Pid
			want, err := os.ReadFile(filepath.Join(lower, "bin/tool"))
			must(t, err)
			if got, err := os.ReadFile(filepath.Join(mnt, "bin/tool")); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read before the kill: %d bytes, %v", len(got), err)
			}
			dirfd, err := unix.Open(filepath.Join(mnt, "lib/python3/site"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			must(t, err)
			defer unix.Close(dirfd)
			killAll(t, d)
			if !isMounted(mnt) {
				t.Fatalf("nothing left on %s after killing the daemon and its keeper together; daemon output:\n%s", mnt, d.output())
			}
			t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })

			out, err := kaonWithin(t, "metafs", "mount", "--kernel", "--index", idx, lower, mnt)
			for _, w := range []string{"stale", fmt.Sprintf("pid %d", pid), "--clean-stale", "kaon metafs umount"} {
				if err == nil || !strings.Contains(out, w) {
					t.Errorf("mount over the view of dead pid %d: %v, output lacks %q: %s", pid, err, w, out)
				}
			}
			if how == "umount" {
				if out, err := kaonWithin(t, "metafs", "umount", mnt); err != nil {
					t.Fatalf("kaon metafs umount of the stale view: %v: %s", err, out)
				}
				if isMounted(mnt) {
					t.Fatalf("stale view still on %s after kaon metafs umount", mnt)
				}
				mount(t, "--kernel", "--index", idx, lower, mnt)
			} else {
				d = mount(t, "--kernel", "--clean-stale", "--index", idx, lower, mnt)
				if out := d.output(); !strings.Contains(out, fmt.Sprintf("stale view of dead pid %d cleared", pid)) {
					t.Errorf("--clean-stale did not report the stale view:\n%s", out)
				}
			}
			noDataFile(t, dirfd, "mod.py")
			if got, err := os.ReadFile(filepath.Join(mnt, "bin/tool")); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read through the new mount: %d bytes, %v", len(got), err)
			}
			mi, err := os.ReadFile("/proc/self/mountinfo")
			must(t, err)
			if n := strings.Count(string(mi), " "+mnt+" "); n != 1 {
				t.Errorf("%d mounts on %s, want 1", n, mnt)
			}
		})
	}
}

// children are the pids of the processes pid started.
func children(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	must(t, err)
	var out []int
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		for _, c := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(c)
			out = append(out, n)
		}
	}
	return out
}

// TestKernelModeKeeperKilled: when the keeper dies, the daemon (still
// able to) takes its mount down at once and exits with an error naming
// it: files it filled stay readable to a process inside the view, files
// it did not are gone from it.
func TestKernelModeKeeperKilled(t *testing.T) {
	lower := fusetest.MakeTree(t)
	idx := filepath.Join(t.TempDir(), "sw.metafs")
	index(t, lower, idx)
	mnt := t.TempDir()
	d := mount(t, "--kernel", "--index", idx, lower, mnt)
	want, err := os.ReadFile(filepath.Join(lower, "bin/tool"))
	must(t, err)
	if got, err := os.ReadFile(filepath.Join(mnt, "bin/tool")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read before the kill: %d bytes, %v", len(got), err)
	}
	bin, err := unix.Open(filepath.Join(mnt, "bin"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(bin)
	site, err := unix.Open(filepath.Join(mnt, "lib/python3/site"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(site)

	kids := children(t, d.cmd.Process.Pid)
	if len(kids) != 1 {
		t.Fatalf("daemon %d has children %v, want its keeper", d.cmd.Process.Pid, kids)
	}
	must(t, syscall.Kill(kids[0], syscall.SIGKILL))
	within(t, "exit of the daemon after its keeper was killed", func() { <-d.done })
	if d.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(d.output(), fmt.Sprintf("its keeper, pid %d, exited", kids[0])) {
		t.Errorf("daemon after its keeper was killed: exit %d:\n%s", d.cmd.ProcessState.ExitCode(), d.output())
	}
	if isMounted(mnt) {
		t.Errorf("view still on %s after its keeper was killed", mnt)
		unix.Unmount(mnt, unix.MNT_DETACH)
	}
	noDataFile(t, site, "mod.py")
	fd, err := unix.Openat(bin, "tool", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	must(t, err)
	got := make([]byte, len(want)+1)
	n, _ := unix.Read(fd, got)
	unix.Close(fd)
	if !bytes.Equal(got[:max(n, 0)], want) {
		t.Errorf("filled file inside the view taken down: %d bytes, want its %d", n, len(want))
	}
}

// TestKernelModeStopWhileOpening: a daemon told to stop (SIGTERM) while
// opens wait for it lets the fills it started finish and refuses (EIO)
// the opens it has not started on, rather than closing the group on them,
// which would let them open unfilled files reading as zeros.
func TestKernelModeStopWhileOpening(t *testing.T) {
	backing := fusetest.MakeTree(t)
	const fills = 8 // the daemon's parallel fills: a ninth open waits
	for i := range fills {
		must(t, os.WriteFile(filepath.Join(backing, fmt.Sprintf("gated%d", i)), []byte(fmt.Sprintf("gated file %d\n", i)), 0o644))
	}
	lower := newGatedLower(t, backing)
	idx := filepath.Join(t.TempDir(), "sw.metafs")
	index(t, lower.mnt, idx)
	mnt := t.TempDir()
	d := mount(t, "--kernel", "--index", idx, lower.mnt, mnt)
	t.Cleanup(lower.open) // before the daemon is stopped: it may be filling

	var filling []*bg
	for i := range fills {
		filling = append(filling, start(t, "cat", filepath.Join(mnt, fmt.Sprintf("gated%d", i))))
	}
	for i := range fills {
		select {
		case <-lower.entered:
		case <-time.After(30 * time.Second):
			t.Fatalf("timeout (30s): %d of %d copies of gated files reached the tree below:\n%s", i, fills, d.output())
		}
	}
	waiting := start(t, "cat", filepath.Join(mnt, "lib/libfoo.so.1.2"))
	waitBlockedOpen(t, waiting.cmd.Process.Pid, "cat lib/libfoo.so.1.2")
	must(t, d.cmd.Process.Signal(syscall.SIGTERM))
	d.waitFor(t, "unmounting")
	for deadline := time.Now().Add(30 * time.Second); isMounted(mnt); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timeout (30s): view still on %s after SIGTERM", mnt)
		}
	}
	lower.open()
	for i, b := range filling {
		err := b.wait(t, fmt.Sprintf("cat gated%d", i))
		if want := fmt.Sprintf("gated file %d\n", i); err != nil || b.out.String() != want {
			t.Errorf("cat gated%d, being filled at SIGTERM: %v, %q (stderr %q), want %q", i, err, b.out.String(), b.stderr.String(), want)
		}
	}
	err := waiting.wait(t, "cat lib/libfoo.so.1.2")
	if err == nil || waiting.out.Len() != 0 || !strings.Contains(waiting.stderr.String(), "Input/output error") {
		t.Errorf("cat lib/libfoo.so.1.2, waiting at SIGTERM: %v, %d bytes %q..., stderr %q; want EIO and no bytes",
			err, waiting.out.Len(), waiting.out.Bytes()[:min(waiting.out.Len(), 16)], waiting.stderr.String())
	}
	within(t, "exit of the daemon after SIGTERM", func() { <-d.done })
	if d.cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("daemon exit %d after SIGTERM:\n%s", d.cmd.ProcessState.ExitCode(), d.output())
	}
}

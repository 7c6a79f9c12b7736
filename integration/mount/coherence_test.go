package mount_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/integration/fusetest"
	"github.com/kaon-storage/kaon/integration/harness"
)

// visible is the deadline for a change to show in another mount: far
// below the kernel's and the daemon's cache lifetime (the lease, 300 s),
// so only an invalidation can meet it.
const visible = 10 * time.Second

func readFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(b)
}

// TestTwoMounts: two daemons on one namespace (as two nodes would be)
// see each other's changes — new files where a negative lookup was
// cached, content changed in place where pages were cached, renames and
// removals — and a change made with curl, each through the session's
// invalidations (the caches would hold them for 300 s otherwise); and
// each other's flock and fcntl locks.
func TestTwoMounts(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/two")
	a := newMount(t, up.EP.HTTP, "/two", "")
	b := newMount(t, up.EP.HTTP, "/two", "")
	pa, pb := filepath.Join(a.mp, "f"), filepath.Join(b.mp, "f")
	// Each mount is a session the server lists (fusex ls), online.
	ls := up.MustKaon("fusex", "ls")
	for _, m := range []*kmount{a, b} {
		if !strings.Contains(ls, ":"+m.mp) || !strings.Contains(ls, "online") {
			t.Fatalf("kaon fusex ls does not list %s online:\n%s", m.mp, ls)
		}
	}

	// B caches a negative entry, A creates the file.
	if _, err := os.Stat(pb); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat in B before the create: %v", err)
	}
	if err := os.WriteFile(pa, []byte("from A"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := waitFor(t, visible, "B sees A's new file", func() bool { return readFile(pb) == "from A" })
	t.Logf("a file created in A: seen in B after %v", d)

	// B holds the pages, and keeps the file open; A changes it in place
	// (same inode).
	var before, after syscall.Stat_t
	syscall.Stat(pb, &before)
	held, err := unix.Open(pb, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(held)
	pread := func() string {
		buf := make([]byte, 64)
		n, _ := unix.Pread(held, buf, 0)
		return string(buf[:max(n, 0)])
	}
	if got := pread(); got != "from A" {
		t.Fatalf("pread in B before the change: %q", got)
	}
	fd, err := unix.Open(pa, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Pwrite(fd, []byte("FROM"), 0)
	unix.Write(fd, []byte("FROM A, longer"))
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close in A (the journal's flush): %v", err)
	}
	d = waitFor(t, visible, "B sees A's change in place", func() bool { return readFile(pb) == "FROM A, longer" })
	waitFor(t, visible, "B's open descriptor reads A's change in place", func() bool { return pread() == "FROM A, longer" })
	syscall.Stat(pb, &after)
	if after.Ino != before.Ino {
		t.Errorf("an update in place changed the inode: %d, then %d", before.Ino, after.Ino)
	}
	t.Logf("a change in place in A: seen in B after %v", d)

	// The same for a file larger than what B reads ahead: the bytes B
	// holds read ahead are as stale as its pages.
	big := bytes.Repeat([]byte("b"), 3<<20)
	if err := os.WriteFile(filepath.Join(a.mp, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	var hb int
	waitFor(t, visible, "B opens A's big file", func() bool {
		hb, err = unix.Open(filepath.Join(b.mp, "big"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		return err == nil
	})
	defer unix.Close(hb)
	chunk := make([]byte, 4096)
	if n, _ := unix.Pread(hb, chunk, 4096); n != 4096 || chunk[0] != 'b' {
		t.Fatalf("B reads the big file: %d bytes %q", n, chunk[:1])
	}
	fd, err = unix.Open(filepath.Join(a.mp, "big"), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Pwrite(fd, []byte("CHANGED"), 8192)
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close of the big file in A: %v", err)
	}
	waitFor(t, visible, "B's open descriptor reads A's change inside what it read ahead", func() bool {
		n, _ := unix.Pread(hb, chunk[:7], 8192)
		return n == 7 && string(chunk[:7]) == "CHANGED"
	})

	// curl replaces the file: B sees it.
	src := filepath.Join(t.TempDir(), "src")
	os.WriteFile(src, []byte("from curl"), 0o644)
	start := time.Now()
	if out, err := exec.Command("curl", "-sSf", "-L", "-T", src, up.EP.HTTP+"/two/f").CombinedOutput(); err != nil {
		t.Fatalf("curl PUT: %v\n%s", err, out)
	}
	waitFor(t, visible, "B sees curl's upload", func() bool { return readFile(pb) == "from curl" })
	t.Logf("an upload with curl: seen in B %v after curl returned", time.Since(start))

	// A renames and removes: B sees both.
	if err := os.Mkdir(filepath.Join(a.mp, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.ReadDir(b.mp)
	if err := os.Rename(pa, filepath.Join(a.mp, "d", "g")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, visible, "B sees A's rename", func() bool {
		_, err := os.Stat(pb)
		return errors.Is(err, os.ErrNotExist) && readFile(filepath.Join(b.mp, "d", "g")) == "from curl"
	})
	if err := os.Remove(filepath.Join(a.mp, "d", "g")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, visible, "B sees A's removal", func() bool {
		ents, _ := os.ReadDir(filepath.Join(b.mp, "d"))
		return len(ents) == 0
	})

	// Locks are the namespace's: what A holds, B cannot take.
	lp := "lock"
	os.WriteFile(filepath.Join(a.mp, lp), []byte("l"), 0o644)
	la, err := unix.Open(filepath.Join(a.mp, lp), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(la)
	var lb int
	waitFor(t, visible, "B opens the lock file", func() bool {
		lb, err = unix.Open(filepath.Join(b.mp, lp), unix.O_RDWR|unix.O_CLOEXEC, 0)
		return err == nil
	})
	defer unix.Close(lb)
	if err := unix.Flock(la, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock in A: %v", err)
	}
	if err := unix.Flock(lb, unix.LOCK_EX|unix.LOCK_NB); err != unix.EAGAIN {
		t.Fatalf("flock in B while A holds it: %v, want EAGAIN", err)
	}
	unix.Flock(la, unix.LOCK_UN)
	if err := unix.Flock(lb, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock in B after A released it: %v", err)
	}
	unix.Flock(lb, unix.LOCK_UN)
	wr := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 100}
	if err := unix.FcntlFlock(uintptr(la), unix.F_OFD_SETLK, &wr); err != nil {
		t.Fatalf("fcntl lock in A: %v", err)
	}
	rd := unix.Flock_t{Type: unix.F_RDLCK, Start: 50, Len: 10}
	if err := unix.FcntlFlock(uintptr(lb), unix.F_OFD_SETLK, &rd); err != unix.EAGAIN {
		t.Fatalf("fcntl read lock in B over A's write lock: %v, want EAGAIN", err)
	}
	probe := unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 0}
	if err := unix.FcntlFlock(uintptr(lb), unix.F_OFD_GETLK, &probe); err != nil || probe.Type != unix.F_WRLCK || probe.Len != 100 {
		t.Fatalf("F_GETLK in B: %+v, %v; want A's write lock of 100 bytes", probe, err)
	}
	rd = unix.Flock_t{Type: unix.F_RDLCK, Start: 100, Len: 10}
	if err := unix.FcntlFlock(uintptr(lb), unix.F_OFD_SETLK, &rd); err != nil {
		t.Fatalf("fcntl read lock in B beyond A's range: %v", err)
	}

	// A close releases what was never unlocked: a flock (last close of
	// the open file) and a process's POSIX lock (any close).
	c1, err := unix.Open(filepath.Join(a.mp, lp), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(c1, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("flock in A: %v", err)
	}
	pl := unix.Flock_t{Type: unix.F_WRLCK, Start: 200, Len: 10}
	if err := unix.FcntlFlock(uintptr(c1), unix.F_SETLK, &pl); err != nil {
		t.Fatalf("POSIX lock in A: %v", err)
	}
	unix.Close(c1)
	pl = unix.Flock_t{Type: unix.F_WRLCK, Start: 200, Len: 10}
	if err := unix.FcntlFlock(uintptr(lb), unix.F_OFD_SETLK, &pl); err != nil {
		t.Fatalf("fcntl lock in B after A closed its POSIX-locked file: %v", err)
	}
	// The kernel sends the last close's RELEASE (which drops a flock)
	// after close returned: B gets the flock once it arrived.
	waitFor(t, visible, "B's flock once A's last close of its flocked file was released", func() bool {
		return unix.Flock(lb, unix.LOCK_EX|unix.LOCK_NB) == nil
	})
}

// TestKilledDaemon: a kill -9 of a mount's daemon leaves a stale mount;
// the next `kaon mount` on that mountpoint clears it and what was
// acknowledged (close returned) before is intact. A second mount on a
// live mountpoint is refused.
func TestKilledDaemon(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/k")
	m := newMount(t, up.EP.HTTP, "/k", "")
	want := bytes.Repeat([]byte("acknowledged\n"), 10000)
	if err := os.WriteFile(filepath.Join(m.mp, "f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	// Twice on one mountpoint: refused, the first mount untouched.
	cmd := exec.Command(harness.Binary(t), "mount", "-f", "--url", up.EP.HTTP, "--subtree", "/k", m.mp)
	out, err := fusetest.ExecCmd(t, "second kaon mount on a live mountpoint", cmd)
	if err == nil || !strings.Contains(out, "already served") {
		t.Fatalf("a second mount on %s: %v\n%s", m.mp, err, out)
	}
	m.kill()
	var statErr error
	if err := fusetest.Within("statfs of the dead mount", 10*time.Second, func() error {
		var st unix.Statfs_t
		statErr = unix.Statfs(m.mp, &st)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if statErr != unix.ENOTCONN {
		t.Fatalf("statfs of %s after kill -9 of its daemon: %v, want ENOTCONN (a stale mount)", m.mp, statErr)
	}
	m2 := newMount(t, up.EP.HTTP, "/k", m.mp)
	if !strings.Contains(m2.log.String(), "stale FUSE mount detected") {
		t.Errorf("the new mount did not report the stale one:\n%s", m2.log)
	}
	if got, err := os.ReadFile(filepath.Join(m2.mp, "f")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after kill -9 and a new mount: %d bytes, %v; want the %d acknowledged", len(got), err, len(want))
	}
}

// TestMountHelper: mount(8)'s helper convention (mount.kaon SPEC DIR -o
// OPTIONS, the binary called by that name) mounts in the background;
// `kaon umount` takes it away.
func TestMountHelper(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/h")
	os.WriteFile(filepath.Join(t.TempDir(), "x"), nil, 0o644)
	bin := filepath.Join(fusetest.TempDir(t), "mount.kaon")
	if err := os.Symlink(harness.Binary(t), bin); err != nil {
		t.Fatal(err)
	}
	d := fusetest.TempDir(t)
	mp := filepath.Join(d, "mnt")
	os.Mkdir(mp, 0o755)
	conn := fusetest.Track(mp)
	defer conn.Untrack()
	out, err := fusetest.Exec(t, bin, up.EP.HTTP+"/h", mp, "-o", "rw,_netdev,cache="+filepath.Join(d, "cache"))
	if err != nil {
		t.Fatalf("mount.kaon: %v\n%s", err, out)
	}
	conn.Update()
	if e, ok := fusecoreTop(mp); !ok || e != "fuse.kaon" {
		t.Fatalf("after mount.kaon: %s is %q", mp, e)
	}
	if err := os.WriteFile(filepath.Join(mp, "via-helper"), []byte("h"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := up.MustKaon("ls", "/h"); !strings.Contains(out, "via-helper") {
		t.Fatalf("kaon ls /h after a write through the helper's mount: %s", out)
	}
	// A virtual attribute: the file's URL, which curl reads.
	buf := make([]byte, 256)
	n, err := unix.Getxattr(filepath.Join(mp, "via-helper"), "kaon.url.https", buf)
	if err != nil || string(buf[:n]) != up.EP.HTTP+"/h/via-helper" {
		t.Fatalf("kaon.url.https: %q, %v", buf[:max(n, 0)], err)
	}
	if out, err := exec.Command("curl", "-sSfL", string(buf[:n])).CombinedOutput(); err != nil || string(out) != "h" {
		t.Fatalf("curl of kaon.url.https: %q, %v", out, err)
	}
	if out, err := fusetest.Exec(t, harness.Binary(t), "umount", mp); err != nil {
		t.Fatalf("kaon umount: %v\n%s", err, out)
	}
	waitFor(t, visible, "the helper's mount gone after kaon umount", func() bool { _, ok := fusecoreTop(mp); return !ok })
}

// fusecoreTop is the file system type mounted on mp (from mountinfo).
func fusecoreTop(mp string) (string, bool) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	typ, found := "", false
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 1 && f[4] == mp {
			typ, found = g[0], true
		}
	}
	return typ, found
}

// TestOpenFileSize: a file open for writing shows its writers' size to
// a stat by path while its journal is not flushed (the mount's own
// invalidation of the new name makes the kernel look it up again).
func TestOpenFileSize(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/s")
	m := newMount(t, up.EP.HTTP, "/s", "")
	p := filepath.Join(m.mp, "f")
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.Pwrite(fd, []byte("12345"), 1<<20); err != nil {
		t.Fatal(err)
	}
	var byPath, byFd unix.Stat_t
	waitFor(t, visible, "the create's invalidation reaches the kernel", func() bool {
		// The name is looked up again once the mount's session told the
		// kernel about the new file.
		return unix.Lstat(p, &byPath) == nil && unix.Fstat(fd, &byFd) == nil && byPath.Ino == byFd.Ino
	})
	if byPath.Size != 1<<20+5 || byFd.Size != 1<<20+5 {
		t.Fatalf("open file: size %d by path, %d by descriptor; want %d", byPath.Size, byFd.Size, 1<<20+5)
	}
}

// resident counts the pages of the file at p in the kernel's page cache
// (mincore over a mapping, which reads nothing).
func resident(t *testing.T, p string) int {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	unix.Fstat(fd, &st)
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	vec := make([]byte, (len(mem)+4095)/4096)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestPageCacheKept: the kernel keeps a file's pages across opens while
// its data version is unchanged, and drops them once another mount
// changed it.
func TestPageCacheKept(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/pc")
	a := newMount(t, up.EP.HTTP, "/pc", "")
	b := newMount(t, up.EP.HTTP, "/pc", "")
	const pages = 64
	if err := os.WriteFile(filepath.Join(a.mp, "f"), bytes.Repeat([]byte("p"), pages*4096), 0o644); err != nil {
		t.Fatal(err)
	}
	pb := filepath.Join(b.mp, "f")
	waitFor(t, visible, "B reads A's file", func() bool { return len(readFile(pb)) == pages*4096 })
	if n := resident(t, pb); n != pages {
		t.Fatalf("after a read and a new open in B: %d of %d pages cached, want all (kept across opens)", n, pages)
	}
	fd, err := unix.Open(filepath.Join(a.mp, "f"), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	unix.Pwrite(fd, []byte("CHANGED"), 0)
	if err := unix.Close(fd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, visible, "B's pages of the file dropped after A's change", func() bool { return resident(t, pb) < pages })
	if got := readFile(pb); !strings.HasPrefix(got, "CHANGED") {
		t.Fatalf("B after A's change: %.10q", got)
	}
}

// TestHungServer: with the namespace server stopped (SIGSTOP), a request
// through the mount fails after the mount's timeout instead of holding
// its caller; once the server runs again the mount serves again.
func TestHungServer(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/hung")
	m := newMount(t, up.EP.HTTP, "/hung", "", "--timeout", "2s")
	if err := os.WriteFile(filepath.Join(m.mp, "before"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	up.Cmd.Process.Signal(syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			up.Cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	// Every thread of the server stopped (state T) before the mount is
	// asked: a thread in a system call stops only when it returns.
	waitFor(t, 30*time.Second, "the server to be stopped (SIGSTOP)", func() bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", up.Cmd.Process.Pid))
		_, rest, _ := strings.Cut(string(st), ") ")
		return err == nil && strings.HasPrefix(rest, "T")
	})
	// A create always asks the server (a lookup of a missing name no
	// longer does: the directory's listing, held with its lease,
	// answers it).
	var createErr error
	if err := fusetest.Within("create of a new file while the server is stopped", 30*time.Second, func() error {
		createErr = os.WriteFile(filepath.Join(m.mp, "not-cached"), []byte("z"), 0o644)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("create with the server stopped: %v", createErr)
	if createErr == nil || errors.Is(createErr, os.ErrNotExist) {
		t.Fatalf("create with the server stopped: %v, want a failure other than ENOENT", createErr)
	}
	up.Cmd.Process.Signal(syscall.SIGCONT)
	stopped = false
	waitFor(t, 30*time.Second, "the mount serves again once the server runs", func() bool {
		return os.WriteFile(filepath.Join(m.mp, "after"), []byte("y"), 0o644) == nil
	})
}

// TestServerRestart: the namespace server restarts (a new process on the
// same address); the mount's session reconnects, what the mount cached
// is dropped and leases are taken again, so a change made with curl
// after the restart still reaches the mount, and files written before
// are intact.
func TestServerRestart(t *testing.T) {
	dir := t.TempDir()
	ports := harness.FreePorts(t, 2)
	up := harness.Start(t, dir, "up", "--data", dir, "--http", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--xrootd", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	up.MustKaon("mkdir", "/r")
	m := newMount(t, up.EP.HTTP, "/r", "")
	p := filepath.Join(m.mp, "f")
	if err := os.WriteFile(p, []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := readFile(p); got != "before" {
		t.Fatalf("before the restart: %q", got)
	}
	up.Restart()
	src := filepath.Join(t.TempDir(), "src")
	os.WriteFile(src, []byte("after the restart"), 0o644)
	if out, err := exec.Command("curl", "-sSf", "-L", "-T", src, up.EP.HTTP+"/r/f").CombinedOutput(); err != nil {
		t.Fatalf("curl PUT after the restart: %v\n%s", err, out)
	}
	waitFor(t, 30*time.Second, "the mount sees a change made after the server restarted", func() bool {
		return readFile(p) == "after the restart"
	})
	if err := os.WriteFile(filepath.Join(m.mp, "g"), []byte("new"), 0o644); err != nil {
		t.Fatalf("a write through the mount after the restart: %v", err)
	}
	if out := up.MustKaon("ls", "/r"); !strings.Contains(out, "g") {
		t.Fatalf("kaon ls /r: %s", out)
	}
}

// TestWriteSurvivesRestart: a file is written through the mount, then
// the servers stop (storage server and namespace: `kaon up` is both);
// its close waits, the written bytes in the mount's journal, and
// returns success once the servers are back, when they are stored —
// what close told the writer is what curl reads.
func TestWriteSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ports := harness.FreePorts(t, 2)
	up := harness.Start(t, dir, "up", "--data", dir, "--http", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--xrootd", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	up.MustKaon("mkdir", "/j")
	m := newMount(t, up.EP.HTTP, "/j", "", "--grace", "5m")
	p := filepath.Join(m.mp, "f")
	want := bytes.Repeat([]byte("journaled "), 100_000)
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(fd, want); err != nil {
		t.Fatal(err)
	}
	up.Stop()
	closed := make(chan error, 1)
	go func() { closed <- unix.Close(fd) }()
	waitFor(t, time.Minute, "the mount says it keeps the journal for the server's return", func() bool {
		return strings.Contains(m.log.String(), "replayed once the server is back")
	})
	select {
	case err := <-closed:
		t.Fatalf("close returned while the servers were down: %v", err)
	default:
	}
	up.Restart()
	if err := fusetest.Within("close after the servers are back", 2*time.Minute, func() error { return <-closed }); err != nil {
		t.Fatalf("close: %v", err)
	}
	out, err := exec.Command("curl", "-sSf", "-L", up.EP.HTTP+"/j/f").Output()
	if err != nil || !bytes.Equal(out, want) {
		t.Fatalf("curl GET after close succeeded: %d bytes (%v), want the %d written", len(out), err, len(want))
	}
}

// TestListingCacheInvalidated: a mount answers lookups — negative ones
// included — and attributes from the directory listing it holds with
// its lease, without asking the server; a file created and an
// attribute changed elsewhere (curl, kaon chmod) must not be hidden by
// that cache: the name is found and the new mode shown, in the daemon
// and in the kernel, long before the lease (300 s) ends.
func TestListingCacheInvalidated(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/neg")
	put := func(name, body string) {
		t.Helper()
		src := filepath.Join(t.TempDir(), name)
		os.WriteFile(src, []byte(body), 0o644)
		if out, err := exec.Command("curl", "-sSf", "-L", "-T", src, up.EP.HTTP+"/neg/"+name).CombinedOutput(); err != nil {
			t.Fatalf("curl PUT %s: %v\n%s", name, err, out)
		}
	}
	put("y", "y")
	m := newMount(t, up.EP.HTTP, "/neg", "")
	px, py := filepath.Join(m.mp, "x"), filepath.Join(m.mp, "y")
	if ents, err := os.ReadDir(m.mp); err != nil || len(ents) != 1 {
		t.Fatalf("listing before the changes: %v, %v", ents, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(px, &st); err != syscall.ENOENT {
		t.Fatalf("stat of x before its create: %v, want ENOENT", err)
	}
	if err := syscall.Stat(py, &st); err != nil || st.Mode&0o777 == 0o600 {
		t.Fatalf("stat of y before its chmod: mode %o, %v", st.Mode&0o777, err)
	}
	// The lookups above were the cache's (the test is about that cache).
	stats := make([]byte, 1<<16)
	n, err := unix.Getxattr(m.mp, "kaon.stats", stats)
	if err != nil {
		t.Fatalf("kaon.stats: %v", err)
	}
	for _, c := range []string{`"negative_cached"`, `"lookup_cached"`} {
		if !strings.Contains(string(stats[:n]), c) {
			t.Fatalf("the mount answered no lookup from its listing (%s not counted):\n%s", c, stats[:n])
		}
	}

	put("x", "from curl")
	up.MustKaon("chmod", "600", "/neg/y")
	waitFor(t, visible, "the mount finds x, created with curl after a cached negative lookup", func() bool {
		return readFile(px) == "from curl"
	})
	waitFor(t, visible, "the mount shows y's mode changed with kaon chmod after its attributes were cached", func() bool {
		return syscall.Stat(py, &st) == nil && st.Mode&0o777 == 0o600
	})
	waitFor(t, visible, "the mount lists x", func() bool {
		ents, _ := os.ReadDir(m.mp)
		return len(ents) == 2
	})
}

// Package metafs_test mounts `kaon metafs` for real (root, /dev/fuse,
// fusermount3) and checks every metadata answer against the tree below.
package metafs_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/fusetest"
	"golang.org/x/sys/unix"
)

var kaonBin string

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..")
	tmp, err := os.MkdirTemp("", "kaon-metafs-it")
	if err != nil {
		panic(err)
	}
	kaonBin = filepath.Join(tmp, "kaon")
	cmd := exec.Command("go", "build", "-o", kaonBin, "./cmd/kaon")
	cmd.Dir = repo
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building kaon:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func kaon(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(kaonBin, args...).CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func index(t *testing.T, dir, file string) {
	t.Helper()
	out, code := kaon(t, "metafs", "index", dir, "-o", file)
	if code != 0 || !strings.Contains(out, "entries") {
		t.Fatalf("index: code %d: %s", code, out)
	}
}

// daemon is a running `kaon metafs mount`.
type daemon struct {
	cmd   *exec.Cmd
	mnt   string
	lines chan string
	mu    sync.Mutex
	out   bytes.Buffer
	done  chan struct{}
}

func (d *daemon) output() string { d.mu.Lock(); defer d.mu.Unlock(); return d.out.String() }

// waitFor waits until the daemon prints a line containing s, and returns
// that line.
func (d *daemon) waitFor(t *testing.T, s string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-d.lines:
			if !ok {
				t.Fatalf("daemon exited before printing %q:\n%s", s, d.output())
			}
			if strings.Contains(l, s) {
				return l
			}
		case <-timeout:
			t.Fatalf("timeout (30s) waiting for the daemon to print %q:\n%s", s, d.output())
		}
	}
}

func startMount(t *testing.T, args ...string) *daemon {
	t.Helper()
	mnt := args[len(args)-1]
	cmd := exec.Command(kaonBin, append([]string{"metafs", "mount"}, args...)...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	d := &daemon{cmd: cmd, mnt: mnt, lines: make(chan string, 100), done: make(chan struct{})}
	must(t, cmd.Start())
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			d.mu.Lock()
			d.out.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			select {
			case d.lines <- sc.Text():
			default:
			}
		}
		close(d.lines)
	}()
	// done once the daemon exited and its last line is in d.out.
	go func() { cmd.Wait(); pw.Close(); <-scanned; close(d.done) }()
	t.Cleanup(func() { d.stop(t) })
	return d
}

func mount(t *testing.T, args ...string) *daemon {
	t.Helper()
	d := startMount(t, args...)
	d.waitFor(t, "kaon metafs: serving")
	return d
}

// stop unmounts via SIGTERM and returns the daemon's final output.
func (d *daemon) stop(t *testing.T) string {
	defer func() {
		var sf unix.Statfs_t
		if unix.Statfs(d.mnt, &sf) != nil || sf.Type == 0x65735546 {
			exec.Command("fusermount3", "-u", "-z", d.mnt).Run() // daemon died: do not leak the mount
		}
	}()
	select {
	case <-d.done:
		return d.output()
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		exec.Command("fusermount3", "-u", "-z", d.mnt).Run()
		d.cmd.Process.Kill()
		<-d.done
		t.Errorf("daemon did not exit on SIGTERM:\n%s", d.output())
	}
	return d.output()
}

func lowerOpens(t *testing.T, out string) string {
	t.Helper()
	i := strings.LastIndex(out, "below: ")
	if i < 0 {
		t.Fatalf("no statistics in daemon output:\n%s", out)
	}
	s := out[i+len("below: "):]
	return s[:strings.Index(s, " reads")]
}

func TestMetadataServedFromMemoryOnlyOpensGoDown(t *testing.T) {
	lower := fusetest.MakeTree(t)
	idx := filepath.Join(t.TempDir(), "sw.metafs")
	index(t, lower, idx)
	mnt := t.TempDir()
	mount(t, "--index", idx, lower, mnt)
	// Pull the rug below the mount: metadata is still answered from the
	// index, while opens (which do go down) see the change.
	must(t, os.Rename(filepath.Join(lower, "share"), filepath.Join(lower, "share.moved")))
	must(t, os.Remove(filepath.Join(lower, "top")))
	fi, err := os.Stat(filepath.Join(mnt, "share/doc/pkg/ünïcödé"))
	if err != nil || fi.Size() != 7 {
		t.Fatalf("stat from index: %v %v", fi, err)
	}
	names, err := fusetest.Listing(filepath.Join(mnt, "share/doc/pkg"))
	if err != nil || len(names) != 2 {
		t.Fatalf("readdir from index: %v %v", names, err)
	}
	if _, err := os.ReadFile(filepath.Join(mnt, "share/doc/pkg/ünïcödé")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("open of a file gone below: %v, want ENOENT from the lower open", err)
	}
	data, err := os.ReadFile(filepath.Join(mnt, "lib/libfoo.so"))
	if err != nil || len(data) != 70000 {
		t.Fatalf("read through symlinks: %d bytes, %v", len(data), err)
	}
}

func TestStaleIndexRefused(t *testing.T) {
	lower := fusetest.MakeTree(t)
	idx := filepath.Join(t.TempDir(), "sw.metafs")
	index(t, lower, idx)
	must(t, os.WriteFile(filepath.Join(lower, "lib/python3/site/added.py"), nil, 0o644))
	mnt := t.TempDir()
	out, code := kaon(t, "metafs", "mount", "--index", idx, lower, mnt)
	if code == 0 || !strings.Contains(out, "stale") || !strings.Contains(out, "--force") || !strings.Contains(out, lower) {
		t.Fatalf("stale mount: code %d, output %q", code, out)
	}
	if vout, vcode := kaon(t, "metafs", "verify", "--index", idx, lower); vcode != 1 || !strings.Contains(vout, "added") ||
		!strings.Contains(vout, "lib/python3/site/added.py") {
		t.Fatalf("verify: code %d: %s", vcode, vout)
	}
	// --force serves the old view knowingly.
	mount(t, "--force", "--index", idx, lower, mnt)
	if _, err := os.Stat(filepath.Join(mnt, "lib/python3/site/added.py")); !os.IsNotExist(err) {
		t.Fatalf("forced stale mount shows an entry not in the index: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "lib/python3/site/mod.py")); err != nil {
		t.Fatal(err)
	}
	// A fresh index verifies clean.
	index(t, lower, idx)
	if vout, vcode := kaon(t, "metafs", "verify", "--index", idx, lower); vcode != 0 || !strings.Contains(vout, "matches") {
		t.Fatalf("verify fresh: code %d: %s", vcode, vout)
	}
}

func TestCorruptIndexRefused(t *testing.T) {
	lower := fusetest.MakeTree(t)
	idx := filepath.Join(t.TempDir(), "sw.metafs")
	index(t, lower, idx)
	data, err := os.ReadFile(idx)
	must(t, err)
	data[len(data)/2] ^= 0x10
	must(t, os.WriteFile(idx, data, 0o644))
	mnt := t.TempDir()
	out, code := kaon(t, "metafs", "mount", "--index", idx, lower, mnt)
	if code == 0 || !strings.Contains(out, "checksum mismatch") || !strings.Contains(out, idx) {
		t.Fatalf("corrupt index: code %d, output %q", code, out)
	}
	// even --force does not serve a damaged index
	out, code = kaon(t, "metafs", "mount", "--force", "--index", idx, lower, mnt)
	if code == 0 || !strings.Contains(out, "corrupted") {
		t.Fatalf("corrupt index with --force: code %d, output %q", code, out)
	}
	if _, code := kaon(t, "metafs", "verify", "--index", idx, lower); code != 2 {
		t.Fatalf("verify of a corrupt index: code %d, want 2", code)
	}
}

func TestReloadWhileMounted(t *testing.T) {
	lower := fusetest.MakeTree(t)
	idx := filepath.Join(t.TempDir(), "sw.metafs")
	index(t, lower, idx)
	mnt := t.TempDir()
	d := mount(t, "--index", idx, lower, mnt)
	site := filepath.Join(mnt, "lib/python3/site")
	// Prime the kernel caches: positive, negative, and listings.
	if _, err := os.Stat(filepath.Join(site, "mod.py")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(site, "new.py"), filepath.Join(mnt, "newtop")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s before reload: %v", p, err)
		}
	}
	before, _ := fusetest.Listing(site)
	rootBefore, _ := fusetest.Listing(mnt)

	// Change the tree, rebuild the index, and reload with SIGHUP.
	must(t, os.WriteFile(filepath.Join(lower, "lib/python3/site/new.py"), []byte("new"), 0o644))
	must(t, os.WriteFile(filepath.Join(lower, "newtop"), nil, 0o644))
	must(t, os.Remove(filepath.Join(lower, "lib/python3/site/mod.py")))
	// A stale index is refused on reload too, and the old one stays served.
	must(t, d.cmd.Process.Signal(syscall.SIGHUP))
	d.waitFor(t, "reload refused")
	index(t, lower, idx)
	must(t, d.cmd.Process.Signal(syscall.SIGHUP))
	d.waitFor(t, "kaon metafs: reloaded")

	if data, err := os.ReadFile(filepath.Join(site, "new.py")); err != nil || string(data) != "new" {
		t.Fatalf("new file after reload: %q %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "newtop")); err != nil {
		t.Fatalf("new top-level file after reload (cached miss not invalidated): %v", err)
	}
	if _, err := os.Stat(filepath.Join(site, "mod.py")); !os.IsNotExist(err) {
		t.Fatalf("removed file still visible after reload: %v", err)
	}
	after, _ := fusetest.Listing(site)
	rootAfter, _ := fusetest.Listing(mnt)
	if len(after) != len(before) || strings.Join(after, ",") == strings.Join(before, ",") || len(rootAfter) != len(rootBefore)+1 {
		t.Fatalf("listings after reload: %v -> %v, root %d -> %d", before, after, len(rootBefore), len(rootAfter))
	}
	fusetest.CompareTree(t, lower, mnt, fusetest.Caps{Xattrs: true}) // this test read data: lower atimes moved
	if !strings.Contains(d.stop(t), "reloads=1") {
		t.Fatalf("daemon did not count one reload:\n%s", d.output())
	}
}

func TestMountOverDirItself(t *testing.T) {
	lower := fusetest.MakeTree(t)
	idx := filepath.Join(t.TempDir(), "sw.metafs")
	index(t, lower, idx)
	want, err := os.ReadFile(filepath.Join(lower, "lib/libfoo.so.1.2"))
	must(t, err)
	d := mount(t, "--index", idx, lower)
	var sf unix.Statfs_t
	must(t, unix.Statfs(lower, &sf))
	if sf.Type != 0x65735546 {
		t.Fatalf("%s is not covered by the FUSE mount (statfs type %x)", lower, sf.Type)
	}
	// Same paths keep working; data comes from the directory below.
	got, err := os.ReadFile(filepath.Join(lower, "lib/libfoo.so"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read through mount over itself: %d bytes, %v", len(got), err)
	}
	if err := os.WriteFile(filepath.Join(lower, "x"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write over the covered dir: %v", err)
	}
	if got := lowerOpens(t, d.stop(t)); got != "opens=1" {
		t.Fatalf("lower opens %s, want exactly the one data open", got)
	}
	must(t, unix.Statfs(lower, &sf))
	if sf.Type == 0x65735546 {
		t.Fatal("still mounted after SIGTERM")
	}
}

// TestCrashedDaemonLeavesStaleMount: a FUSE-mode daemon killed with
// SIGKILL leaves a dead mount; the next mount names it (and the way out)
// instead of failing obscurely, --clean-stale detaches it and mounts over,
// and the new daemon reports per-operation statistics on SIGUSR1.
func TestCrashedDaemonLeavesStaleMount(t *testing.T) {
	lower := fusetest.MakeTree(t)
	idx := filepath.Join(t.TempDir(), "sw.metafs")
	index(t, lower, idx)
	mnt := t.TempDir()
	d := mount(t, "--index", idx, lower, mnt)
	must(t, d.cmd.Process.Kill())
	within(t, "daemon exit after SIGKILL", func() { <-d.done })
	var sf unix.Statfs_t
	if err := unix.Statfs(mnt, &sf); err != unix.ENOTCONN {
		t.Fatalf("statfs after SIGKILL: %v, want ENOTCONN (a stale mount)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kaonBin, "metafs", "mount", "--index", idx, lower, mnt).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mount over a stale mount still running after 30s (mounted on top of the dead mount?): %s", out)
	}
	if err == nil || !strings.Contains(string(out), "stale FUSE mount") || !strings.Contains(string(out), "--clean-stale") {
		t.Fatalf("mount over a stale mount: %v: %s", err, out)
	}
	d = mount(t, "--clean-stale", "--index", idx, lower, mnt)
	want, err := os.ReadFile(filepath.Join(lower, "bin/tool"))
	must(t, err)
	if got, err := os.ReadFile(filepath.Join(mnt, "bin/tool")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read after mounting over the cleaned stale mount: %d bytes, %v", len(got), err)
	}
	must(t, d.cmd.Process.Signal(syscall.SIGUSR1))
	line := d.waitFor(t, "kaon metafs: up ")
	for _, w := range []string{"lookup ", "open 1 ", "p99 ", "lower_opens 1"} {
		if !strings.Contains(line, w) {
			t.Errorf("statistics line lacks %q: %s", w, line)
		}
	}
}

// TestLowerCallsSeenByStrace checks, from outside the daemon, which system
// calls reach the tree below: strace on the daemon (all threads, fds shown
// as paths) during a full metadata walk by several concurrent walkers sees
// none; reading files from several processes at once costs one lower open
// per distinct file.
func TestLowerCallsSeenByStrace(t *testing.T) {
	lower := fusetest.MakeTree(t)
	idx := filepath.Join(t.TempDir(), "sw.metafs")
	index(t, lower, idx)
	mnt := t.TempDir()
	d := mount(t, "--no-passthrough", "--index", idx, lower, mnt)

	trace := func(work func()) map[string]int {
		t.Helper()
		log := filepath.Join(t.TempDir(), "strace.log")
		st := exec.Command("strace", "-f", "-qq", "-y", "-e", "trace=%file,%desc", "-p", fmt.Sprint(d.cmd.Process.Pid), "-o", log)
		must(t, st.Start())
		time.Sleep(700 * time.Millisecond) // attach to every thread
		work()
		time.Sleep(200 * time.Millisecond)
		st.Process.Signal(syscall.SIGINT)
		st.Wait()
		data, err := os.ReadFile(log)
		must(t, err)
		calls := map[string]int{}
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "resumed>") || strings.Contains(l, "</dev/fuse>") || !strings.Contains(l, lower) {
				continue
			}
			f := strings.Fields(l)
			if len(f) > 1 {
				calls[f[1][:strings.IndexByte(f[1]+"(", '(')]]++
			}
		}
		return calls
	}

	walkers := 4
	calls := trace(func() {
		var wg sync.WaitGroup
		for w := 0; w < walkers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				filepath.WalkDir(mnt, func(p string, e os.DirEntry, err error) error {
					if err == nil {
						os.Lstat(p)
						os.Readlink(p)
						fusetest.Xattrs(p)
						os.Stat(p + ".missing")
					}
					return nil
				})
			}()
		}
		wg.Wait()
	})
	if len(calls) != 0 {
		t.Fatalf("metadata walk reached the tree below: %v", calls)
	}

	files := []string{"lib/libfoo.so", "bin/tool", "lib/python3/site/mod.py"}
	calls = trace(func() {
		var wg sync.WaitGroup
		for w := 0; w < walkers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, f := range files {
					c := exec.Command("cat", filepath.Join(mnt, f)) // separate processes
					c.Stdout = io.Discard
					if err := c.Run(); err != nil {
						t.Errorf("cat %s: %v", f, err)
					}
				}
			}()
		}
		wg.Wait()
	})
	if calls["openat2"]+calls["openat"] != len(files) || calls["pread64"] == 0 {
		t.Fatalf("%d processes reading %d files: lower calls %v, want %d opens and some preads", walkers, len(files), calls, len(files))
	}
}

// isMounted reports whether p is a mount point (another device than its parent).
func isMounted(p string) bool {
	var a, b unix.Stat_t
	return unix.Stat(p, &a) == nil && unix.Stat(filepath.Join(p, ".."), &b) == nil && a.Dev != b.Dev
}

// TestKernelMode serves the index from a tmpfs skeleton: metadata as in
// the tree (but for what the skeleton cannot copy), data copied in from
// below on first open byte for byte and only once, an open of a file
// changed below refused, misses answered, every write EROFS, a stale index
// refused, a second mount refused, and a new index switched in place on
// SIGHUP while a process keeps using the old one.
func TestKernelMode(t *testing.T) {
	lower := fusetest.MakeTree(t)
	idx := filepath.Join(t.TempDir(), "sw.metafs")
	index(t, lower, idx)
	mnt := t.TempDir()
	d := mount(t, "--kernel", "--index", idx, lower, mnt)
	var sf unix.Statfs_t
	must(t, unix.Statfs(mnt, &sf))
	if sf.Type != unix.TMPFS_MAGIC {
		t.Fatalf("statfs type %x: not the tmpfs skeleton", sf.Type)
	}
	if n := fusetest.CompareTree(t, lower, mnt, fusetest.Caps{Xattrs: true, OwnInodes: true}); n < 300 {
		t.Fatalf("compared only %d entries", n)
	}
	read := []string{"bin/tool", "lib/libfoo.so", "top", "bin/hardlink", "share/doc/pkg/ünïcödé", "share/doc/pkg/README with space"}
	for round := 0; round < 2; round++ {
		for _, p := range read {
			want, err := os.ReadFile(filepath.Join(lower, p))
			must(t, err)
			if got, err := os.ReadFile(filepath.Join(mnt, p)); err != nil || !bytes.Equal(got, want) {
				t.Errorf("read %s: %d bytes, %v; want %d bytes", p, len(got), err, len(want))
			}
		}
	}
	// Filled once each: bin/tool, libfoo.so.1.2 (via two symlinks), the
	// top/bin/hardlink inode, ünïcödé; the empty file needs nothing.
	d.cmd.Process.Signal(syscall.SIGUSR1)
	d.waitFor(t, "files filled")
	if out := d.output(); !strings.Contains(out, "4 files filled from the tree below (75008 bytes), 0 opens refused") {
		t.Fatalf("fills after reading %d names twice:\n%s", len(read), out)
	}
	var a, b unix.Stat_t
	must(t, unix.Lstat(filepath.Join(mnt, "top"), &a))
	must(t, unix.Lstat(filepath.Join(mnt, "bin/hardlink"), &b))
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link not preserved: ino %d/%d nlink %d", a.Ino, b.Ino, a.Nlink)
	}
	for _, p := range []string{"missing", "lib/python3/site/nomod.py", "no/such/dir"} {
		if err := unix.Access(filepath.Join(mnt, p), unix.F_OK); err != unix.ENOENT {
			t.Errorf("access %s: %v, want ENOENT", p, err)
		}
	}
	fusetest.CheckReadOnly(t, lower, mnt)
	if out, code := kaon(t, "metafs", "mount", "--kernel", "--index", idx, lower, mnt); code == 0 || !strings.Contains(out, "already served") {
		t.Fatalf("second kernel mount on %s: code %d: %s", mnt, code, out)
	}

	// A file rewritten below since the index was built: its first open
	// fails (EIO, logged with the path) instead of serving other data.
	must(t, os.WriteFile(filepath.Join(lower, "private/secret"), []byte("rewritten!!!"), 0o644))
	if _, err := os.ReadFile(filepath.Join(mnt, "private/secret")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("open of a file changed below: %v, want EIO", err)
	}
	if line := d.waitFor(t, "private/secret refused"); !strings.Contains(line, "index: size 12") {
		t.Errorf("refusal logged without the indexed size: %s", line)
	}
	// The same size and the mtime set back: only the ctime tells.
	mod := filepath.Join(lower, "lib/python3/site/mod.py")
	var was unix.Stat_t
	must(t, unix.Stat(mod, &was))
	must(t, os.WriteFile(mod, bytes.Repeat([]byte("Z"), 42), 0o644))
	must(t, unix.UtimesNano(mod, []unix.Timespec{was.Atim, was.Mtim}))
	if data, err := os.ReadFile(filepath.Join(mnt, "lib/python3/site/mod.py")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("open of a file rewritten below with its size and mtime kept: %q %v, want EIO", data, err)
	}
	if line := d.waitFor(t, "mod.py refused"); !strings.Contains(line, "ctime ") {
		t.Errorf("refusal logged without the ctimes: %s", line)
	}

	// A process inside the old view keeps it; new lookups see the new index.
	old, err := os.Open(filepath.Join(mnt, "lib/python3/site"))
	must(t, err)
	defer old.Close()
	must(t, os.WriteFile(filepath.Join(lower, "lib/python3/site/added.py"), []byte("new"), 0o644))
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitFor(t, "reload refused")
	index(t, lower, idx)
	d.cmd.Process.Signal(syscall.SIGHUP)
	d.waitFor(t, "reloaded")
	if data, err := os.ReadFile(filepath.Join(mnt, "lib/python3/site/added.py")); err != nil || string(data) != "new" {
		t.Fatalf("new index not served after switching: %q %v", data, err)
	}
	if data, err := os.ReadFile(filepath.Join(mnt, "private/secret")); err != nil || string(data) != "rewritten!!!" {
		t.Fatalf("rewritten file after reindexing: %q %v", data, err)
	}
	if names, err := old.Readdirnames(-1); err != nil || slices.Contains(names, "added.py") || !slices.Contains(names, "mod.py") {
		t.Fatalf("old view changed under an open directory: %v %v", names, err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	if n := strings.Count(string(mi), " "+mnt+" "); n != 1 {
		t.Fatalf("%d mounts on %s after switching, want 1", n, mnt)
	}

	// kaon metafs umount stops the daemon, which detaches its mount.
	if out, code := kaon(t, "metafs", "umount", mnt); code != 0 {
		t.Fatalf("umount: code %d: %s", code, out)
	}
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		t.Fatal("daemon still running after kaon metafs umount")
	}
	if isMounted(mnt) {
		t.Fatal("still mounted after kaon metafs umount")
	}
}

// within runs f (a file system call through a mount, which hangs if the
// daemon does) and fails the test naming step if it does not return in
// time.
func within(t *testing.T, step string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("timeout (30s): %s", step)
	}
}

// cat runs cat(1) on p with a deadline and returns its stdout, stderr and
// error.
func cat(t *testing.T, p string) ([]byte, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	c := exec.CommandContext(ctx, "cat", p)
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	if ctx.Err() != nil {
		t.Fatalf("timeout (30s): cat %s", p)
	}
	return out.Bytes(), errb.String(), err
}

// TestChangedBelowRefused: in FUSE mode, with kernel passthrough and with
// pread, a file changed below since the index was built (appended to,
// rewritten with the same size and another mtime, or with the same size
// and its mtime set back, which only the ctime shows) fails to open with
// EIO and the daemon logs the path with the indexed and the found size
// and times, whether or not the file had been opened (and its lower file
// kept open) before; unchanged files still read byte for byte.
func TestChangedBelowRefused(t *testing.T) {
	for _, mode := range []struct {
		name        string
		args        []string
		passthrough string
	}{{"passthrough", nil, "passthrough=6"}, {"no-passthrough", []string{"--no-passthrough"}, "passthrough=0"}} {
		t.Run(mode.name, func(t *testing.T) {
			lower := fusetest.MakeTree(t)
			idx := filepath.Join(t.TempDir(), "sw.metafs")
			index(t, lower, idx)
			mnt := t.TempDir()
			d := mount(t, append(mode.args, "--index", idx, lower, mnt)...)

			unchanged := []string{"bin/tool", "lib/libfoo.so", "share/doc/pkg/README with space"}
			readAll := func(when string, paths ...string) {
				t.Helper()
				for _, p := range paths {
					want, err := os.ReadFile(filepath.Join(lower, p))
					must(t, err)
					got, stderr, err := cat(t, filepath.Join(mnt, p))
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("%s: cat %s: %d bytes (%v: %s), want %d bytes", when, p, len(got), err, stderr, len(want))
					}
				}
			}
			// Opened once before the change (the daemon keeps their lower
			// files open) and not.
			appended, appendedCold := "lib/python3/site/mod.py", "private/secret"
			rewritten, setBack := "share/doc/pkg/ünïcödé", "top"
			readAll("before the change", append(unchanged, appended, rewritten, setBack)...)

			type change struct {
				path            string
				size, newSize   int64
				mtime, newMtime time.Time
			}
			var changes []change
			for _, p := range []string{appended, appendedCold} {
				fi, err := os.Stat(filepath.Join(lower, p))
				must(t, err)
				f, err := os.OpenFile(filepath.Join(lower, p), os.O_WRONLY|os.O_APPEND, 0)
				must(t, err)
				_, err = f.WriteString("appended below\n")
				must(t, err)
				must(t, f.Close())
				nfi, err := os.Stat(filepath.Join(lower, p))
				must(t, err)
				changes = append(changes, change{p, fi.Size(), nfi.Size(), fi.ModTime(), nfi.ModTime()})
			}
			fi, err := os.Stat(filepath.Join(lower, rewritten))
			must(t, err)
			must(t, os.WriteFile(filepath.Join(lower, rewritten), []byte("SEVEN!!"), 0o644))
			must(t, os.Chtimes(filepath.Join(lower, rewritten), fi.ModTime(), fi.ModTime().Add(time.Second)))
			changes = append(changes, change{rewritten, fi.Size(), fi.Size(), fi.ModTime(), fi.ModTime().Add(time.Second)})
			// Same size, and the mtime put back as it was: only the ctime moved.
			var old unix.Stat_t
			must(t, unix.Stat(filepath.Join(lower, setBack), &old))
			must(t, os.WriteFile(filepath.Join(lower, setBack), []byte("X"), 0o644))
			must(t, unix.UtimesNano(filepath.Join(lower, setBack), []unix.Timespec{old.Atim, old.Mtim}))
			mt := time.Unix(old.Mtim.Unix())
			changes = append(changes, change{setBack, old.Size, old.Size, mt, mt})

			for _, c := range changes {
				p := filepath.Join(mnt, c.path)
				// The metadata is still the index's.
				var st os.FileInfo
				within(t, "stat "+p, func() { st, err = os.Stat(p) })
				if err != nil || st.Size() != c.size || !st.ModTime().Equal(c.mtime) {
					t.Fatalf("stat %s through the mount: %v %v, want the indexed size %d and mtime %v", c.path, st, err, c.size, c.mtime)
				}
				got, stderr, err := cat(t, p)
				if err == nil || len(got) != 0 || !strings.Contains(stderr, "Input/output error") {
					t.Errorf("cat %s changed below: %d bytes, %v: %q; want no data and EIO", c.path, len(got), err, stderr)
				}
				line := d.waitFor(t, p+" refused")
				for _, w := range []string{fmt.Sprintf("size %d", c.newSize), fmt.Sprintf("index: size %d", c.size),
					c.mtime.UTC().Format(time.RFC3339Nano), c.newMtime.UTC().Format(time.RFC3339Nano), "ctime "} {
					if !strings.Contains(line, w) {
						t.Errorf("log line for %s lacks %q: %s", c.path, w, line)
					}
				}
				var oerr error
				within(t, "open "+p, func() {
					fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
					if err == nil {
						unix.Close(fd)
					}
					oerr = err
				})
				if oerr != unix.EIO {
					t.Errorf("open(2) of %s changed below: %v, want EIO", c.path, oerr)
				}
			}
			readAll("after the change", unchanged...)
			out := d.stop(t)
			if !strings.Contains(out, "(refused 8)") || !strings.Contains(out, mode.passthrough) {
				t.Fatalf("daemon counters: want 8 refused opens and %s:\n%s", mode.passthrough, out)
			}
		})
	}
}

// TestKernelModeSparse: kernel mode copies a sparse file's data extents
// only (SEEK_DATA/SEEK_HOLE), so its holes stay holes in the skeleton: a
// 64 MiB file holding two 4 KiB extents reads back byte for byte but
// takes two pages of the tmpfs, and the fill counts only the data.
func TestKernelModeSparse(t *testing.T) {
	lower := filepath.Join(t.TempDir(), "sw")
	must(t, os.MkdirAll(lower, 0o755))
	const size = 64 << 20
	head, tail := bytes.Repeat([]byte("h"), 4096), bytes.Repeat([]byte("t"), 4096)
	f, err := os.Create(filepath.Join(lower, "sparse"))
	must(t, err)
	_, err = f.WriteAt(head, 0)
	must(t, err)
	_, err = f.WriteAt(tail, size-4096)
	must(t, err)
	must(t, f.Close())
	idx := filepath.Join(t.TempDir(), "sw.metafs")
	index(t, lower, idx)
	mnt := t.TempDir()
	d := mount(t, "--kernel", "--index", idx, lower, mnt)

	want, err := os.ReadFile(filepath.Join(lower, "sparse"))
	must(t, err)
	got, err := os.ReadFile(filepath.Join(mnt, "sparse"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read of the sparse file through the mount: %d bytes, %v; want its %d bytes", len(got), err, len(want))
	}
	var st unix.Stat_t
	must(t, unix.Stat(filepath.Join(mnt, "sparse"), &st))
	if st.Size != size || st.Blocks*512 > 64<<10 {
		t.Errorf("skeleton file after the fill: size %d, %d bytes allocated; want %d bytes with its holes kept (8 KiB of data)", st.Size, st.Blocks*512, size)
	}
	must(t, d.cmd.Process.Signal(syscall.SIGUSR1))
	if line := d.waitFor(t, "files filled"); !strings.Contains(line, "1 files filled from the tree below (8192 bytes)") {
		t.Errorf("fill of a file with 8 KiB of data: %s", line)
	}
}

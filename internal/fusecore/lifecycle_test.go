package fusecore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The shared lifecycle, driven with two tiny file systems holding one
// file, "hello": rawHello speaks the raw protocol (like metafs),
// nodeHello is a go-fuse node tree (like cfsd). Both count their
// operations in a Stats.

var helloData = []byte("hello, fusecore\n")

type rawHello struct {
	fuse.RawFileSystem
	lookup, read *OpStats
}

func newRawHello(s *Stats) *rawHello {
	return &rawHello{RawFileSystem: fuse.NewDefaultRawFileSystem(), lookup: s.Op("lookup"), read: s.Op("read")}
}

func (h *rawHello) attr(id uint64, a *fuse.Attr) bool {
	switch id {
	case 1:
		a.Ino, a.Mode, a.Nlink = 1, syscall.S_IFDIR|0o755, 2
	case 2:
		a.Ino, a.Mode, a.Nlink, a.Size = 2, syscall.S_IFREG|0o644, 1, uint64(len(helloData))
	default:
		return false
	}
	return true
}

func (h *rawHello) Lookup(_ <-chan struct{}, in *fuse.InHeader, name string, out *fuse.EntryOut) (st fuse.Status) {
	defer h.lookup.DoneStatus(time.Now(), &st)
	if in.NodeId != 1 || name != "hello" {
		return fuse.ENOENT
	}
	out.NodeId = 2
	h.attr(2, &out.Attr)
	return fuse.OK
}

func (h *rawHello) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if !h.attr(in.NodeId, &out.Attr) {
		return fuse.ENOENT
	}
	return fuse.OK
}

func (h *rawHello) Open(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.OK
}

func (h *rawHello) StatFs(_ <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	return fuse.OK
}

func (h *rawHello) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (_ fuse.ReadResult, st fuse.Status) {
	defer h.read.DoneStatus(time.Now(), &st)
	if in.Offset >= uint64(len(helloData)) {
		return fuse.ReadResultData(nil), fuse.OK
	}
	return fuse.ReadResultData(helloData[in.Offset:]), fuse.OK
}

type nodeHello struct {
	fs.Inode
	stats *Stats
}

func (n *nodeHello) OnAdd(ctx context.Context) {
	f := &helloFile{read: n.stats.Op("read")}
	n.AddChild("hello", n.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG}), false)
}

func (n *nodeHello) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	defer n.stats.Op("lookup").Done(time.Now(), &errno)
	if ch := n.GetChild(name); ch != nil {
		out.Mode, out.Size = syscall.S_IFREG|0o644, uint64(len(helloData))
		return ch, 0
	}
	return nil, syscall.ENOENT
}

type helloFile struct {
	fs.Inode
	read *OpStats
}

func (f *helloFile) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode, out.Size = syscall.S_IFREG|0o644, uint64(len(helloData))
	return 0
}

func (f *helloFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, 0, 0
}

func (f *helloFile) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (_ fuse.ReadResult, errno syscall.Errno) {
	defer f.read.Done(time.Now(), &errno)
	return fuse.ReadResultData(helloData[min(off, int64(len(helloData))):]), 0
}

var (
	_ = (fs.NodeLookuper)((*nodeHello)(nil))
	_ = (fs.NodeOnAdder)((*nodeHello)(nil))
	_ = (fs.NodeReader)((*helloFile)(nil))
)

// cleanMount makes sure nothing stays mounted on mp after the test.
func cleanMount(t *testing.T, mp string) {
	t.Cleanup(func() {
		if isFuseMount(mp) || IsStale(mp) {
			LazyUnmount(mp)
		}
	})
}

// mountHello mounts one of the two file systems on mp.
func mountHello(kind, mp string, s *Stats) (*Mount, error) {
	cfg := Config{Mountpoint: mp, Name: "fusecore-test", Stats: s}
	if kind == "raw" {
		return NewRaw(newRawHello(s), cfg)
	}
	return New(&nodeHello{stats: s}, cfg)
}

// syncBuffer collects a daemon's messages.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitOut waits until the daemon printed want.
func waitOut(t *testing.T, out *syncBuffer, want, step string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: daemon did not print %q within 10s:\n%s", step, want, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitRun waits for Run to return.
func waitRun(t *testing.T, done <-chan error, step string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: Run did not return within 20s", step)
		return nil
	}
}

func isFuseMount(mp string) bool {
	var sf unix.Statfs_t
	return unix.Statfs(mp, &sf) == nil && sf.Type == 0x65735546 // FUSE_SUPER_MAGIC
}

// The test process serves its own mounts, so it reads their files with
// plain system calls: os.Open would add the file to the runtime's epoll,
// whose epoll_ctl asks the daemon (FUSE POLL) while holding its P, and a
// garbage collection waiting for that P deadlocks with the daemon.
// (go-fuse's WaitMount pokes a POLL at mount time for this; fusecore does
// not, since a daemon never opens files on its own mount.)
func openHello(t *testing.T, mp string) int {
	t.Helper()
	fd, err := unix.Open(filepath.Join(mp, "hello"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	must(t, err)
	return fd
}

func readHello(t *testing.T, mp string) {
	t.Helper()
	fd := openHello(t, mp)
	defer unix.Close(fd)
	buf := make([]byte, 100)
	if n, err := unix.Read(fd, buf); err != nil || !bytes.Equal(buf[:n], helloData) {
		t.Fatalf("read %s/hello: %q, %v", mp, buf[:n], err)
	}
}

// TestDaemonLifecycle runs a raw file system and a node tree through
// the same daemon life: Run mounts and serves, the operations are
// counted, SIGUSR1 prints the statistics, SIGHUP reloads (a refused
// reload keeps serving), SIGTERM on a busy mount detaches it lazily and
// Run returns once its last user is gone, leaving nothing mounted.
func TestDaemonLifecycle(t *testing.T) {
	if !isRoot {
		t.Skip("needs root")
	}
	for _, kind := range []string{"raw", "node"} {
		t.Run(kind, func(t *testing.T) {
			mp := t.TempDir()
			cleanMount(t, mp)
			stats := NewStats()
			out := &syncBuffer{}
			reloads := 0
			d := &Daemon{Name: "test-" + kind, Mountpoint: mp, Foreground: true, Out: out,
				Reload: func() error {
					reloads++
					if reloads == 1 {
						return errors.New("index missing")
					}
					fmt.Fprintln(out, "reloaded")
					return nil
				}}
			done := make(chan error, 1)
			go func() {
				done <- d.Run(func() (Served, error) { return mountHello(kind, mp, stats) })
			}()
			for deadline := time.Now().Add(10 * time.Second); !isFuseMount(mp); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("mount: %s not mounted within 10s:\n%s", mp, out)
				}
			}
			readHello(t, mp)
			if _, err := os.Stat(filepath.Join(mp, "nothing")); !os.IsNotExist(err) {
				t.Fatalf("stat of a missing name: %v", err)
			}
			s := stats.Snapshot()
			if s.Ops["read"].Count < 1 || s.Ops["lookup"].Count < 2 || s.Ops["lookup"].Errors < 1 {
				t.Errorf("operations not counted: %+v", s.Ops)
			}

			must(t, syscall.Kill(os.Getpid(), syscall.SIGUSR1))
			waitOut(t, out, "test-"+kind+": up ", "SIGUSR1")
			if line := out.String(); !strings.Contains(line, "lookup ") || !strings.Contains(line, "failed) p50 ") || !strings.Contains(line, "read ") {
				t.Errorf("summary lacks the operations:\n%s", line)
			}

			must(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
			waitOut(t, out, "reload refused: index missing", "refused reload")
			readHello(t, mp)
			must(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
			waitOut(t, out, "reloaded", "reload")
			readHello(t, mp)

			// Busy: the open file keeps the mount until it is closed.
			fd := openHello(t, mp)
			must(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
			waitOut(t, out, "detached lazily", "busy unmount")
			select {
			case err := <-done:
				t.Fatalf("Run returned (%v) while a file was still open on the detached mount", err)
			default:
			}
			b := make([]byte, 5)
			if n, err := unix.Read(fd, b); err != nil || string(b[:max(n, 0)]) != "hello" {
				t.Errorf("read through the detached mount: %q %v", b[:max(n, 0)], err)
			}
			unix.Close(fd)
			if err := waitRun(t, done, "exit after the last user closed"); err != nil {
				t.Errorf("Run: %v", err)
			}
			if isFuseMount(mp) || IsStale(mp) {
				t.Errorf("%s still mounted after Run returned", mp)
			}
			waitOut(t, out, mp+" unmounted", "exit")
			if !strings.Contains(out.String()[strings.Index(out.String(), " unmounted"):], "test-"+kind+": up ") {
				t.Errorf("no summary at exit:\n%s", out)
			}
		})
	}
}

// abort kills mp's FUSE connection as a crashed daemon would: the
// mount stays, every access to it fails with ENOTCONN.
func abort(t *testing.T, mp string) {
	t.Helper()
	ctl := "/sys/fs/fuse/connections"
	if ents, _ := os.ReadDir(ctl); len(ents) == 0 {
		if err := unix.Mount("none", ctl, "fusectl", 0, ""); err != nil && err != unix.EBUSY {
			t.Fatalf("mounting fusectl: %v", err)
		}
	}
	var st unix.Stat_t
	must(t, unix.Stat(mp, &st))
	conn := unix.Major(st.Dev)<<20 | unix.Minor(st.Dev) // the kernel's dev_t
	must(t, os.WriteFile(fmt.Sprintf("%s/%d/abort", ctl, conn), []byte("1"), 0))
}

// TestStaleMount: a mount whose daemon died is reported (ErrStale, the
// mount function is not called) and, with CleanStale, detached and
// mounted over.
func TestStaleMount(t *testing.T) {
	if !isRoot {
		t.Skip("needs root")
	}
	mp := t.TempDir()
	cleanMount(t, mp)
	m, err := mountHello("raw", mp, NewStats())
	must(t, err)
	readHello(t, mp)
	abort(t, mp)
	m.Wait()
	if !IsStale(mp) {
		t.Fatalf("%s not stale after aborting its connection", mp)
	}
	called := false
	d := &Daemon{Name: "test", Mountpoint: mp, Foreground: true, Out: &syncBuffer{}}
	err = d.Run(func() (Served, error) { called = true; return nil, errors.New("not reached") })
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "--clean-stale") || called {
		t.Fatalf("Run on a stale mount: %v (mount called: %v), want ErrStale", err, called)
	}

	d.CleanStale = true
	done := make(chan error, 1)
	mounted := make(chan struct{})
	go func() {
		done <- d.Run(func() (Served, error) {
			defer close(mounted)
			return mountHello("node", mp, NewStats())
		})
	}()
	select {
	case <-mounted:
	case <-time.After(10 * time.Second):
		t.Fatal("mount over the cleaned stale mount: not done within 10s")
	}
	readHello(t, mp)
	must(t, syscall.Kill(os.Getpid(), syscall.SIGINT))
	if err := waitRun(t, done, "unmount on SIGINT"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if isFuseMount(mp) || IsStale(mp) {
		t.Fatalf("%s still mounted", mp)
	}
}

// TestLiveMountRefused: a mountpoint a live mount of the same kind
// serves is refused (mounting on top would hide it from new lookups
// while its daemon serves whoever is inside), with or without
// CleanStale, for both kinds of file system; the first mount keeps
// serving and nothing is stacked on it.
func TestLiveMountRefused(t *testing.T) {
	if !isRoot {
		t.Skip("needs root")
	}
	for _, kind := range []string{"raw", "node"} {
		t.Run(kind, func(t *testing.T) {
			mp := t.TempDir()
			cleanMount(t, mp)
			m, err := mountHello(kind, mp, NewStats())
			must(t, err)
			defer func() {
				if err := m.Unmount(); err != nil {
					t.Errorf("unmount: %v", err)
				}
				m.Wait()
			}()
			for _, clean := range []bool{false, true} {
				cfg := Config{Mountpoint: mp, Name: "fusecore-test", CleanStale: clean}
				var second *Mount
				if kind == "raw" {
					second, err = NewRaw(newRawHello(NewStats()), cfg)
				} else {
					second, err = New(&nodeHello{stats: NewStats()}, cfg)
				}
				if err == nil {
					second.Unmount()
					second.Wait()
					t.Fatalf("second mount (CleanStale %v) on a live mount accepted", clean)
				}
				if !strings.Contains(err.Error(), "already served by a running fusecore-test") {
					t.Errorf("second mount (CleanStale %v): %v, want 'already served'", clean, err)
				}
			}
			mi, err := os.ReadFile("/proc/self/mountinfo")
			must(t, err)
			if n := strings.Count(string(mi), " "+mp+" "); n != 1 {
				t.Errorf("%d mounts on %s, want 1", n, mp)
			}
			readHello(t, mp)
		})
	}
}

// TestDaemonize: in the background the parent's Run returns only once
// the child has mounted, or with the child's mount error; the child
// serves until unmounted from outside. The child is this test binary,
// re-executed; TestMain gives it the daemon's role (daemonChild).
func TestDaemonize(t *testing.T) {
	if !isRoot {
		t.Skip("needs root")
	}
	mp := t.TempDir()
	cleanMount(t, mp)
	logs := t.TempDir()
	t.Setenv("FUSECORE_TEST_MP", mp)
	d := &Daemon{Name: "test", Mountpoint: mp, LogPath: filepath.Join(logs, "failing.log")}
	parentMount := func() (Served, error) { return nil, errors.New("the parent called mount") }

	t.Setenv("FUSECORE_TEST_FAIL", "1")
	err := d.Run(parentMount)
	if err == nil || !strings.Contains(err.Error(), "backend gone (test)") {
		t.Fatalf("parent of a failing daemon: %v, want the child's mount error", err)
	}
	if isFuseMount(mp) {
		t.Fatal("mounted although the daemon failed")
	}

	t.Setenv("FUSECORE_TEST_FAIL", "")
	logPath := filepath.Join(logs, "daemon.log")
	d.LogPath = logPath
	if err := d.Run(parentMount); err != nil {
		t.Fatalf("parent: %v\n%s", err, readLog(logPath))
	}
	readHello(t, mp) // served by the child
	must(t, Unmount(mp))
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(readLog(logPath), "daemon exited"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not exit within 10s after unmount:\n%s", readLog(logPath))
		}
	}
	if log := readLog(logPath); !strings.Contains(log, mp+" unmounted") || !strings.Contains(log, "test: up ") {
		t.Errorf("daemon log lacks the unmount and summary:\n%s", log)
	}
	if isFuseMount(mp) || IsStale(mp) {
		t.Fatalf("%s still mounted", mp)
	}
}

func readLog(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// daemonChild is the background half of TestDaemonize.
func daemonChild() int {
	mp := os.Getenv("FUSECORE_TEST_MP")
	d := &Daemon{Name: "test", Mountpoint: mp}
	err := d.Run(func() (Served, error) {
		if os.Getenv("FUSECORE_TEST_FAIL") == "1" {
			return nil, errors.New("backend gone (test)")
		}
		return mountHello("raw", mp, NewStats())
	})
	fmt.Fprintf(os.Stderr, "daemon exited: %v\n", err)
	if err != nil {
		return 1
	}
	return 0
}

func TestMain(m *testing.M) {
	if os.Getenv(daemonEnv) == "1" {
		os.Exit(daemonChild())
	}
	os.Exit(m.Run())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

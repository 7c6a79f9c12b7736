// Package cfsd_test mounts `kaon cfsd` for real (root, fuse3) and checks
// POSIX behaviour against the plain backend, non-root access rules,
// quota, the recycle bin, the control tree and daemon crashes/restarts.
package cfsd_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var kaonBin string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "integration/cfsd needs root (FUSE mounts, setuid children)")
		os.Exit(1)
	}
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..")
	tmp, err := os.MkdirTemp("", "kaon-cfsd-bin")
	if err != nil {
		panic(err)
	}
	kaonBin = filepath.Join(tmp, "kaon")
	cmd := exec.Command("go", "build", "-o", kaonBin, "./cmd/kaon")
	cmd.Dir = repo
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building kaon:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// mount is one foreground `kaon cfsd mount` process.
type mount struct {
	t       *testing.T
	mp      string
	backend string
	args    []string
	wrap    []string // command line the daemon runs under (strace), if any
	cmd     *exec.Cmd
	log     *bytes.Buffer
	done    chan error
	dev     uint64 // the mount's device number (userspace encoding)
}

// Deadlines of the steps that wait on a daemon or on processes using
// its mount; generous, they only turn a hang into a named failure.
const (
	upDeadline   = 60 * time.Second
	stopDeadline = 60 * time.Second
	runDeadline  = 5 * time.Minute
)

var (
	liveMu sync.Mutex
	live   = map[*mount]bool{} // mounts whose daemon may be running
)

// within runs fn with a deadline. When fn has not returned in time (a
// daemon that does not answer, a process stuck in state D on a FUSE
// request) the FUSE connections of every live mount of this test are
// aborted through fusectl, which fails the pending requests, and the
// result names the step that hung.
func within(step string, d time.Duration, fn func() error) error {
	res := make(chan error, 1)
	go func() { res <- fn() }()
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("%s: %w", step, err)
		}
		return nil
	case <-time.After(d):
	}
	aborted := abortLive()
	select {
	case <-res:
	case <-time.After(30 * time.Second):
		aborted += " (still blocked after the abort)"
	}
	return fmt.Errorf("%s: hung for %v; aborted FUSE connections %s", step, d, aborted)
}

// abortLive aborts the FUSE connection of every live mount and reports
// which.
func abortLive() string {
	liveMu.Lock()
	defer liveMu.Unlock()
	var done []string
	for m := range live {
		if m.dev == 0 {
			continue
		}
		id := fuseConn(m.dev)
		if err := abortFuse(id); err != nil {
			done = append(done, fmt.Sprintf("%s(conn %d: %v)", m.mp, id, err))
		} else {
			done = append(done, fmt.Sprintf("%s(conn %d)", m.mp, id))
		}
	}
	return "[" + strings.Join(done, " ") + "]"
}

// fuseConn is the fusectl connection number of a FUSE mount: the
// kernel's internal encoding of its device number.
func fuseConn(dev uint64) uint64 { return uint64(unix.Major(dev))<<20 | uint64(unix.Minor(dev)) }

const fusectl = "/sys/fs/fuse/connections"

func abortFuse(id uint64) error {
	if b, _ := os.ReadFile("/proc/self/mounts"); !strings.Contains(string(b), " "+fusectl+" fusectl ") {
		if err := syscall.Mount("none", fusectl, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mount fusectl: %w", err)
		}
	}
	return os.WriteFile(filepath.Join(fusectl, strconv.FormatUint(id, 10), "abort"), []byte("1"), 0)
}

// mountDev returns the device number of the topmost FUSE mount at mp
// from mountinfo (never touching the mount itself, which may hang).
func mountDev(mp string) (uint64, bool) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var dev uint64
	found := false
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 || f[4] != mp || !strings.Contains(l, " - fuse.") {
			continue
		}
		var maj, min uint32
		if _, err := fmt.Sscanf(f[2], "%d:%d", &maj, &min); err == nil {
			dev, found = unix.Mkdev(maj, min), true // the last one is on top
		}
	}
	return dev, found
}

// tempDir is world-traversable so setuid children can reach the mount.
func tempDir(t *testing.T) string {
	d := t.TempDir()
	for p := d; p != "/" && p != "."; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o011 != 0o011 {
			os.Chmod(p, st.Mode().Perm()|0o011)
		}
	}
	return d
}

func newMount(t *testing.T, backend string, extra ...string) *mount {
	t.Helper()
	d := tempDir(t)
	if backend == "" {
		backend = filepath.Join(d, "backend")
		if err := os.Mkdir(backend, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mp := filepath.Join(d, "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &mount{t: t, mp: mp, backend: backend, args: extra}
	m.start()
	t.Cleanup(m.stop)
	return m
}

func (m *mount) start() {
	m.t.Helper()
	args := append([]string{kaonBin, "cfsd", "mount", "-f", "--backend", m.backend}, m.args...)
	args = append(append(m.wrap, args...), m.mp)
	m.cmd = exec.Command(args[0], args[1:]...)
	m.log = &bytes.Buffer{}
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.done = make(chan error, 1)
	go func(c *exec.Cmd, ch chan error) { ch <- c.Wait() }(m.cmd, m.done)
	liveMu.Lock()
	live[m] = true
	liveMu.Unlock()
	// The device number is taken from mountinfo before the mount is
	// touched, so a hang from here on can be aborted (a stale mount
	// below answers ENOTCONN at once), and again once it answers, when
	// the topmost mount is ours.
	deadline := time.Now().Add(upDeadline)
	err := within("mount "+m.mp+": wait for it to come up", upDeadline+time.Second, func() error {
		for time.Now().Before(deadline) {
			liveMu.Lock()
			m.dev, _ = mountDev(m.mp)
			liveMu.Unlock()
			if _, err := os.ReadFile(filepath.Join(m.mp, ".proc", "whoami")); err == nil {
				liveMu.Lock()
				m.dev, _ = mountDev(m.mp)
				liveMu.Unlock()
				return nil
			}
			select {
			case err := <-m.done:
				m.done <- err
				return fmt.Errorf("kaon cfsd exited before mounting: %v", err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		return fmt.Errorf("not up after %v", upDeadline)
	})
	if err != nil {
		m.t.Fatalf("%v\n%s", err, m.log)
	}
}

// daemonPid is the daemon's pid (under a wrapper: its child).
func (m *mount) daemonPid() int {
	pid := m.cmd.Process.Pid
	if len(m.wrap) == 0 {
		return pid
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	f := strings.Fields(string(b))
	if len(f) != 1 {
		m.t.Fatalf("%s: daemon pid: children of the wrapper %d: %q", m.mp, pid, b)
	}
	c, _ := strconv.Atoi(f[0])
	return c
}

// ended waits for the daemon's exit and forgets it: exit is how it
// ended, err a hang.
func (m *mount) ended(step string) (exit, err error) {
	err = within(step, stopDeadline, func() error { exit = <-m.done; return nil })
	m.cmd = nil
	liveMu.Lock()
	delete(live, m)
	liveMu.Unlock()
	return exit, err
}

// stop unmounts with SIGTERM and waits for a clean exit.
func (m *mount) stop() {
	if m.cmd == nil {
		return
	}
	m.checkNoFdsOnMount()
	syscall.Kill(m.daemonPid(), syscall.SIGTERM)
	proc := m.cmd.Process
	if exit, err := m.ended("stop " + m.mp + ": daemon exit after SIGTERM"); err != nil {
		proc.Kill()
		m.t.Errorf("%v\n%s", err, m.log)
	} else if exit != nil {
		m.t.Errorf("daemon exit after SIGTERM: %v\n%s", exit, m.log)
	}
	if isMounted(m.mp) {
		m.unmount()
		m.t.Errorf("%s still mounted after SIGTERM", m.mp)
	}
}

// kill simulates a crash (SIGKILL), after checking the daemon holds
// nothing on its own mount: a killed daemon closing a file of its own
// mount waits forever for its own answer to FLUSH.
func (m *mount) kill() {
	m.checkNoFdsOnMount()
	pid := m.daemonPid()
	syscall.Kill(pid, syscall.SIGKILL)
	if _, err := m.ended(fmt.Sprintf("kill %s: exit of daemon %d after SIGKILL", m.mp, pid)); err != nil {
		m.t.Fatalf("%v\n%s", err, m.log)
	}
}

// unmount detaches the mount (a dead daemon's stale mount, say).
func (m *mount) unmount() {
	err := within("unmount "+m.mp, stopDeadline, func() error { return syscall.Unmount(m.mp, syscall.MNT_DETACH) })
	if err != nil {
		m.t.Error(err)
	}
}

// checkNoFdsOnMount asserts that no descriptor, working directory or
// root of the daemon is on its own mount.
func (m *mount) checkNoFdsOnMount() {
	m.t.Helper()
	pid := m.daemonPid()
	var bad []string
	err := within(fmt.Sprintf("list descriptors of daemon %d", pid), runDeadline, func() error {
		proc := fmt.Sprintf("/proc/%d", pid)
		ents, err := os.ReadDir(proc + "/fd")
		if os.IsNotExist(err) {
			return nil // exited already; its exit status tells why
		}
		if err != nil {
			return err
		}
		paths := []string{proc + "/cwd", proc + "/root"}
		for _, e := range ents {
			paths = append(paths, proc+"/fd/"+e.Name())
		}
		for _, p := range paths {
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil && st.Dev == m.dev {
				target, _ := os.Readlink(p)
				bad = append(bad, p+" -> "+target)
			}
		}
		return nil
	})
	if err != nil {
		m.t.Fatal(err)
	}
	if len(bad) > 0 {
		m.t.Errorf("daemon %d holds descriptors on its own mount %s: %v", pid, m.mp, bad)
	}
}

func isMounted(mp string) bool {
	b, _ := os.ReadFile("/proc/self/mounts")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && f[1] == mp {
			return true
		}
	}
	return false
}

func (m *mount) path(p ...string) string { return filepath.Join(append([]string{m.mp}, p...)...) }

func (m *mount) procRead(name string) string {
	m.t.Helper()
	b, err := os.ReadFile(m.path(".proc", name))
	if err != nil {
		m.t.Fatal(err)
	}
	return string(b)
}

func (m *mount) procWrite(name, cmd string) error {
	f, err := os.OpenFile(m.path(".proc", name), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte(cmd + "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// trackMount registers a mount made outside newMount (a daemonized
// one) so a hung step can abort it; untrack when it is gone.
func trackMount(t *testing.T, mp string) (untrack func()) {
	dev, ok := mountDev(mp)
	if !ok {
		t.Fatalf("%s: no FUSE mount in mountinfo", mp)
	}
	m := &mount{t: t, mp: mp, dev: dev}
	liveMu.Lock()
	live[m] = true
	liveMu.Unlock()
	return func() {
		liveMu.Lock()
		delete(live, m)
		liveMu.Unlock()
	}
}

// run runs a command with a deadline and returns its combined output.
func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	return runCmd(t, strings.Join(cmd.Args, " "), cmd)
}

// runCmd runs cmd with a deadline (failing the test as step if it
// hangs) and returns its combined output and exit error.
func runCmd(t *testing.T, step string, cmd *exec.Cmd) (string, error) {
	t.Helper()
	var out []byte
	var runErr error
	err := within(step, runDeadline, func() error {
		out, runErr = cmd.CombinedOutput()
		return nil
	})
	if err != nil {
		if cmd.Process != nil {
			cmd.Process.Kill()
		}
		t.Fatal(err)
	}
	return string(out), runErr
}

// asUser runs a shell script as uid/gid with supplementary groups and
// returns combined output and exit status.
func asUser(t *testing.T, uid, gid uint32, groups []uint32, dir, script string) (string, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := runCmd(t, fmt.Sprintf("uid %d in %s: sh -c %.60q", uid, dir, script), cmd)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out, code
}

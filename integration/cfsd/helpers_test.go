// Package cfsd_test mounts `kaon cfsd` for real (root, fuse3), runs the
// shared FUSE suite (integration/fusetest: POSIX behaviour as a plain
// directory's, as root and as other users) on it, and checks quota, the
// recycle bin, the control tree and daemon crashes/restarts.
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
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/fusetest"
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
	conn    *fusetest.Conn // while the daemon may be running
}

// Deadlines of the steps that wait on a daemon; generous, they only turn
// a hang into a named failure (a hung step aborts the FUSE connections
// of the mounts fusetest tracks).
const (
	upDeadline   = 60 * time.Second
	stopDeadline = 60 * time.Second
)

func newMount(t *testing.T, backend string, extra ...string) *mount {
	t.Helper()
	d := fusetest.TempDir(t)
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
	m.conn = fusetest.Track(m.mp)
	// The device number is taken from mountinfo before the mount is
	// touched, so a hang from here on can be aborted (a stale mount
	// below answers ENOTCONN at once), and again once it answers, when
	// the topmost mount is ours.
	err := fusetest.WaitUp("kaon cfsd", m.mp, upDeadline, m.done, func() bool {
		m.conn.Update()
		// Up once the daemon answers and has recorded what the
		// kernel granted (passthrough) for stats.json.
		b, err := os.ReadFile(filepath.Join(m.mp, ".proc", "stats.json"))
		if err != nil || bytes.Contains(b, []byte(`"data_path": "starting"`)) {
			return false
		}
		m.conn.Update()
		return true
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
	err = fusetest.Within(step, stopDeadline, func() error { exit = <-m.done; return nil })
	m.cmd = nil
	m.conn.Untrack()
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
	err := fusetest.Within("unmount "+m.mp, stopDeadline, func() error { return syscall.Unmount(m.mp, syscall.MNT_DETACH) })
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
	dev := m.conn.Dev()
	err := fusetest.Within(fmt.Sprintf("list descriptors of daemon %d", pid), fusetest.RunDeadline, func() error {
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
			if unix.Stat(p, &st) == nil && st.Dev == dev {
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
	if _, ok := fusetest.MountDev(mp); !ok {
		t.Fatalf("%s: no FUSE mount in mountinfo", mp)
	}
	return fusetest.Track(mp).Untrack
}

package fusetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A step through a FUSE mount hangs when its daemon does not answer: the
// calling process sits in state D on the FUSE request and no signal
// frees it. Within turns such a hang into a named failure by aborting,
// through fusectl, the FUSE connection of every mount tracked here, which
// fails the pending requests.

// RunDeadline bounds a command or a walk through a mount (Exec, AsUser);
// generous, it only turns a hang into a named failure.
const RunDeadline = 5 * time.Minute

// A Conn is a FUSE mount Within may abort, from Track until Untrack.
type Conn struct {
	mp  string
	dev uint64 // userspace encoding; 0 until the mount is seen
}

var (
	liveMu sync.Mutex
	live   = map[*Conn]bool{}
)

// Track registers the FUSE mount at mp (which may not be up yet: call
// Update once it is) so that a hung step aborts it.
func Track(mp string) *Conn {
	c := &Conn{mp: mp}
	c.Update()
	liveMu.Lock()
	live[c] = true
	liveMu.Unlock()
	return c
}

// Update reads the device number of the topmost FUSE mount at the
// connection's mountpoint from mountinfo (never touching the mount
// itself, which may hang) and reports whether there is one.
func (c *Conn) Update() bool {
	dev, ok := MountDev(c.mp)
	liveMu.Lock()
	c.dev = dev
	liveMu.Unlock()
	return ok
}

// Dev is the mount's device number as last read by Update.
func (c *Conn) Dev() uint64 {
	liveMu.Lock()
	defer liveMu.Unlock()
	return c.dev
}

// Untrack forgets the mount (it is gone).
func (c *Conn) Untrack() {
	liveMu.Lock()
	delete(live, c)
	liveMu.Unlock()
}

// Within runs fn with a deadline. When fn has not returned in time (a
// daemon that does not answer, a process stuck in state D on a FUSE
// request) the FUSE connections of every tracked mount are aborted,
// which fails the pending requests, and the result names the step that
// hung.
func Within(step string, d time.Duration, fn func() error) error {
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

// abortLive aborts the FUSE connection of every tracked mount and
// reports which.
func abortLive() string {
	liveMu.Lock()
	defer liveMu.Unlock()
	var done []string
	for c := range live {
		if c.dev == 0 {
			continue
		}
		id := fuseConn(c.dev)
		if err := abortFuse(id); err != nil {
			done = append(done, fmt.Sprintf("%s(conn %d: %v)", c.mp, id, err))
		} else {
			done = append(done, fmt.Sprintf("%s(conn %d)", c.mp, id))
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

// MountDev returns the device number of the topmost FUSE mount at mp
// from mountinfo (never touching the mount itself, which may hang).
func MountDev(mp string) (uint64, bool) {
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

// TempDir is a test's temporary directory, world-traversable (with every
// directory above it) so setuid children can reach what is below.
func TempDir(t *testing.T) string {
	d := t.TempDir()
	for p := d; p != "/" && p != "."; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil && st.Mode().Perm()&0o011 != 0o011 {
			os.Chmod(p, st.Mode().Perm()|0o011)
		}
	}
	return d
}

// Exec runs a command with a deadline and returns its combined output.
func Exec(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	return ExecCmd(t, strings.Join(cmd.Args, " "), cmd)
}

// ExecCmd runs cmd with a deadline (failing the test as step if it
// hangs) and returns its combined output and exit error.
func ExecCmd(t *testing.T, step string, cmd *exec.Cmd) (string, error) {
	t.Helper()
	var out []byte
	var runErr error
	err := Within(step, RunDeadline, func() error {
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

// AsUser runs a shell script as uid/gid with supplementary groups and
// returns combined output and exit status.
func AsUser(t *testing.T, uid, gid uint32, groups []uint32, dir, script string) (string, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := ExecCmd(t, fmt.Sprintf("uid %d in %s: sh -c %.60q", uid, dir, script), cmd)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out, code
}

// WaitUp waits, within d, until up reports a daemon's mount on mp
// answering, failing early when the daemon exits first (done carries its
// exit, put back for whoever waits on it next). name says which daemon.
func WaitUp(name, mp string, d time.Duration, done chan error, up func() bool) error {
	deadline := time.Now().Add(d)
	return Within("mount "+mp+": wait for it to come up", d+time.Second, func() error {
		for time.Now().Before(deadline) {
			if up() {
				return nil
			}
			select {
			case err := <-done:
				done <- err
				return fmt.Errorf("%s exited before mounting: %v", name, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		return fmt.Errorf("not up after %v", d)
	})
}

// Package mount_test mounts `kaon mount` for real (root, fuse3) on a
// `kaon up`: the shared FUSE suite (integration/fusetest), two mounts of
// one namespace seeing each other's changes and locks, changes made with
// curl reaching a mount through the session's invalidations, and a
// killed daemon's stale mount cleared by the next mount.
package mount_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/fusetest"
	"github.com/kaon-storage/kaon/integration/harness"
)

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "integration/mount needs root (FUSE mounts, setuid children)")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// Deadlines of steps waiting on a daemon: they only turn a hang into a
// named failure.
const (
	upDeadline   = 60 * time.Second
	stopDeadline = 60 * time.Second
)

// kmount is one foreground `kaon mount` process.
type kmount struct {
	t    *testing.T
	url  string
	sub  string
	mp   string
	args []string
	cmd  *exec.Cmd
	log  *syncBuf
	done chan error
	conn *fusetest.Conn
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// newMount mounts subtree sub of the namespace at url on a new
// mountpoint (or on mp when given).
func newMount(t *testing.T, url, sub, mp string, extra ...string) *kmount {
	t.Helper()
	d := fusetest.TempDir(t)
	if mp == "" {
		mp = filepath.Join(d, "mnt")
		if err := os.Mkdir(mp, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := &kmount{t: t, url: url, sub: sub, mp: mp, args: append([]string{"--cache", filepath.Join(d, "cache")}, extra...)}
	m.start()
	t.Cleanup(m.stop)
	return m
}

func (m *kmount) start() {
	m.t.Helper()
	args := append([]string{"mount", "-f", "--url", m.url, "--subtree", m.sub}, m.args...)
	m.cmd = exec.Command(harness.Binary(m.t), append(args, m.mp)...)
	m.log = &syncBuf{}
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.done = make(chan error, 1)
	go func(c *exec.Cmd, ch chan error) { ch <- c.Wait() }(m.cmd, m.done)
	m.conn = fusetest.Track(m.mp)
	err := fusetest.WaitUp("kaon mount", m.mp, upDeadline, m.done, func() bool {
		if !m.conn.Update() || !bytes.Contains([]byte(m.log.String()), []byte("mounted on")) {
			return false
		}
		var st syscall.Stat_t
		return syscall.Stat(m.mp, &st) == nil
	})
	if err != nil {
		m.t.Fatalf("%v\n%s", err, m.log)
	}
}

// ended waits for the daemon's exit.
func (m *kmount) ended(step string) (exit, err error) {
	err = fusetest.Within(step, stopDeadline, func() error { exit = <-m.done; return nil })
	m.cmd = nil
	m.conn.Untrack()
	return exit, err
}

// stop unmounts with `kaon umount` and waits for the daemon's clean exit.
func (m *kmount) stop() {
	if m.cmd == nil {
		return
	}
	proc := m.cmd.Process
	m.t.Logf("%v: unmounting %s", time.Now().Format("15:04:05.000"), m.mp)
	out, err := fusetest.Exec(m.t, harness.Binary(m.t), "umount", m.mp)
	if err != nil {
		m.t.Errorf("kaon umount %s: %v\n%s", m.mp, err, out)
		proc.Signal(syscall.SIGTERM)
	}
	if exit, err := m.ended("stop " + m.mp + ": daemon exit after umount"); err != nil {
		proc.Kill()
		m.t.Errorf("%v\n%s", err, m.log)
	} else if exit != nil {
		m.t.Errorf("daemon exit after umount: %v\n%s", exit, m.log)
	}
	if m.t.Failed() || os.Getenv("KAON_MOUNT_LOG") != "" {
		m.t.Logf("kaon mount %s log:\n%s", m.mp, m.log)
	}
}

// kill simulates a crash (SIGKILL).
func (m *kmount) kill() {
	m.t.Helper()
	pid := m.cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGKILL)
	if _, err := m.ended(fmt.Sprintf("kill %s: exit of daemon %d after SIGKILL", m.mp, pid)); err != nil {
		m.t.Fatalf("%v\n%s", err, m.log)
	}
}

// waitFor polls cond until it holds, failing with step after d.
func waitFor(t *testing.T, d time.Duration, step string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", step, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

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
	"strings"
	"syscall"
	"testing"
	"time"
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
	cmd     *exec.Cmd
	log     *bytes.Buffer
	done    chan error
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
	args := append([]string{"cfsd", "mount", "-f", "--backend", m.backend}, m.args...)
	args = append(args, m.mp)
	m.cmd = exec.Command(kaonBin, args...)
	m.log = &bytes.Buffer{}
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.done = make(chan error, 1)
	go func(c *exec.Cmd, ch chan error) { ch <- c.Wait() }(m.cmd, m.done)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.ReadFile(filepath.Join(m.mp, ".proc", "whoami")); err == nil {
			return
		}
		select {
		case err := <-m.done:
			m.t.Fatalf("kaon cfsd exited before mounting: %v\n%s", err, m.log)
		case <-time.After(20 * time.Millisecond):
		}
	}
	m.t.Fatalf("mount did not come up\n%s", m.log)
}

// stop unmounts with SIGTERM and waits for a clean exit.
func (m *mount) stop() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-m.done:
		if err != nil {
			m.t.Errorf("daemon exit after SIGTERM: %v\n%s", err, m.log)
		}
	case <-time.After(20 * time.Second):
		m.cmd.Process.Kill()
		<-m.done
		m.t.Errorf("daemon did not exit on SIGTERM\n%s", m.log)
	}
	m.cmd = nil
	if isMounted(m.mp) {
		syscall.Unmount(m.mp, syscall.MNT_DETACH)
		m.t.Errorf("%s still mounted after SIGTERM", m.mp)
	}
}

// kill simulates a crash.
func (m *mount) kill() {
	m.cmd.Process.Kill()
	<-m.done
	m.cmd = nil
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

// asUser runs a shell script as uid/gid with supplementary groups and
// returns combined output and exit status.
func asUser(t *testing.T, uid, gid uint32, groups []uint32, dir, script string) (string, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

package harness

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	faultOnce sync.Once
	faultBin  string
	faultErr  error
)

// FaultFS mounts lower again at mnt through the FUSE fault layer
// (integration/health/slowfs) and returns its control file: write a Go
// duration to it to delay every file operation that long ("0": none),
// or "eio" to fail every operation with EIO as a dead disk does. It is
// unmounted when the test ends.
func FaultFS(t testing.TB, lower, mnt string) (control string) {
	t.Helper()
	faultOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kaon-slowfs-")
		if err != nil {
			faultErr = err
			return
		}
		faultBin = filepath.Join(dir, "slowfs")
		build := exec.Command("go", "build", "-o", faultBin, "./integration/health/slowfs")
		build.Dir = RepoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			faultErr = &buildError{err, string(out)}
		}
	})
	if faultErr != nil {
		t.Fatalf("build slowfs: %v", faultErr)
	}
	control = filepath.Join(t.TempDir(), "control")
	os.WriteFile(control, []byte("0"), 0o644)
	cmd := exec.Command(faultBin, control, lower, mnt)
	var log bytes.Buffer
	var mu sync.Mutex
	cmd.Stdout, cmd.Stderr = syncBuf{&mu, &log}, syncBuf{&mu, &log}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			exec.Command("fusermount3", "-u", "-z", mnt).Run()
			mu.Lock()
			t.Errorf("slowfs did not stop within 10s: %s", log.String())
			mu.Unlock()
		}
	})
	WaitFor(t, 10*time.Second, "slowfs to mount "+mnt, func() bool {
		b, _ := os.ReadFile("/proc/mounts")
		return strings.Contains(string(b), " "+mnt+" fuse.slowfs ")
	})
	return control
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

package harness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// XRootD starts Debian's xrootd (the peer Kaon's root:// is compared
// with) exporting a fresh directory, with extra appended to its
// configuration, and returns its host:port and the directory its files
// are in. It is killed when the test ends; its log is printed if the test
// failed.
func XRootD(t testing.TB, extra func(dir string) string) (addr, data string) {
	t.Helper()
	if _, err := exec.LookPath("xrootd"); err != nil {
		t.Fatal("xrootd (xrootd-server) is not installed: run scripts/deps.sh")
	}
	dir, err := os.MkdirTemp("/var/tmp", "kaon-xrootd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	port := FreePort(t)
	for _, d := range []string{"data", "run", "log"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	cfg := fmt.Sprintf(`xrd.port %d
all.export /
oss.localroot %s/data
all.adminpath %s/run
all.pidpath %s/run
xrootd.chksum adler32
`, port, dir, dir, dir)
	if extra != nil {
		cfg += extra(dir)
	}
	if err := os.WriteFile(filepath.Join(dir, "xrd.cfg"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	if out, err := exec.Command("chown", "-R", "xrootd:", dir).CombinedOutput(); err != nil {
		t.Fatalf("chown the xrootd directory: %v %s", err, out)
	}
	cmd := exec.Command("xrootd", "-R", "xrootd", "-c", filepath.Join(dir, "xrd.cfg"), "-l", filepath.Join(dir, "log", "xrootd.log"), "-n", "kt")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "log", "kt", "xrootd.log"))
			t.Logf("xrootd log:\n%s", b)
		}
	})
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, filepath.Join(dir, "data")
		}
		if time.Now().After(deadline) {
			t.Fatalf("xrootd on %s did not listen within 30 s", addr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

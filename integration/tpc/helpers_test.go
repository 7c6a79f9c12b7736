// Package tpc tests third-party copy with the real clients: curl -X COPY
// and gfal-copy (HTTP-TPC) and xrdcp --tpc only (XRootD TPC), between two
// `kaon up` instances, a small Go WebDAV server, and Debian's xrootd.
//
// HTTP-TPC in Debian's xrootd needs TLS (its TPC handler loads only with
// https), so the plain-HTTP tests use Kaon↔Kaon and the Go server; XRootD
// TPC is tested against Debian's xrootd in both directions.
package tpc

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/checksum"
)

// run runs a client with a deadline; a command still running then fails
// the test naming step.
func run(t *testing.T, step string, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	return runCmd(t, step, timeout, nil, name, args...)
}

func runCmd(t *testing.T, step string, timeout time.Duration, cred *syscall.Credential, name string, args ...string) (string, error) {
	t.Helper()
	return runWith(t, step, timeout, cred, nil, name, args...)
}

// runEnv is run with env added to the client's environment.
func runEnv(t *testing.T, step string, timeout time.Duration, env []string, name string, args ...string) (string, error) {
	t.Helper()
	return runWith(t, step, timeout, nil, env, name, args...)
}

func mustRunEnv(t *testing.T, step string, timeout time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	out, err := runEnv(t, step, timeout, env, name, args...)
	if err != nil {
		t.Fatalf("%s: %s %v: %v\n%s", step, name, args, err, out)
	}
	return out
}

func runWith(t *testing.T, step string, timeout time.Duration, cred *syscall.Credential, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(append(os.Environ(), "GFAL_PYTHONBIN=/usr/bin/python3"), env...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = "/"
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("%s: %s did not finish within %v:\n%s", step, name, timeout, out.String())
	}
	return out.String(), err
}

func mustRun(t *testing.T, step string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	out, err := run(t, step, timeout, name, args...)
	if err != nil {
		t.Fatalf("%s: %s %v: %v\n%s", step, name, args, err, out)
	}
	return out
}

// randomFile writes n random bytes to a temp file and returns its path,
// contents and adler32.
func randomFile(t *testing.T, n int) (string, []byte, string) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	p := filepath.Join(t.TempDir(), "src.bin")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(p), 0o755)
	sum, _ := checksum.Sum("adler32", b)
	return p, b, sum
}

// up starts an instance that may reach other instances on loopback.
func up(t *testing.T, extra ...string) *harness.Process {
	return harness.Up(t, append([]string{"--tpc-allow-loopback", "--tpc-markers", "1s"}, extra...)...)
}

// put uploads local file to url with curl.
func put(t *testing.T, local, url string) {
	t.Helper()
	out := mustRun(t, "upload "+url, time.Minute, "curl", "-sS", "-f", "-L", "-T", local, url)
	_ = out
}

// get downloads url and returns its bytes.
func get(t *testing.T, url string) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "got.bin")
	mustRun(t, "download "+url, time.Minute, "curl", "-sS", "-f", "-L", "-o", p, url)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// adlerOf asks the namespace for url's adler32 (HEAD + Want-Digest).
func adlerOf(t *testing.T, url string) string {
	t.Helper()
	out := mustRun(t, "HEAD "+url, time.Minute, "curl", "-sS", "-f", "-I", "-H", "Want-Digest: adler32", url)
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Digest: adler32="); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no adler32 digest for %s:\n%s", url, out)
	return ""
}

// status is the HTTP status curl reports for a HEAD of url.
func status(t *testing.T, url string) string {
	t.Helper()
	out, _ := run(t, "HEAD "+url, time.Minute, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-I", url)
	return strings.TrimSpace(out)
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(ls[len(ls)-1])
}

// hostport strips the scheme of an endpoint URL.
func hostport(u string) string {
	_, hp, _ := strings.Cut(u, "://")
	return hp
}

// xrootdServer starts Debian's xrootd exporting a fresh directory with TPC
// (its copy program is xrdcp --server) and returns its host:port.
func xrootdServer(t *testing.T) string { return xrootdServerWith(t, nil) }

// xrootdServerWith is xrootdServer with more configuration: extra writes
// what it needs into the server's directory (made the xrootd user's
// afterwards) and returns configuration lines.
func xrootdServerWith(t *testing.T, extra func(dir string) string) string {
	t.Helper()
	addr, _ := harness.XRootD(t, func(dir string) string {
		tpc := "ofs.tpc logok pgm /usr/bin/xrdcp --server\n"
		if extra != nil {
			tpc += extra(dir)
		}
		return tpc
	})
	return addr
}

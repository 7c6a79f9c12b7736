// Package clienttest runs the real XRootD command-line clients from tests
// (unit tests over the fake backend and integration tests over kaon), with
// bounded retries and a hard timeout so a hung client fails the test.
package clienttest

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Timeout bounds one client invocation.
const Timeout = 5 * time.Minute

// Need fails the test when a client is not installed and returns its path.
func Need(t testing.TB, bin string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("%s not installed (Debian package xrootd-client / python3-xrootd): %v", bin, err)
	}
	return p
}

// Run runs a client and returns its combined output and exit code.
func Run(t testing.TB, name string, args ...string) (string, int) {
	t.Helper()
	Need(t, name)
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "XRD_REQUESTTIMEOUT=120", "XRD_CONNECTIONRETRY=2", "XRD_STREAMERRORWINDOW=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(Timeout):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s %v timed out\n%s", name, args, out.String())
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// MustRun runs a client that must exit 0 and returns its output.
func MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, code := Run(t, name, args...)
	if code != 0 {
		t.Fatalf("%s %s: exit %d\n%s", name, strings.Join(args, " "), code, out)
	}
	return out
}

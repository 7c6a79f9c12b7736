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

// PyPrelude starts a Python script for /usr/bin/python3 (the XRootD
// bindings import only there): it binds url (argv[1], "root://host:port"),
// a FileSystem fs, and ok(what, status), which exits on failure.
const PyPrelude = `
import sys
from XRootD import client
from XRootD.client.flags import OpenFlags, DirListFlags, QueryCode, MkDirFlags, AccessMode
url = sys.argv[1]
fs = client.FileSystem(url)
def ok(what, st):
    if not st.ok:
        print("FAIL", what, st.message); sys.exit(1)
`

// PyBigFile ends a script started with PyPrelude: a multi-MiB write, read
// back byte-exact and removed, then "PYTHON-OK".
const PyBigFile = `
big = bytes(range(251)) * (90000)
g = client.File()
ok("open-big", g.open(url + "//py-big.bin", OpenFlags.DELETE)[0])
ok("write-big", g.write(big, 0)[0])
ok("close-big", g.close()[0])
g = client.File(); ok("open-big-r", g.open(url + "//py-big.bin")[0])
st, d = g.read(); ok("read-big", st); assert d == big, len(d)
g.close()
ok("rm-big", fs.rm("/py-big.bin")[0])
print("PYTHON-OK")
`

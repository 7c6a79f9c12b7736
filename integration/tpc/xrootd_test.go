package tpc

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// xrdSum is the adler32 a root:// server reports for path.
func xrdSum(t *testing.T, hostport, path string) string {
	t.Helper()
	out := mustRun(t, "query checksum "+hostport+path, time.Minute, "xrdfs", hostport, "query", "checksum", path)
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "adler32" {
		t.Fatalf("checksum answer %q", out)
	}
	return f[1]
}

// xrdGet downloads a root:// URL.
func xrdGet(t *testing.T, url string) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "got.bin")
	mustRun(t, "xrdcp download "+url, 2*time.Minute, "xrdcp", "-s", "-f", url, p)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestXRootDTPC runs xrdcp --tpc only with Kaon as source, as destination
// and as both, and against Debian's xrootd on the other side.
func TestXRootDTPC(t *testing.T) {
	a, b := up(t), up(t)
	x1, x2 := xrootdServer(t), xrootdServer(t)
	local, data, sum := randomFile(t, 40<<20+333)
	mustRun(t, "upload to Kaon A", time.Minute, "xrdcp", "-s", local, a.EP.XRootD+"//d/src.bin")
	mustRun(t, "upload to xrootd 1", time.Minute, "xrdcp", "-s", local, "root://"+x1+"//src.bin")

	cases := []struct {
		name     string
		src, dst string // root:// URLs
		dstHost  string // host:port to query the checksum at
		dstPath  string
	}{
		{"kaon to kaon", a.EP.XRootD + "//d/src.bin", b.EP.XRootD + "//k/k2k.bin", hostport(b.EP.XRootD), "/k/k2k.bin"},
		{"kaon to xrootd", a.EP.XRootD + "//d/src.bin", "root://" + x2 + "//fromkaon.bin", x2, "/fromkaon.bin"},
		{"xrootd to kaon", "root://" + x1 + "//src.bin", b.EP.XRootD + "//k/fromxrd.bin", hostport(b.EP.XRootD), "/k/fromxrd.bin"},
	}
	for _, c := range cases {
		out, err := run(t, "xrdcp --tpc only "+c.name, 3*time.Minute, "xrdcp", "--tpc", "only", c.src, c.dst)
		if err != nil {
			t.Fatalf("%s: %v\n%s\nA:\n%s\nB:\n%s", c.name, err, out, a.Logs(), b.Logs())
		}
		if got := xrdSum(t, c.dstHost, c.dstPath); got != sum {
			t.Fatalf("%s: adler32 %s at the destination, source %s", c.name, got, sum)
		}
		if got := xrdGet(t, "root://"+c.dstHost+"/"+c.dstPath); !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes at the destination differ from the %d sent", c.name, len(got), len(data))
		}
	}
	if n := strings.Count(b.Logs(), "xrootd third-party copy done"); n != 2 {
		t.Fatalf("B ran %d pulls, want 2 (kaon and xrootd sources):\n%s", n, b.Logs())
	}
}

// TestXRootDTPCRefusals: a key replayed by someone else, or a source that
// does not exist, fail the copy and leave no file.
func TestXRootDTPCRefusals(t *testing.T) {
	a, b := up(t), up(t)
	out, err := run(t, "xrdcp --tpc only of a missing source", 3*time.Minute, "xrdcp", "--tpc", "only",
		a.EP.XRootD+"//nope.bin", b.EP.XRootD+"//k/x.bin")
	if err == nil {
		t.Fatalf("copy of a missing source succeeded:\n%s", out)
	}
	if _, err := run(t, "stat the failed destination", time.Minute, "xrdfs", hostport(b.EP.XRootD), "stat", "/k/x.bin"); err == nil {
		t.Fatal("a failed copy left a destination file")
	}
	// A destination opening a source with a key nobody registered is
	// refused (after the registration wait).
	local, _, _ := randomFile(t, 1<<20)
	mustRun(t, "upload", time.Minute, "xrdcp", "-s", local, a.EP.XRootD+"//d/src.bin")
	out, err = run(t, "open a source with an unregistered key", 2*time.Minute, "xrdcp", "-s", "-f",
		a.EP.FSTXrd+"//d/src.bin?tpc.key=00112233445566778899aabb&tpc.org=root.1@localhost", filepath.Join(t.TempDir(), "x"))
	if err == nil || !strings.Contains(out, "no tpc authorization") {
		t.Fatalf("open with an unregistered key: %v\n%s", err, out)
	}
}

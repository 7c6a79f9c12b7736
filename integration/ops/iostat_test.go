package ops

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestIOStat: what user nobody uploads with curl (eos.app=ingest) and
// reads back with xrdcp and curl shows in `kaon io stat --user 65534` under its
// application, bytes and files, in every window; --app narrows it.
func TestIOStat(t *testing.T) {
	needRoot(t)
	k := harness.Up(t)
	k.MustKaon("mkdir", "/pub")
	k.MustKaon("chmod", "1777", "/pub")
	// A directory nobody can write in (t.TempDir's parent is root's alone).
	dir, err := os.MkdirTemp("", "kaon-iostat")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	data := make([]byte, 3<<20)
	rand.Read(data)
	src := filepath.Join(dir, "src")
	os.WriteFile(src, data, 0o644)
	if out, err := asNobody(t, "curl", "-sSf", "-L", "-T", src, k.EP.HTTP+"/pub/f?eos.app=ingest"); err != nil {
		t.Fatalf("upload as nobody: %v %s", err, out)
	}
	dst := filepath.Join(dir, "dst")
	if out, err := asNobody(t, "xrdcp", "-f", "-s", k.EP.XRootD+"//pub/f", dst); err != nil {
		t.Fatalf("xrdcp as nobody: %v %s", err, out)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
		t.Fatal("xrdcp read back other bytes")
	}
	if out, err := asNobody(t, "curl", "-sSf", "-L", "-o", dst, k.EP.HTTP+"/pub/f"); err != nil {
		t.Fatalf("curl GET as nobody: %v %s", err, out)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
		t.Fatal("curl read back other bytes")
	}
	want := []string{
		"65534  65534  curl    1m0s    3.00 MiB  0 B       1           0",
		"65534  65534  ingest  1m0s    0 B       3.00 MiB  0           1",
		"65534  65534  ingest  1h0m0s  0 B       3.00 MiB  0           1",
		"65534  65534  xrootd  5m0s    3.00 MiB  0 B       1           0",
	}
	var out string
	harness.WaitFor(t, 30*time.Second, "nobody's upload and read in io stat (the storage server's next heartbeats)", func() bool {
		out = k.MustKaon("io", "stat", "--user", "65534")
		for _, w := range want {
			if !strings.Contains(out, w) {
				return false
			}
		}
		return true
	})
	if strings.Contains(out, "0      0 ") {
		t.Errorf("io stat --user 65534 shows root's I/O:\n%s", out)
	}
	if out := k.MustKaon("io", "stat", "--app", "ingest"); strings.Contains(out, "xrootd") || !strings.Contains(out, "ingest") {
		t.Errorf("io stat --app ingest:\n%s", out)
	}
}

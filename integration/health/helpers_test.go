// Package health tests fsck, slow-disk detection and metrics against the
// real binary: stripes damaged on disk in every way, found, reported and
// repaired; a filesystem under a delaying FUSE layer marked slow and
// avoided; /metrics scraped with Prometheus' own parser.
package health

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/integration/harness"
)

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// put uploads data to path with curl (following the redirect).
func put(t *testing.T, k *harness.Process, path string, data []byte) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "upload")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("curl", "-sS", "-f", "-L", "-T", f, k.EP.HTTP+path).CombinedOutput()
	if err != nil {
		t.Fatalf("PUT %s: %v %s", path, err, out)
	}
}

// get reads path with curl; ok is false on any error status.
func get(t *testing.T, k *harness.Process, path string) ([]byte, bool) {
	t.Helper()
	cmd := exec.Command("curl", "-sS", "-f", "-L", k.EP.HTTP+path)
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	return out.Bytes(), err == nil
}

// stripe is a row of `kaon file info`.
type stripe struct {
	index string
	fsid  string
	node  string
	phys  string
}

func stripes(t *testing.T, k *harness.Process, path string) []stripe {
	t.Helper()
	var out []stripe
	for _, l := range strings.Split(k.MustKaon("file", "info", path), "\n") {
		if f := strings.Fields(l); len(f) == 4 && strings.HasPrefix(f[3], "/") {
			out = append(out, stripe{f[0], f[1], f[2], f[3]})
		}
	}
	if len(out) == 0 {
		t.Fatalf("file info %s: no stripes", path)
	}
	return out
}

// physFile is a stripe file's bytes and Kaon xattrs.
type physFile struct {
	data  []byte
	attrs map[string]string
}

func readPhys(t *testing.T, p string) physFile {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	pf := physFile{data: data, attrs: map[string]string{}}
	buf := make([]byte, 4096)
	n, err := unix.Listxattr(p, buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if !strings.HasPrefix(name, "user.kaon.") {
			continue
		}
		v := make([]byte, 4096)
		m, err := unix.Getxattr(p, name, v)
		if err != nil {
			t.Fatal(err)
		}
		pf.attrs[name] = string(v[:m])
	}
	return pf
}

// writePhys writes a stripe file with its xattrs (a copy, or one put back).
func writePhys(t *testing.T, p string, pf physFile) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, pf.data, 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range pf.attrs {
		setXattr(t, p, k, v)
	}
}

func setXattr(t *testing.T, p, name, value string) {
	t.Helper()
	if err := unix.Setxattr(p, name, []byte(value), 0); err != nil {
		t.Fatalf("setxattr %s %s: %v", p, name, err)
	}
}

// flip inverts 16 bytes of a file at off.
func flip(t *testing.T, p string, off int64) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 16)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] ^= 0xff
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// cluster starts a namespace server and nodes storage servers with
// nfs filesystems each, and waits until every filesystem booted.
func cluster(t *testing.T, nodes, nfs int, mgmArgs ...string) (*harness.Process, []*harness.Process) {
	t.Helper()
	mdir := t.TempDir()
	m := harness.Start(t, mdir, append([]string{"mgm", "--data", mdir, "--http", "127.0.0.1:0"}, mgmArgs...)...)
	key := filepath.Join(mdir, "keys", "capability.key")
	var fsts []*harness.Process
	for i := range nodes {
		d := t.TempDir()
		args := []string{"fst", "--mgm", m.EP.HTTP, "--key", key, "--http", "127.0.0.1:0", "--node", fmt.Sprintf("node%d", i), "--data", d}
		for j := range nfs {
			args = append(args, "--fs", filepath.Join(d, fmt.Sprintf("fs%d", j)))
		}
		fsts = append(fsts, harness.Start(t, d, args...))
	}
	harness.WaitFor(t, 30*time.Second, "every filesystem to boot", func() bool {
		return strings.Count(m.MustKaon("fs", "ls"), " booted ") == nodes*nfs
	})
	return m, fsts
}

// fsRoots maps filesystem ids to their paths (from fs ls).
func fsRoots(t *testing.T, k *harness.Process) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(k.MustKaon("fs", "ls"), "\n")[1:] {
		if f := strings.Fields(l); len(f) > 3 {
			out[f[1]] = f[2]
		}
	}
	return out
}

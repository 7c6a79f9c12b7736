// Package move tests data movement with the real binary and real
// clients: drains under load (8 clients reading and writing through curl
// and xrdcp while a filesystem drains), drains through kill -9 of the
// storage server and of the namespace server, the balancer on
// filesystems of different fill (tmpfs mounts), and conversions between
// layouts and spaces by command and by directory policy. Every test ends
// by comparing every file's bytes and checksum, and the stripes on the
// disks with the stripes the namespace registers (no orphan either way).
package move

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/checksum"
)

// run runs a client with a deadline; a command still running then is an
// error naming step.
func run(step string, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return out.String(), fmt.Errorf("%s: %s did not finish within %v", step, name, timeout)
	}
	return out.String(), err
}

// randomBytes writes n random bytes to a temp file.
func randomBytes(t *testing.T, n int) (string, []byte) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	f, err := os.CreateTemp(t.TempDir(), "src-*.bin")
	if err != nil {
		t.Fatal(err)
	}
	f.Write(b)
	f.Close()
	return f.Name(), b
}

// putHTTP uploads local to path with curl.
func putHTTP(k *harness.Process, local, path string) error {
	out, err := run("PUT "+path, 2*time.Minute, "curl", "-sS", "-f", "-L", "-T", local, k.EP.HTTP+path)
	if err != nil {
		return fmt.Errorf("curl PUT %s: %v %s", path, err, out)
	}
	return nil
}

// putXrd uploads local to path with xrdcp.
func putXrd(k *harness.Process, local, path string) error {
	out, err := run("xrdcp "+path, 2*time.Minute, "xrdcp", "-f", "-s", local, k.EP.XRootD+"/"+path)
	if err != nil {
		return fmt.Errorf("xrdcp to %s: %v %s", path, err, out)
	}
	return nil
}

// getHTTP reads path with curl.
func getHTTP(k *harness.Process, dir, path string) ([]byte, error) {
	dst := filepath.Join(dir, "got-"+strings.ReplaceAll(path, "/", "_"))
	defer os.Remove(dst)
	out, err := run("GET "+path, 2*time.Minute, "curl", "-sS", "-f", "-L", "-o", dst, k.EP.HTTP+path)
	if err != nil {
		return nil, fmt.Errorf("curl GET %s: %v %s", path, err, out)
	}
	return os.ReadFile(dst)
}

// getXrd reads path with xrdcp.
func getXrd(k *harness.Process, dir, path string) ([]byte, error) {
	dst := filepath.Join(dir, "gotx-"+strings.ReplaceAll(path, "/", "_"))
	defer os.Remove(dst)
	out, err := run("xrdcp "+path, 2*time.Minute, "xrdcp", "-f", "-s", k.EP.XRootD+"/"+path, dst)
	if err != nil {
		return nil, fmt.Errorf("xrdcp from %s: %v %s", path, err, out)
	}
	return os.ReadFile(dst)
}

// digest is the adler32 the namespace serves for path (HEAD + Want-Digest).
func digest(t *testing.T, k *harness.Process, path string) string {
	t.Helper()
	out, err := run("HEAD "+path, time.Minute, "curl", "-sS", "-f", "-I", "-H", "Want-Digest: adler32", k.EP.HTTP+path)
	if err != nil {
		t.Fatalf("HEAD %s: %v %s", path, err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Digest: adler32="); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no adler32 digest for %s:\n%s", path, out)
	return ""
}

// verifyAll compares every file's bytes (curl) and served adler32 with
// what was written.
func verifyAll(t *testing.T, k *harness.Process, files map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		got, err := getHTTP(k, dir, p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, files[p]) {
			t.Fatalf("%s: read %d bytes, want %d, equal=false", p, len(got), len(files[p]))
		}
		want, _ := checksum.Sum("adler32", files[p])
		if got := digest(t, k, p); got != want {
			t.Fatalf("%s: adler32 %s, want %s", p, got, want)
		}
	}
}

var stripeRow = regexp.MustCompile(`^(\d+)\s+(\d+)\s+\S+\s+(/\S+)$`)

// stripesOf are path's registered stripes: fsid -> physical path.
func stripesOf(t *testing.T, k *harness.Process, path string) map[uint32]string {
	t.Helper()
	return stripesIn(k.MustKaon("file", "info", path))
}

// stripesIn are the stripes `kaon file info` printed in out.
func stripesIn(out string) map[uint32]string {
	m := map[uint32]string{}
	for _, l := range strings.Split(out, "\n") {
		if s := stripeRow.FindStringSubmatch(strings.TrimSpace(l)); s != nil {
			var fs uint32
			fmt.Sscan(s[2], &fs)
			m[fs] = s[3]
		}
	}
	return m
}

// diskStripes lists the stripe files under the filesystem roots.
func diskStripes(roots []string) []string {
	var out []string
	for _, r := range roots {
		buckets, _ := os.ReadDir(r)
		for _, b := range buckets {
			if !b.IsDir() || b.Name() == "lost+found" {
				continue
			}
			ents, _ := os.ReadDir(filepath.Join(r, b.Name()))
			for _, e := range ents {
				out = append(out, filepath.Join(r, b.Name(), e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out
}

// checkNoOrphans waits until the stripes on the disks are exactly the
// stripes the namespace registers for files (deletions of moved stripes
// are due after the capability lifetime), and that none is on fs skip.
func checkNoOrphans(t *testing.T, k *harness.Process, roots []string, files map[string][]byte, drained uint32) {
	t.Helper()
	var want []string
	for p := range files {
		for fs, phys := range stripesOf(t, k, p) {
			if fs == drained {
				t.Fatalf("%s still has a stripe on drained fs %d (%s)", p, fs, phys)
			}
			want = append(want, phys)
		}
	}
	sort.Strings(want)
	var got []string
	deadline := time.Now().Add(90 * time.Second)
	for {
		got = diskStripes(roots)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	var extra, missing []string
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	t.Fatalf("waiting for the disks to hold exactly the registered stripes: not within 90s\nnot registered (orphans): %v\nregistered but missing: %v", extra, missing)
}

// fsRow is filesystem id's row of `kaon fs ls`.
func fsRow(t *testing.T, k *harness.Process, id string) string {
	t.Helper()
	out := k.MustKaon("fs", "ls")
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[1] == id {
			return l
		}
	}
	t.Fatalf("fs %s not in fs ls:\n%s", id, out)
	return ""
}

// fsStatusField is the value of "key:" in `kaon fs status id`.
func fsStatusField(t *testing.T, k *harness.Process, id, key string) string {
	t.Helper()
	for _, l := range strings.Split(k.MustKaon("fs", "status", id), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// movedStripes is how many stripes fs id's drain moved (fs status).
func movedStripes(t *testing.T, k *harness.Process, id string) int {
	var n int
	fmt.Sscan(fsStatusField(t, k, id, "moved"), &n)
	return n
}

// layoutDir makes dir with a layout policy.
func layoutDir(t *testing.T, k *harness.Process, dir, layout string) {
	t.Helper()
	k.MustKaon("mkdir", "-p", dir)
	k.MustKaon("attr", "set", dir, "sys.forced.layout="+layout)
}

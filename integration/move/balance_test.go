package move

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// mountTmpfs mounts a tmpfs of size at a new directory (unmounted when
// the test ends) and returns the directory: a filesystem with a fill of
// its own.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("this test needs root to mount tmpfs")
	}
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "kaon-move-test", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return filepath.Join(dir, "fs")
}

// groupRow is a group's row of `kaon group ls`, split into fields.
func groupRow(t *testing.T, k *harness.Process, g string) []string {
	t.Helper()
	out := k.MustKaon("group", "ls")
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == g {
			return f
		}
	}
	t.Fatalf("group %s not in group ls:\n%s", g, out)
	return nil
}

func spreadOf(t *testing.T, k *harness.Process, g string) float64 {
	v, err := strconv.ParseFloat(groupRow(t, k, g)[5], 64)
	if err != nil {
		t.Fatalf("group ls spread: %v", err)
	}
	return v
}

// TestBalance: one filesystem (a 64 MiB tmpfs) is filled, two empty ones
// join its group; with the balancer on and threshold 10 the group ends
// with a spread below it, stripes having moved to both new filesystems,
// and every file intact with no orphan. A second group is left alone.
func TestBalance(t *testing.T) {
	mdir := t.TempDir()
	m := harness.Start(t, mdir, "mgm", "--data", mdir, "--http", "127.0.0.1:0", "--cap-ttl", "3s")
	key := filepath.Join(mdir, "keys", "capability.key")
	full := mountTmpfs(t, "64m")
	d := t.TempDir()
	harness.Start(t, d, "fst", "--mgm", m.EP.HTTP, "--key", key, "--http", "127.0.0.1:0", "--node", "n", "--data", d, "--fs", full)
	harness.WaitFor(t, 30*time.Second, "the first filesystem to boot", func() bool { return strings.Count(m.MustKaon("fs", "ls"), "booted") == 1 })
	files := map[string][]byte{}
	m.MustKaon("mkdir", "/b")
	for i := range 20 {
		local, data := randomBytes(t, 1<<20+rand.IntN(1<<20))
		p := fmt.Sprintf("/b/f%d", i)
		if err := putHTTP(m, local, p); err != nil {
			t.Fatal(err)
		}
		files[p] = data
	}
	e1, e2 := mountTmpfs(t, "64m"), mountTmpfs(t, "64m")
	other := mountTmpfs(t, "64m")
	m.MustKaon("fs", "add", "--node", "n", "--path", e1)
	m.MustKaon("fs", "add", "--node", "n", "--path", e2)
	m.MustKaon("fs", "add", "--node", "n", "--path", other, "--group", "default.1")
	harness.WaitFor(t, 30*time.Second, "the added filesystems to boot", func() bool { return strings.Count(m.MustKaon("fs", "ls"), "booted") == 4 })
	if s := spreadOf(t, m, "default.0"); s < 40 {
		t.Fatalf("spread %.1f before balancing: the test proves nothing", s)
	}
	if _, errs, code := m.Kaon("group", "set", "default.0", "threshold=150"); code == 0 || !strings.Contains(errs, "threshold") {
		t.Fatalf("threshold=150 accepted: %s", errs)
	}
	m.MustKaon("group", "set", "default.0", "balancer=on", "threshold=10", "balancer.parallel=2")
	harness.WaitFor(t, 3*time.Minute, "the balancer of default.0 to bring the spread below 10", func() bool {
		f := groupRow(t, m, "default.0")
		return f[len(f)-1] == "balanced" && spreadOf(t, m, "default.0") <= 10
	})
	var onE1, onE2, onOther int
	for p := range files {
		for _, phys := range stripesOf(t, m, p) {
			switch {
			case strings.HasPrefix(phys, e1):
				onE1++
			case strings.HasPrefix(phys, e2):
				onE2++
			case strings.HasPrefix(phys, other):
				onOther++
			}
		}
	}
	if onE1 == 0 || onE2 == 0 || onOther != 0 {
		t.Fatalf("stripes moved: %d to one new filesystem, %d to the other, %d to another group's", onE1, onE2, onOther)
	}
	row := groupRow(t, m, "default.0")
	if row[6] != "on" || !strings.Contains(strings.Join(row, " "), "/") {
		t.Fatalf("group ls row: %v", row)
	}
	verifyAll(t, m, files)
	checkNoOrphans(t, m, []string{full, e1, e2, other}, files, 0)
	// Off: the balancer stops; the setting persists in group ls.
	m.MustKaon("group", "set", "default.0", "balancer=off")
	if f := groupRow(t, m, "default.0"); f[6] != "off" {
		t.Fatalf("balancer off: %v", f)
	}
}

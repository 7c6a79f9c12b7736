package health

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// fsLine returns the `fs ls` line of the filesystem at path.
func fsLine(t *testing.T, k *harness.Process, path string) string {
	t.Helper()
	for _, l := range strings.Split(k.MustKaon("fs", "ls"), "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[2] == path {
			return l
		}
	}
	t.Fatalf("fs ls has no filesystem %s:\n%s", path, k.MustKaon("fs", "ls"))
	return ""
}

// health is the health column (the last one, which may hold spaces):
// everything after the backend-health column, the 19th (used and capacity
// are two fields each: "1.5 GiB"; drain, left, rate, eta and failed one
// each).
func health(line string) string {
	f := strings.Fields(line)
	return strings.Join(f[20:], " ")
}

// TestSlowDisk runs a storage server with three filesystems on local
// directories and one under a FUSE layer that can be made slow. Made slow,
// that filesystem is marked slow in `fs ls` with the figure, the namespace
// server warns in its log and sets kaon_fs_slow, and new files are not
// placed there (replica:4 over 4 filesystems is refused); made fast again,
// it recovers and is used again.
func TestSlowDisk(t *testing.T) {
	base := t.TempDir()
	lower, mnt := filepath.Join(base, "lower"), filepath.Join(base, "mnt")
	os.Mkdir(lower, 0o755)
	os.Mkdir(mnt, 0o755)
	delay := harness.FaultFS(t, lower, mnt)

	mdir := t.TempDir()
	m := harness.Start(t, mdir, "mgm", "--data", mdir, "--http", "127.0.0.1:0")
	d := t.TempDir()
	harness.Start(t, d, "fst", "--mgm", m.EP.HTTP, "--key", filepath.Join(mdir, "keys", "capability.key"), "--http", "127.0.0.1:0",
		"--node", "node0", "--data", d, "--fs", filepath.Join(d, "a"), "--fs", filepath.Join(d, "b"), "--fs", filepath.Join(d, "c"),
		"--fs", mnt, "--latency-window", "10s", "--latency-probe", "250ms")
	harness.WaitFor(t, 30*time.Second, "4 filesystems to boot healthy", func() bool {
		out := m.MustKaon("fs", "ls")
		return strings.Count(out, " booted ") == 4 && !strings.Contains(out, "slow")
	})
	id := strings.Fields(fsLine(t, m, mnt))[1]
	m.MustKaon("mkdir", "/r3")
	m.MustKaon("attr", "set", "/r3", "sys.forced.layout=replica:3")
	m.MustKaon("mkdir", "/r4")
	m.MustKaon("attr", "set", "/r4", "sys.forced.layout=replica:4")
	data := randomBytes(t, 100<<10)

	os.WriteFile(delay, []byte("100ms"), 0o644)
	harness.WaitFor(t, 60*time.Second, "fs ls to show fs "+id+" slow", func() bool {
		return strings.HasPrefix(health(fsLine(t, m, mnt)), "slow: small-op p90 ")
	})
	t.Logf("slow: %s", fsLine(t, m, mnt))
	for _, l := range strings.Split(m.MustKaon("fs", "ls"), "\n")[1:] {
		if l != "" && !strings.Contains(l, mnt) && health(l) != "ok" {
			t.Errorf("a healthy filesystem is not ok: %s", l)
		}
	}
	if logs := m.Logs(); !strings.Contains(logs, `msg="filesystem is slow" fsid=`+id) {
		t.Errorf("no warning about fs %s in the namespace server's log", id)
	}
	fams := scrape(t, m.EP.HTTP)
	if v, ok := value(fams, "kaon_fs_slow", map[string]string{"fsid": id}); !ok || v != 1 {
		t.Errorf("kaon_fs_slow{fsid=%s} = %v (present %v), want 1", id, v, ok)
	}
	if v, _ := value(fams, "kaon_fs_io_latency_seconds", map[string]string{"fsid": id, "size": "small", "quantile": "0.99"}); v < 0.1 {
		t.Errorf("kaon_fs_io_latency_seconds of the slow filesystem: %v, want at least the delay", v)
	}
	// New files avoid it: replica:3 lands on the three others, replica:4
	// finds no fourth filesystem.
	for i := range 8 {
		p := fmt.Sprintf("/r3/f%d", i)
		put(t, m, p, data)
		for _, s := range stripes(t, m, p) {
			if s.fsid == id {
				t.Fatalf("%s placed a replica on the slow fs %s", p, id)
			}
		}
	}
	f := filepath.Join(t.TempDir(), "f")
	os.WriteFile(f, data, 0o644)
	out, err := exec.Command("curl", "-sS", "-L", "-T", f, "-w", "%{http_code}", m.EP.HTTP+"/r4/f").CombinedOutput()
	if err == nil && !strings.HasSuffix(string(out), "507") {
		t.Fatalf("replica:4 upload with one of 4 filesystems slow: %s", out)
	}
	if !strings.Contains(string(out), "3 available") {
		t.Errorf("replica:4 refusal does not say why: %s", out)
	}

	os.WriteFile(delay, []byte("0"), 0o644)
	harness.WaitFor(t, 60*time.Second, "fs "+id+" to recover", func() bool { return health(fsLine(t, m, mnt)) == "ok" })
	if logs := m.Logs(); !strings.Contains(logs, `msg="filesystem is no longer slow" fsid=`+id) {
		t.Errorf("no recovery notice for fs %s in the namespace server's log", id)
	}
	if v, _ := value(scrape(t, m.EP.HTTP), "kaon_fs_slow", map[string]string{"fsid": id}); v != 0 {
		t.Errorf("kaon_fs_slow{fsid=%s} = %v after recovery", id, v)
	}
	put(t, m, "/r4/f", data)
	if ids := stripes(t, m, "/r4/f"); !slices.ContainsFunc(ids, func(s stripe) bool { return s.fsid == id }) {
		t.Errorf("replica:4 after recovery does not use fs %s: %v", id, ids)
	}
	if b, ok := get(t, m, "/r4/f"); !ok || string(b) != string(data) {
		t.Error("replica:4 file does not read back")
	}
}

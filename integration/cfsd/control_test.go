package cfsd_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/fusetest"
)

type statsDoc struct {
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	Ops      map[string]struct {
		Count  int64   `json:"count"`
		Rate60 float64 `json:"rate_60s"`
		P50    float64 `json:"p50_us"`
		P99    float64 `json:"p99_us"`
	} `json:"ops"`
	Extra struct {
		Passthrough bool   `json:"passthrough"`
		DataPath    string `json:"data_path"`
	} `json:"extra"`
}

func (m *mount) stats(t *testing.T) statsDoc {
	var d statsDoc
	if err := json.Unmarshal([]byte(m.procRead("stats.json")), &d); err != nil {
		t.Fatalf("stats.json: %v", err)
	}
	return d
}

// TestControlTree: .proc and the state dir are hidden, whoami and cfs.id
// name the caller, stats.json counts what happened and tells the data
// path truthfully.
func TestControlTree(t *testing.T) {
	for _, pt := range []bool{true, false} {
		var extra []string
		if !pt {
			extra = append(extra, "--no-passthrough")
		}
		m := newMount(t, "", extra...)
		ents, _ := os.ReadDir(m.mp)
		for _, e := range ents {
			if e.Name() == ".proc" || e.Name() == ".kaon-cfsd" {
				t.Errorf("%s listed in the mount root", e.Name())
			}
		}
		if _, err := os.Stat(filepath.Join(m.backend, ".kaon-cfsd")); err != nil {
			t.Errorf("state dir missing in backend: %v", err)
		}
		if _, err := os.Stat(m.path(".kaon-cfsd")); !os.IsNotExist(err) {
			t.Errorf("state dir visible through the mount: %v", err)
		}
		if err := os.Mkdir(m.path(".kaon-cfsd"), 0o755); err == nil {
			t.Errorf("creating the state dir name through the mount succeeded")
		}
		os.Mkdir(m.path("u"), 0o777)
		out, _ := fusetest.AsUser(t, 1000, 1000, []uint32{1000, 2000}, m.path("u"), "cat ../.proc/whoami; getfattr -n cfs.id --only-values .")
		if !strings.Contains(out, "uid=1000") || strings.Count(out, "groups=1000,2000") != 2 {
			t.Errorf("whoami / cfs.id as uid 1000: %q", out)
		}
		if who := m.procRead("whoami"); !strings.Contains(who, "uid=0(root)") {
			t.Errorf("whoami as root: %q", who)
		}

		data := make([]byte, 1<<20)
		if err := os.WriteFile(m.path("u", "blob"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(m.path("u", "blob"))
		if err != nil || len(b) != len(data) {
			t.Fatalf("read back: %d %v", len(b), err)
		}
		time.Sleep(1100 * time.Millisecond) // rates cover complete seconds
		d := m.stats(t)
		if d.Extra.Passthrough != (d.Extra.DataPath == "passthrough") {
			t.Errorf("inconsistent data path: %+v", d.Extra)
		}
		if !pt && d.Extra.Passthrough {
			t.Errorf("--no-passthrough but stats say passthrough")
		}
		if d.Extra.Passthrough {
			if d.BytesIn != 0 {
				t.Errorf("passthrough active but %d bytes went through the daemon", d.BytesIn)
			}
		} else if d.BytesIn < int64(len(data)) {
			t.Errorf("daemon data path: bytes_in %d < %d", d.BytesIn, len(data))
		}
		if c := d.Ops["create"]; c.Count < 1 || c.P50 <= 0 || c.Rate60 <= 0 {
			t.Errorf("create stats: %+v", c)
		}
		if d.Ops["lookup"].Count == 0 {
			t.Errorf("no lookups counted")
		}
		t.Logf("passthrough=%v (requested %v)", d.Extra.Passthrough, pt)
	}
}

func quotaLine(t *testing.T, table string, uid int) []int64 {
	for _, l := range strings.Split(table, "\n") {
		f := strings.Fields(l)
		if len(f) == 6 && f[0] == strconv.Itoa(uid) {
			var v []int64
			for _, s := range f[2:] {
				n, _ := strconv.ParseInt(s, 10, 64)
				v = append(v, n)
			}
			return v // bytes, bytes_limit, inodes, inodes_limit
		}
	}
	t.Fatalf("uid %d not in quota table:\n%s", uid, table)
	return nil
}

// TestQuota: limits set by root give EDQUOT to the user, usage is exact,
// survives a clean restart, and is reconciled by a scan after a crash
// and after changes made behind the daemon's back.
func TestQuota(t *testing.T) {
	m := newMount(t, "", "--quota")
	os.Mkdir(m.path("q"), 0o755)
	os.Chown(m.path("q"), 1000, 1000)
	if err := m.procWrite("quota", "set 1000 bytes=1M inodes=5"); err != nil {
		t.Fatal(err)
	}
	if out, code := fusetest.AsUser(t, 1000, 1000, nil, m.path("q"), `echo "set 1000 bytes=0" > ../.proc/quota`); code == 0 {
		t.Errorf("non-root changed a limit: %s", out)
	}
	out, code := fusetest.AsUser(t, 1000, 1000, nil, m.path("q"), "dd if=/dev/zero of=big bs=64k count=32 2>&1")
	if code == 0 || !strings.Contains(out, "Disk quota exceeded") {
		t.Errorf("2 MiB write under a 1 MiB quota: code %d %s", code, out)
	}
	st, err := os.Stat(m.path("q", "big"))
	if err != nil || st.Size() > 1<<20 {
		t.Errorf("big: %v %v", st, err)
	}
	v := quotaLine(t, m.procRead("quota"), 1000)
	if v[0] != st.Size() || v[1] != 1<<20 || v[2] != 2 || v[3] != 5 {
		t.Errorf("usage after dd: %v (file %d)", v, st.Size())
	}
	out, code = fusetest.AsUser(t, 1000, 1000, nil, m.path("q"), "rm big; for i in 1 2 3 4; do : > f$i || exit 9; done; : > f5")
	if code == 0 || code == 9 || !strings.Contains(out, "quota") {
		t.Errorf("inode limit: code %d %s", code, out)
	}
	v = quotaLine(t, m.procRead("quota"), 1000)
	if v[0] != 0 || v[2] != 5 {
		t.Errorf("usage after creates: %v", v)
	}
	fusetest.AsUser(t, 1000, 1000, nil, m.path("q"), "rm f4; printf 12345 > f1; truncate -s 100 f2")
	v = quotaLine(t, m.procRead("quota"), 1000)
	if v[0] != 105 || v[2] != 4 {
		t.Errorf("usage after rm/write/truncate: %v want bytes 105 inodes 4", v)
	}
	// Others see only their own line; root sees everyone.
	out, _ = fusetest.AsUser(t, 1000, 1000, nil, m.path("q"), "cat ../.proc/quota")
	if strings.Contains(out, "\n0 ") {
		t.Errorf("uid 1000 sees root's quota line: %s", out)
	}

	// Clean restart keeps limits and usage.
	m.stop()
	m.start()
	if v := quotaLine(t, m.procRead("quota"), 1000); v[0] != 105 || v[1] != 1<<20 || v[2] != 4 || v[3] != 5 {
		t.Errorf("after restart: %v", v)
	}
	// Crash, plus a change behind the daemon's back: the scan at start
	// reconciles.
	m.kill()
	m.unmount()
	os.WriteFile(filepath.Join(m.backend, "q", "offline"), make([]byte, 1000), 0o644)
	os.Chown(filepath.Join(m.backend, "q", "offline"), 1000, 1000)
	m.start()
	if v := quotaLine(t, m.procRead("quota"), 1000); v[0] != 1105 || v[2] != 5 || v[3] != 5 {
		t.Errorf("after crash + offline change: %v want bytes 1105 inodes 5", v)
	}
	if _, code := fusetest.AsUser(t, 1000, 1000, nil, m.path("q"), ": > more"); code == 0 {
		t.Errorf("inode limit not enforced after restart")
	}
}

func recycleIDs(list string) map[string]string {
	ids := map[string]string{} // path -> id
	for _, l := range strings.Split(list, "\n") {
		f := strings.Fields(l)
		if len(f) == 6 && !strings.HasPrefix(l, "#") {
			ids[f[5]] = f[0]
		}
	}
	return ids
}

// TestRecycle: deletions go to the bin with path and owner, restore puts
// trees back and refuses to overwrite, purge empties it; users only see
// their own entries; the bin survives a restart.
func TestRecycle(t *testing.T) {
	m := newMount(t, "")
	if err := m.procWrite("recycle", "enable"); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(m.path("t", "a", "b"), 0o755)
	os.WriteFile(m.path("t", "a", "b", "f1"), []byte("one"), 0o644)
	os.WriteFile(m.path("t", "f2"), []byte("two"), 0o644)
	if err := os.RemoveAll(m.path("t")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(m.backend, "t")); !os.IsNotExist(err) {
		t.Fatalf("t still in backend: %v", err)
	}
	list := m.procRead("recycle")
	ids := recycleIDs(list)
	for _, p := range []string{"/t", "/t/a", "/t/a/b", "/t/a/b/f1", "/t/f2"} {
		if ids[p] == "" {
			t.Errorf("%s missing from recycle list:\n%s", p, list)
		}
	}
	if !strings.HasPrefix(list, "# recycle enabled") {
		t.Errorf("state line: %q", list)
	}
	// Survives a restart.
	m.stop()
	m.start()
	if err := m.procWrite("recycle", "restore-tree /t"); err != nil {
		t.Fatalf("restore-tree: %v", err)
	}
	if b, err := os.ReadFile(m.path("t", "a", "b", "f1")); err != nil || string(b) != "one" {
		t.Errorf("restored f1: %q %v", b, err)
	}
	if len(recycleIDs(m.procRead("recycle"))) != 0 {
		t.Errorf("bin not empty after restore-tree")
	}
	// Refuse to overwrite.
	os.Remove(m.path("t", "f2"))
	id := recycleIDs(m.procRead("recycle"))["/t/f2"]
	os.WriteFile(m.path("t", "f2"), []byte("new"), 0o644)
	if err := m.procWrite("recycle", "restore "+id); err == nil || !strings.Contains(err.Error(), "file exists") {
		t.Errorf("restore over an existing file: %v", err)
	}
	if b, _ := os.ReadFile(m.path("t", "f2")); string(b) != "new" {
		t.Errorf("existing file clobbered: %q", b)
	}
	os.Remove(m.path("t", "f2"))
	if err := m.procWrite("recycle", "restore "+id); err != nil {
		t.Errorf("restore: %v", err)
	}
	if b, _ := os.ReadFile(m.path("t", "f2")); string(b) != "two" {
		t.Errorf("restored f2 = %q", b)
	}
	// Users see and restore only their own entries and cannot switch the bin.
	os.Chmod(m.path("t"), 0o777)
	fusetest.AsUser(t, 1000, 1000, nil, m.path("t"), "echo mine > mine && rm mine")
	os.Remove(m.path("t", "f2"))
	out, _ := fusetest.AsUser(t, 1000, 1000, nil, m.path("t"), "cat ../.proc/recycle")
	uids := recycleIDs(out)
	if len(uids) != 1 || uids["/t/mine"] == "" {
		t.Errorf("uid 1000 recycle view: %s", out)
	}
	if _, code := fusetest.AsUser(t, 1000, 1000, nil, m.path("t"), "echo disable > ../.proc/recycle"); code == 0 {
		t.Errorf("uid 1000 disabled the recycle bin")
	}
	if _, code := fusetest.AsUser(t, 1000, 1000, nil, m.path("t"), "echo restore "+recycleIDs(m.procRead("recycle"))["/t/f2"]+" > ../.proc/recycle"); code == 0 {
		t.Errorf("uid 1000 restored root's entry")
	}
	if out, code := fusetest.AsUser(t, 1000, 1000, nil, m.path("t"), "echo restore "+uids["/t/mine"]+" > ../.proc/recycle && cat mine"); code != 0 || out != "mine\n" {
		t.Errorf("uid 1000 restore own: %d %q", code, out)
	}
	// Hard links: removing one of two names unlinks it for good (the
	// data stays under the other name, whose link count drops); the
	// last name goes into the bin and comes back with its data.
	os.WriteFile(m.path("t", "hl1"), []byte("linked"), 0o644)
	os.Link(m.path("t", "hl1"), m.path("t", "hl2"))
	if err := os.Remove(m.path("t", "hl1")); err != nil {
		t.Fatal(err)
	}
	var hs syscall.Stat_t
	if err := syscall.Stat(m.path("t", "hl2"), &hs); err != nil || hs.Nlink != 1 {
		t.Errorf("hl2 after removing hl1: nlink %d, %v; want 1", hs.Nlink, err)
	}
	if err := os.Remove(m.path("t", "hl2")); err != nil {
		t.Fatal(err)
	}
	ids = recycleIDs(m.procRead("recycle"))
	if ids["/t/hl1"] != "" || ids["/t/hl2"] == "" {
		t.Errorf("bin after removing both links: want /t/hl2 only: %v", ids)
	}
	if err := m.procWrite("recycle", "restore "+ids["/t/hl2"]); err != nil {
		t.Errorf("restore hl2: %v", err)
	}
	if b, err := os.ReadFile(m.path("t", "hl2")); err != nil || string(b) != "linked" {
		t.Errorf("restored hl2: %q %v", b, err)
	}
	if err := syscall.Stat(m.path("t", "hl2"), &hs); err != nil || hs.Nlink != 1 {
		t.Errorf("restored hl2: nlink %d, %v; want 1", hs.Nlink, err)
	}
	// Purge.
	if err := m.procWrite("recycle", "purge 1h"); err != nil {
		t.Fatal(err)
	}
	if len(recycleIDs(m.procRead("recycle"))) == 0 {
		t.Errorf("purge 1h removed fresh entries")
	}
	if err := m.procWrite("recycle", "purge all"); err != nil {
		t.Fatal(err)
	}
	if n := len(recycleIDs(m.procRead("recycle"))); n != 0 {
		t.Errorf("%d entries left after purge all", n)
	}
	if ents, _ := os.ReadDir(filepath.Join(m.backend, ".kaon-cfsd", "recycle")); len(ents) != 0 {
		t.Errorf("recycle area not empty after purge: %d", len(ents))
	}
	// Disabled: deletions are final.
	m.procWrite("recycle", "disable")
	os.Remove(m.path("t", "mine"))
	if n := len(recycleIDs(m.procRead("recycle"))); n != 0 {
		t.Errorf("deletion recycled while disabled")
	}
	if err := m.procWrite("recycle", "bogus"); err == nil {
		t.Errorf("unknown command accepted")
	}
}

// TestLifecycle: daemon mode and umount, crash leaves a stale mount that
// the next mount reports (and cleans with --clean-stale).
func TestLifecycle(t *testing.T) {
	d := fusetest.TempDir(t)
	backend, mp := filepath.Join(d, "b"), filepath.Join(d, "m")
	os.Mkdir(backend, 0o755)
	os.Mkdir(mp, 0o755)
	out, err := fusetest.Exec(t, kaonBin, "cfsd", "mount", "--backend", backend, mp)
	if err != nil {
		t.Fatalf("daemon mount: %v %s", err, out)
	}
	untrack := trackMount(t, mp)
	if err := os.WriteFile(filepath.Join(mp, "x"), []byte("daemon"), 0o644); err != nil {
		t.Errorf("write through daemon mount: %v", err)
	}
	if out, err := fusetest.Exec(t, kaonBin, "cfsd", "umount", mp); err != nil {
		t.Fatalf("umount: %v %s", err, out)
	}
	untrack()
	if isMounted(mp) {
		t.Fatalf("still mounted after umount")
	}
	if b, _ := os.ReadFile(filepath.Join(backend, "x")); string(b) != "daemon" {
		t.Errorf("backend x = %q", b)
	}

	m := newMount(t, backend)
	m.kill()
	var sf syscall.Statfs_t
	if err := syscall.Statfs(m.mp, &sf); err != syscall.ENOTCONN {
		t.Fatalf("statfs after kill -9: %v, want ENOTCONN", err)
	}
	out, err = fusetest.Exec(t, kaonBin, "cfsd", "mount", "-f", "--backend", backend, m.mp)
	if err == nil || !strings.Contains(out, "stale") {
		t.Errorf("mount over a stale mount: %v %s", err, out)
	}
	m.args = []string{"--clean-stale"}
	m.start()
	if b, _ := os.ReadFile(m.path("x")); string(b) != "daemon" {
		t.Errorf("data after crash and remount: %q", b)
	}
	if !strings.Contains(m.log.String(), "stale FUSE mount detected") {
		t.Errorf("--clean-stale did not report the stale mount: %s", m.log)
	}
}

// TestLiveMountRefused: `kaon cfsd mount` on a mountpoint a running
// cfsd serves fails naming it, with or without --clean-stale, instead of
// stacking a second mount that hides the first; the first keeps serving.
func TestLiveMountRefused(t *testing.T) {
	m := newMount(t, "")
	if err := os.WriteFile(m.path("x"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(fusetest.TempDir(t), "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{nil, {"--clean-stale"}} {
		args := append(append([]string{"cfsd", "mount", "--backend", other}, extra...), m.mp)
		out, err := fusetest.Exec(t, kaonBin, args...)
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		if n := strings.Count(string(mi), " "+m.mp+" "); n != 1 {
			for ; n > 1; n-- { // stacked: take the newer ones away
				syscall.Unmount(m.mp, syscall.MNT_DETACH)
			}
			t.Fatalf("kaon %v: %d mounts on %s, want 1 (%v: %s)", args, strings.Count(string(mi), " "+m.mp+" "), m.mp, err, out)
		}
		if err == nil || !strings.Contains(out, "already served by a running kaon-cfsd") || !strings.Contains(out, m.backend) {
			t.Errorf("kaon %v on a live mount: %v %s; want a refusal naming the running mount", args, err, out)
		}
	}
	if b, err := os.ReadFile(m.path("x")); err != nil || string(b) != "first" {
		t.Errorf("first mount after the refusals: %q %v", b, err)
	}
}

// TestNoXattrAndFusermount: --no-xattr turns xattrs off (the kernel stops
// asking) without disturbing data; `fusermount3 -u` ends the daemon
// cleanly like `kaon cfsd umount`.
func TestNoXattrAndFusermount(t *testing.T) {
	m := newMount(t, "", "--no-xattr")
	if err := os.WriteFile(m.path("f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := fusetest.Exec(t, "setfattr", "-n", "user.a", "-v", "1", m.path("f"))
	if err == nil || !strings.Contains(out, "not supported") {
		t.Errorf("setfattr with --no-xattr: %v %s", err, out)
	}
	if out, err := fusetest.Exec(t, "fusermount3", "-u", m.mp); err != nil {
		t.Fatalf("fusermount3 -u: %v %s", err, out)
	}
	if exit, err := m.ended("daemon exit after fusermount3 -u"); err != nil || exit != nil {
		t.Errorf("%v %v\n%s", exit, err, m.log)
	}
	if b, _ := os.ReadFile(filepath.Join(m.backend, "f")); string(b) != "x" {
		t.Errorf("backend f = %q", b)
	}
}

// TestBackendChangesVisible: listings are cached in the kernel, but
// entries added or removed directly in the backend (another CephFS
// client, say) show up once the attribute timeout (1s here; 10s by
// default) has passed.
func TestBackendChangesVisible(t *testing.T) {
	m := newMount(t, "", "--attr-timeout", "1s", "--entry-timeout", "1s")
	os.Mkdir(m.path("d"), 0o755)
	os.WriteFile(m.path("d", "a"), nil, 0o644)
	names := func() string {
		ents, err := os.ReadDir(m.path("d"))
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, e := range ents {
			s = append(s, e.Name())
		}
		return strings.Join(s, ",")
	}
	if got := names(); got != "a" {
		t.Fatalf("listing %q", got)
	}
	names() // now served from the kernel's cache
	os.WriteFile(filepath.Join(m.backend, "d", "b"), nil, 0o644)
	os.Remove(filepath.Join(m.backend, "d", "a"))
	time.Sleep(1500 * time.Millisecond)
	if got := names(); got != "b" {
		t.Errorf("after backend change: %q, want b", got)
	}
	if _, err := os.Stat(m.path("d", "a")); !os.IsNotExist(err) {
		t.Errorf("removed-behind-our-back file still visible: %v", err)
	}
}

// TestDaemonStaysOffItsMount: the daemon never resolves a path into its
// own mount once mounted (go-fuse's start-up poll hack opened a file
// there; killed at that moment, the daemon waited forever for its own
// answer to FLUSH) and holds no descriptor there when killed. The backend
// is mounted over itself, so the state dir's path leads through the
// mount: limits and the recycle switch set after mounting must still be
// saved (through the state dir's descriptor) and survive a crash.
func TestDaemonStaysOffItsMount(t *testing.T) {
	d := fusetest.TempDir(t)
	dir := filepath.Join(d, "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	trace := filepath.Join(d, "strace.log")
	m := &mount{t: t, mp: dir, backend: dir, args: []string{"--quota"},
		wrap: []string{"strace", "-f", "-qq", "-o", trace, "-e", "trace=%file"}}
	m.start()
	t.Cleanup(m.stop)
	os.Mkdir(m.path("u"), 0o777)
	if err := m.procWrite("quota", "set 1000 bytes=1M inodes=7"); err != nil {
		t.Errorf("set quota: %v", err)
	}
	if err := m.procWrite("recycle", "enable"); err != nil {
		t.Errorf("enable recycle: %v", err)
	}
	os.WriteFile(m.path("u", "f"), []byte("x"), 0o644)
	os.Remove(m.path("u", "f"))
	m.kill()
	m.unmount()

	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	mounted := -1
	for i, l := range lines {
		if strings.Contains(l, "mount(") && strings.Contains(l, `, "`+dir+`"`) {
			mounted = i
			break
		}
	}
	if mounted < 0 {
		t.Fatalf("no mount(2) on %s in the daemon's trace:\n%s", dir, b)
	}
	for _, l := range lines[mounted:] {
		if strings.Contains(l, `"`+dir+`/`) {
			t.Errorf("daemon resolved a path in its own mount: %s", l)
		}
	}

	m.wrap = nil
	m.start()
	if v := quotaLine(t, m.procRead("quota"), 1000); v[1] != 1<<20 || v[3] != 7 {
		t.Errorf("limits after a crash: %v, want bytes_limit 1M inodes_limit 7", v)
	}
	if l := m.procRead("recycle"); !strings.HasPrefix(l, "# recycle enabled") {
		t.Errorf("recycle switch after a crash: %q", l)
	}
	if ids := recycleIDs(m.procRead("recycle")); ids["/u/f"] == "" {
		t.Errorf("recycled /u/f missing after a crash: %v", ids)
	}
}

package cfsd

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

func rootC() *fuse.Caller { return &fuse.Caller{} }
func userC(uid uint32) *fuse.Caller {
	return &fuse.Caller{Owner: fuse.Owner{Uid: uid, Gid: uid}}
}

func TestQuotaCheckChargePersist(t *testing.T) {
	dir, err := openStateDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.close()
	q, err := openQuota(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.exec(rootC(), []byte("set 1000 bytes=1K inodes=2\n")); err != nil {
		t.Fatal(err)
	}
	if err := q.exec(userC(1000), []byte("set 1000 bytes=0")); err == nil {
		t.Errorf("non-root set a limit")
	}
	for _, bad := range []string{"set", "set 1000 bytes=x", "set 1000 size=1", "frob 1000 bytes=1", "set nosuchuser-xyz bytes=1"} {
		if err := q.exec(rootC(), []byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	q.Charge(1000, 1000, 1)
	if e := q.Check(1000, 24, 1); e != 0 {
		t.Errorf("within limits: %v", e)
	}
	if e := q.Check(1000, 25, 0); e != syscall.EDQUOT {
		t.Errorf("bytes over: %v", e)
	}
	q.Charge(1000, 0, 1)
	if e := q.Check(1000, 0, 1); e != syscall.EDQUOT {
		t.Errorf("inodes over: %v", e)
	}
	if e := q.Check(0, 1<<40, 1<<20); e != 0 {
		t.Errorf("root limited: %v", e)
	}
	if !q.Limited(1000) || q.Limited(1001) {
		t.Errorf("Limited")
	}
	q.Charge(1000, -5000, 0) // never negative
	if u := q.Get(1000); u.Bytes != 0 || u.Inodes != 2 {
		t.Errorf("usage %+v", u)
	}
	table := string(q.render(userC(1000)))
	if !strings.Contains(table, "1000 ") || strings.Count(table, "\n") != 2 {
		t.Errorf("user view:\n%s", table)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q2, err := openQuota(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if u := q2.Get(1000); u.BytesLimit != 1024 || u.InodesLimit != 2 || u.Inodes != 2 {
		t.Errorf("reloaded %+v", u)
	}
	q2.Reconcile(map[uint32]*Usage{1000: {Bytes: 7, Inodes: 1}, 5: {Bytes: 1, Inodes: 1}})
	if u := q2.Get(1000); u.Bytes != 7 || u.Inodes != 1 || u.BytesLimit != 1024 {
		t.Errorf("reconciled %+v", u)
	}
}

func TestParseSizeAge(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "12": 12, "2K": 2048, "3m": 3 << 20, "1G": 1 << 30, "1T": 1 << 40} {
		if v, err := parseSize(in); err != nil || v != want {
			t.Errorf("parseSize(%q) = %d, %v", in, v, err)
		}
	}
	for _, bad := range []string{"", "-1", "K", "1X"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
	if d, _ := parseAge("7d"); d != 7*24*time.Hour {
		t.Errorf("7d = %v", d)
	}
	if d, _ := parseAge("90m"); d != 90*time.Minute {
		t.Errorf("90m = %v", d)
	}
	if d, _ := parseAge("all"); d >= 0 {
		t.Errorf("all = %v", d)
	}
	if _, err := parseAge("soon"); err == nil {
		t.Errorf("bad age accepted")
	}
}

// TestScanAndRecycleJournal builds an FS over a temp backend (no mount):
// the usage scan skips the state dir and counts hard links once, and the
// recycle journal survives reopening while vanished objects are dropped.
func TestScanAndRecycleJournal(t *testing.T) {
	b := t.TempDir()
	os.MkdirAll(filepath.Join(b, "d", "e"), 0o755)
	os.WriteFile(filepath.Join(b, "d", "f"), make([]byte, 100), 0o644)
	os.Link(filepath.Join(b, "d", "f"), filepath.Join(b, "d", "e", "hl"))
	os.Symlink("f", filepath.Join(b, "d", "s"))
	f, err := New(Options{Backend: b, Quota: true})
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(b, ".kaon-cfsd", "junk"), make([]byte, 999), 0o644)
	u := f.scanUsage()[uint32(os.Getuid())]
	if u == nil || u.Bytes != 100 || u.Inodes != 4 { // d, e, f(+hl), s
		t.Errorf("scan = %+v", u)
	}
	// Remove by hand with the bin on: "f" still has the name e/hl, so it
	// is unlinked for good and hl's link count drops; the symlink and
	// then hl (the file's last name) go into the bin.
	r := f.recycle
	for _, c := range []struct {
		dir, name string
		binned    bool
	}{{"d", "f", false}, {"d", "s", true}, {"d/e", "hl", true}} {
		dfd, _ := syscall.Open(filepath.Join(b, c.dir), syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
		n := &node{cfs: f, fd: dfd}
		var st syscall.Stat_t
		binned, e := r.Remove(rootC(), n, c.name, &st, false)
		syscall.Close(dfd)
		if e != 0 || binned != c.binned {
			t.Fatalf("remove %s/%s: binned %v, %v; want binned %v", c.dir, c.name, binned, e, c.binned)
		}
		if c.name == "f" {
			var hl syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(b, "d", "e", "hl"), &hl); err != nil || hl.Nlink != 1 {
				t.Errorf("hl after removing f: nlink %d, %v; want 1", hl.Nlink, err)
			}
		}
	}
	if got := len(r.List(rootC())); got != 2 {
		t.Fatalf("%d entries", got)
	}
	if len(r.List(userC(4242))) != 0 {
		t.Errorf("other user sees root's entries")
	}
	ids := r.List(rootC())
	f.Close()
	// One object vanishes while the daemon is down.
	os.Remove(filepath.Join(b, ".kaon-cfsd", "recycle", ids[0].ID))
	f2, err := New(Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	l := f2.recycle.List(rootC())
	if len(l) != 1 || l[0].ID != ids[1].ID || l[0].Type != "file" || l[0].Size != 100 {
		t.Errorf("reopened journal: %+v", l)
	}
	if f2.recycle.Enabled() {
		t.Errorf("recycle should stay disabled")
	}
}

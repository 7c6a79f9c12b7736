package namespace

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

func place(l layout.Layout, _ string) ([]uint32, error) {
	locs := make([]uint32, l.Stripes())
	for i := range locs {
		locs[i] = uint32(i + 1)
	}
	return locs, nil
}

func newNS(t *testing.T) *Namespace {
	ns, err := Open(memkv.New(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func mustKind(t *testing.T, err error, k kerr.Kind) {
	t.Helper()
	if kerr.KindOf(err) != k {
		t.Fatalf("got %v (kind %v), want kind %v", err, kerr.KindOf(err), k)
	}
}

func errOf[T any](_ T, err error) error { return err }

func create(t *testing.T, ns *Namespace, p string, size int64) *Inode {
	t.Helper()
	f, err := ns.BeginCreate(Root, p, CreateOptions{}, place)
	if err != nil {
		t.Fatal(err)
	}
	f, err = ns.Commit(f.ID, size, map[string]string{"adler32": "0000abcd"})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestPendingInvisibleUntilCommit(t *testing.T) {
	ns := newNS(t)
	f, err := ns.BeginCreate(Root, "/f", CreateOptions{}, place)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ns.Stat(Root, "/f")
	mustKind(t, err, kerr.NotFound)
	if _, err := ns.Commit(f.ID, 42, map[string]string{"adler32": "01020304", "md5": "x"}); err != nil {
		t.Fatal(err)
	}
	st, err := ns.Stat(Root, "/f")
	if err != nil || st.Size != 42 || st.Checksums["adler32"] != "01020304" || st.ID != f.ID {
		t.Fatalf("after commit: %+v %v", st, err)
	}
	_, err = ns.Commit(f.ID, 1, nil)
	mustKind(t, err, kerr.Aborted)
}

func TestAccountingAndRename(t *testing.T) {
	ns := newNS(t)
	if err := ns.Mkdir(Root, "/a/b/c", 0o755, true); err != nil {
		t.Fatal(err)
	}
	create(t, ns, "/a/b/c/f1", 100)
	create(t, ns, "/a/b/f2", 10)
	f3 := create(t, ns, "/a/f3", 1)
	root, _ := ns.Stat(Root, "/")
	a, _ := ns.Stat(Root, "/a")
	if root.TreeSize != 111 || root.TreeFiles != 3 || root.TreeDirs != 3 || a.TreeSize != 111 || a.TreeDirs != 2 {
		t.Fatalf("root %+v a %+v", root, a)
	}
	// Overwrite replaces size, keeps the count, queues the old data.
	create(t, ns, "/a/f3", 5)
	a, _ = ns.Stat(Root, "/a")
	if a.TreeSize != 115 || a.TreeFiles != 3 {
		t.Fatalf("after overwrite %+v", a)
	}
	if ds, _ := ns.Deletions(1, 10); len(ds) != 1 || ds[0].Fid != f3.ID {
		t.Fatalf("deletions %+v", ds)
	}
	// Rename moves accounting, keeps the fid (no data copy).
	c1, _ := ns.Stat(Root, "/a/b/c/f1")
	if err := ns.Mkdir(Root, "/z", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Rename(Root, "/a/b", "/z/b", false); err != nil {
		t.Fatal(err)
	}
	moved, err := ns.Stat(Root, "/z/b/c/f1")
	if err != nil || moved.ID != c1.ID {
		t.Fatalf("moved %+v %v", moved, err)
	}
	a, _ = ns.Stat(Root, "/a")
	z, _ := ns.Stat(Root, "/z")
	if a.TreeSize != 5 || a.TreeFiles != 1 || a.TreeDirs != 0 || z.TreeSize != 110 || z.TreeDirs != 2 {
		t.Fatalf("a %+v z %+v", a, z)
	}
	if _, p, err := ns.ByID(c1.ID); err != nil || p != "/z/b/c/f1" {
		t.Fatalf("ByID path %q %v", p, err)
	}
	mustKind(t, errOf(ns.Rename(Root, "/z", "/z/b/c/z", false)), kerr.Invalid)
	mustKind(t, errOf(ns.Rename(Root, "/z", "/z", false)), kerr.Invalid)
	mustKind(t, errOf(ns.Rename(Root, "/a/f3", "/z/b", true)), kerr.IsDir)
	mustKind(t, ns.Remove(Root, "/z", RemoveOptions{Dir: true}), kerr.NotEmpty)
	if err := ns.Remove(Root, "/z", RemoveOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	root, _ = ns.Stat(Root, "/")
	if root.TreeSize != 5 || root.TreeFiles != 1 || root.TreeDirs != 1 {
		t.Fatalf("root after rm -r %+v", root)
	}
}

func TestErrors(t *testing.T) {
	ns := newNS(t)
	create(t, ns, "/file", 1)
	mustKind(t, ns.Mkdir(Root, "/file", 0o755, false), kerr.Exists)
	mustKind(t, ns.Mkdir(Root, "/file/x", 0o755, true), kerr.NotDir)
	mustKind(t, ns.Mkdir(Root, "/no/x", 0o755, false), kerr.NotFound)
	_, err := ns.BeginCreate(Root, "/", CreateOptions{}, place)
	mustKind(t, err, kerr.IsDir)
	_ = ns.Mkdir(Root, "/d", 0o755, false)
	_, err = ns.BeginCreate(Root, "/d", CreateOptions{}, place)
	mustKind(t, err, kerr.IsDir)
	_, err = ns.BeginCreate(Root, "/file", CreateOptions{Exclusive: true}, place)
	mustKind(t, err, kerr.Exists)
	_, err = ns.BeginCreate(Root, "/d/x", CreateOptions{Layout: "raid7"}, place)
	mustKind(t, err, kerr.Invalid)
	mustKind(t, ns.SetXAttr(Root, "/d", nsapi.AttrLayout, "ec:0+2"), kerr.Invalid)
	user := Caller{UID: 1000, GID: 1000}
	mustKind(t, ns.SetXAttr(user, "/d", nsapi.AttrLayout, "plain"), kerr.Permission)
	mustKind(t, ns.Mkdir(user, "/d/u", 0o755, false), kerr.Permission)
	mustKind(t, ns.Remove(Root, "/d", RemoveOptions{}), kerr.IsDir)
}

func TestLayoutInheritance(t *testing.T) {
	ns := newNS(t)
	_ = ns.Mkdir(Root, "/ec", 0o755, false)
	if err := ns.SetXAttr(Root, "/ec", nsapi.AttrLayout, "ec:4+2"); err != nil {
		t.Fatal(err)
	}
	_ = ns.Mkdir(Root, "/ec/sub", 0o755, false)
	f, err := ns.BeginCreate(Root, "/ec/sub/f", CreateOptions{}, place)
	if err != nil {
		t.Fatal(err)
	}
	if f.Layout != "ec:4+2:1048576" || len(f.Locations) != 6 {
		t.Fatalf("layout %q locs %v", f.Layout, f.Locations)
	}
}

func TestPersistenceAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	open := func() (*Namespace, kv.Engine) {
		e, err := pebblekv.Open(dir, pebblekv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ns, err := Open(e, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return ns, e
	}
	ns, e := open()
	_ = ns.Mkdir(Root, "/a", 0o755, false)
	f := create(t, ns, "/a/f", 7)
	pending, _ := ns.BeginCreate(Root, "/a/half", CreateOptions{}, place)
	e.Close()
	ns, e = open()
	defer e.Close()
	st, err := ns.Stat(Root, "/a/f")
	if err != nil || st.ID != f.ID || st.Size != 7 {
		t.Fatalf("after reopen %+v %v", st, err)
	}
	_, err = ns.Stat(Root, "/a/half")
	mustKind(t, err, kerr.NotFound)
	g := create(t, ns, "/a/g", 1)
	if g.ID <= pending.ID {
		t.Fatalf("id reused after restart: %d <= %d", g.ID, pending.ID)
	}
	root, _ := ns.Stat(Root, "/")
	if root.TreeFiles != 2 || root.TreeSize != 8 {
		t.Fatalf("accounting after reopen %+v", root)
	}
}

func TestConcurrentCreates(t *testing.T) {
	ns := newNS(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			d := fmt.Sprintf("/d%d", g)
			if err := ns.Mkdir(Root, d, 0o755, false); err != nil {
				t.Error(err)
				return
			}
			for i := 0; i < 50; i++ {
				f, err := ns.BeginCreate(Root, fmt.Sprintf("%s/f%d", d, i), CreateOptions{}, place)
				if err == nil {
					_, err = ns.Commit(f.ID, 2, nil)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := ns.Stat(Root, "/"); err != nil {
					t.Error(err)
				}
			}
		}(g)
	}
	wg.Wait()
	root, _ := ns.Stat(Root, "/")
	if root.TreeFiles != 400 || root.TreeSize != 800 || root.TreeDirs != 8 {
		t.Fatalf("root %+v", root)
	}
	ents, _ := ns.List(Root, "/d3")
	if len(ents) != 50 {
		t.Fatalf("list: %d", len(ents))
	}
}

func TestCreateEmpty(t *testing.T) {
	ns := newNS(t)
	old := create(t, ns, "/f", 10)
	f, err := ns.CreateEmpty(Root, "/f", CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f.Size != 0 || f.Checksums["adler32"] != "00000001" || len(f.Locations) != 0 {
		t.Fatalf("empty file %+v", f)
	}
	if _, _, err := ns.ByID(old.ID); kerr.KindOf(err) != kerr.NotFound {
		t.Fatalf("replaced file still indexed: %v", err)
	}
	if ds, _ := ns.Deletions(1, 10); len(ds) != 1 || ds[0].Fid != old.ID {
		t.Fatalf("old data not queued: %+v", ds)
	}
	_, err = ns.CreateEmpty(Root, "/f", CreateOptions{Exclusive: true})
	mustKind(t, err, kerr.Exists)
	root, _ := ns.Stat(Root, "/")
	if root.TreeFiles != 1 || root.TreeSize != 0 {
		t.Fatalf("root %+v", root)
	}
}

// benchNS is a Pebble-backed namespace with an empty /d, closed at the end.
func benchNS(b *testing.B) *Namespace {
	e, err := pebblekv.Open(b.TempDir(), pebblekv.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	ns, err := Open(e, Options{})
	if err != nil {
		b.Fatal(err)
	}
	_ = ns.Mkdir(Root, "/d", 0o755, false)
	return ns
}

func BenchmarkCreateStat(b *testing.B) {
	ns := benchNS(b)
	b.Run("create", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := ns.CreateEmpty(Root, fmt.Sprintf("/d/f%d", i), CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stat", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, _ = ns.Stat(Root, "/d/f1")
		}
	})
}

func BenchmarkStatParallel(b *testing.B) {
	ns := benchNS(b)
	const n = 100000
	for i := 0; i < n; i++ {
		if _, err := ns.CreateEmpty(Root, fmt.Sprintf("/d/f%d", i), CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) % n
			if _, err := ns.Stat(Root, "/d/f"+strconv.FormatInt(i, 10)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func TestAddChecksums(t *testing.T) {
	ns := newNS(t)
	f, err := ns.BeginCreate(Root, "/f", CreateOptions{}, place)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Commit(f.ID, 42, map[string]string{"adler32": "01020304", "crc32c": "0a0b0c0d"}); err != nil {
		t.Fatal(err)
	}
	// A recorded value is never replaced; a missing type is added.
	if err := ns.AddChecksums(f.ID, 0, map[string]string{"adler32": "ffffffff", "md5": "00112233445566778899aabbccddeeff"}); err != nil {
		t.Fatal(err)
	}
	st, err := ns.Stat(Root, "/f")
	if err != nil || st.Checksums["adler32"] != "01020304" || st.Checksums["md5"] != "00112233445566778899aabbccddeeff" || st.Size != 42 {
		t.Fatalf("after AddChecksums: %+v %v", st, err)
	}
	// The file was replaced meanwhile: the late value must not land on the new file.
	create(t, ns, "/f", 7)
	mustKind(t, ns.AddChecksums(f.ID, 0, map[string]string{"sha256": "00"}), kerr.NotFound)
	if st, _ := ns.Stat(Root, "/f"); st.Checksums["sha256"] != "" {
		t.Fatalf("checksum landed on the replacing file: %+v", st.Checksums)
	}
}

// TestClaimUploadOnce: a pending upload can be claimed once; never again
// after that, after its commit or after its abort.
func TestClaimUploadOnce(t *testing.T) {
	ns := newNS(t)
	f, err := ns.BeginCreate(Root, "/c", CreateOptions{}, place)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.ClaimUpload(f.ID); err != nil {
		t.Fatal(err)
	}
	_, err = ns.ClaimUpload(f.ID)
	mustKind(t, err, kerr.Permission)
	if _, err := ns.Commit(f.ID, 1, nil); err != nil {
		t.Fatal(err)
	}
	_, err = ns.ClaimUpload(f.ID)
	mustKind(t, err, kerr.Permission)
	g, err := ns.BeginCreate(Root, "/d", CreateOptions{}, place)
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Abort(g.ID); err != nil {
		t.Fatal(err)
	}
	_, err = ns.ClaimUpload(g.ID)
	mustKind(t, err, kerr.Permission)
}

// TestChangeFeed: every mutation shows up in the feed, in commit order,
// with what a cache needs to invalidate.
func TestChangeFeed(t *testing.T) {
	ns := newNS(t)
	ctx := context.Background()
	start := ns.Revision()
	if err := ns.Mkdir(Root, "/a", 0o755, false); err != nil {
		t.Fatal(err)
	}
	f := create(t, ns, "/a/f", 10)
	if err := ns.Chmod(Root, "/a/f", 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Rename(Root, "/a/f", "/a/g", false); err != nil {
		t.Fatal(err)
	}
	if err := ns.Remove(Root, "/a", RemoveOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	evs, err := ns.Changes(ctx, start, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, e := range evs {
		if e.Rev != start+uint64(i)+1 {
			t.Fatalf("event %d has rev %d", i, e.Rev)
		}
		got = append(got, fmt.Sprintf("%s %s", e.Kind, e.Name))
	}
	want := []string{"mkdir a", "created f", "committed f", "attr f", "renamed g", "removed g", "removed a"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if evs[4].From == 0 || evs[4].FromName != "f" || evs[4].Ino != f.ID {
		t.Fatalf("rename event %+v", evs[4])
	}
	// A reader waits for the next event.
	done := make(chan []Event, 1)
	go func() {
		evs, _ := ns.Changes(ctx, ns.Revision(), 10)
		done <- evs
	}()
	time.Sleep(10 * time.Millisecond)
	if err := ns.Mkdir(Root, "/later", 0o755, false); err != nil {
		t.Fatal(err)
	}
	select {
	case evs := <-done:
		if len(evs) != 1 || evs[0].Name != "later" {
			t.Fatalf("woken with %+v", evs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting reader was not woken by a mutation within 5s")
	}
	// A reader that fell behind the ring is told so.
	small, _ := Open(memkv.New(), Options{FeedSize: 2})
	for i := 0; i < 4; i++ {
		small.Mkdir(Root, fmt.Sprintf("/d%d", i), 0o755, false)
	}
	if _, err := small.Changes(ctx, 0, 10); !kerr.Is(err, kerr.Busy) {
		t.Fatalf("reading dropped events: %v", err)
	}
}

// TestInodeAPI: Lookup, GetAttr and ReadDir answer by inode what Stat and
// List answer by path, with the same permission rules.
func TestInodeAPI(t *testing.T) {
	ns := newNS(t)
	user := Caller{UID: 1000, GID: 1000}
	ns.Mkdir(Root, "/d", 0o711, false)
	f := create(t, ns, "/d/f", 5)
	ns.Chmod(Root, "/d/f", 0o600)
	d, err := ns.Lookup(user, RootID, "d")
	if err != nil || !d.IsDir {
		t.Fatalf("Lookup /d: %+v %v", d, err)
	}
	got, err := ns.Lookup(user, d.ID, "f")
	if err != nil || got.ID != f.ID || got.Size != 5 {
		t.Fatalf("Lookup /d/f: %+v %v", got, err)
	}
	if got.Checksums != nil {
		t.Fatal("checksums of an unreadable file shown to another user")
	}
	if _, err := ns.ReadDir(user, d.ID); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("ReadDir of a 0711 directory by another user: %v", err)
	}
	ents, err := ns.ReadDir(Root, d.ID)
	if err != nil || len(ents) != 1 || ents[0].Name != "f" {
		t.Fatalf("ReadDir: %v %v", ents, err)
	}
	if a, err := ns.GetAttr(Root, f.ID); err != nil || a.Name != "f" || a.Checksums["adler32"] != "0000abcd" {
		t.Fatalf("GetAttr file: %+v %v", a, err)
	}
	if _, err := ns.GetAttr(Root, 999999); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("GetAttr missing: %v", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b"} {
		if _, err := ns.Lookup(Root, RootID, bad); !kerr.Is(err, kerr.Invalid) {
			t.Fatalf("Lookup %q: %v", bad, err)
		}
	}
	if _, err := ns.Lookup(Root, f.ID, "x"); !kerr.Is(err, kerr.NotDir) {
		t.Fatalf("Lookup below a file: %v", err)
	}
}

// TestModeBitsAndACLs: the namespace authorizes with the mode bits and
// the directory's ACLs, which add rights the mode bits do not give and
// deny deletion the mode bits would allow.
func TestModeBitsAndACLs(t *testing.T) {
	ns := newNS(t)
	user := Caller{UID: 1000, GID: 1000}
	if err := ns.Mkdir(Root, "/d", 0o755, false); err != nil {
		t.Fatal(err)
	}
	mustKind(t, ns.Mkdir(user, "/d/x", 0o755, false), kerr.Permission)
	if err := ns.SetXAttr(Root, "/d", nsapi.AttrACL, "u:1000:rwx"); err != nil {
		t.Fatal(err)
	}
	if err := ns.Mkdir(user, "/d/x", 0o755, false); err != nil {
		t.Fatalf("mkdir where an ACL grants write: %v", err)
	}
	if err := ns.Mkdir(Root, "/e", 0o777, false); err != nil {
		t.Fatal(err)
	}
	if err := ns.Mkdir(user, "/e/x", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if err := ns.SetXAttr(Root, "/e", nsapi.AttrACL, "u:1000:rwx!d"); err != nil {
		t.Fatal(err)
	}
	mustKind(t, ns.Remove(user, "/e/x", RemoveOptions{Dir: true}), kerr.Permission)
	if _, err := ns.Stat(user, "/e/x"); err != nil {
		t.Fatalf("the directory whose removal was refused: %v", err)
	}
}

// TestFilesystemRegistry: registrations are namespace records.
func TestFilesystemRegistry(t *testing.T) {
	ns := newNS(t)
	for i := uint32(1); i <= 3; i++ {
		if err := ns.SaveFilesystem(Filesystem{ID: i, Node: "n", Path: fmt.Sprintf("/d%d", i), UUID: "u"}); err != nil {
			t.Fatal(err)
		}
	}
	ns.SaveFilesystem(Filesystem{ID: 2, Node: "n", Path: "/d2", ConfigStatus: "ro"})
	fss, err := ns.Filesystems()
	if err != nil || len(fss) != 3 || fss[1].ConfigStatus != "ro" || fss[2].Path != "/d3" {
		t.Fatalf("filesystems %+v %v", fss, err)
	}
}

// TestColdCacheConcurrentReaders: readers that load containers into the
// cache at the same time (after a restart) do not race (run with -race).
func TestColdCacheConcurrentReaders(t *testing.T) {
	eng := memkv.New()
	ns, _ := Open(eng, Options{})
	for i := 0; i < 20; i++ {
		ns.Mkdir(Root, fmt.Sprintf("/d%d/e/f", i), 0o755, true)
	}
	ns2, err := Open(eng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if _, err := ns2.Stat(Root, fmt.Sprintf("/d%d/e/f", i)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

// TestQuota: limits hold at open (bookings) and at commit (real sizes),
// racing uploads never go above a limit, failed uploads release their
// booking, and usage follows removes, renames and chowns, survives a
// reopen and equals a recount.
func TestQuota(t *testing.T) {
	eng := memkv.New()
	ns, _ := Open(eng, Options{})
	alice := Caller{UID: 1000, GID: 1000}
	ns.Mkdir(Root, "/q", 0o777, false)
	ns.Mkdir(Root, "/free", 0o777, false)
	upload := func(c Caller, p string, hint, size int64) error {
		f, err := ns.BeginCreate(c, p, CreateOptions{SizeHint: hint}, place)
		if err != nil {
			return err
		}
		_, err = ns.Commit(f.ID, size, nil)
		return err
	}
	// A file below before the node exists is counted when it is made one.
	if err := upload(alice, "/q/before", 10, 10); err != nil {
		t.Fatal(err)
	}
	if err := ns.SetQuota(Root, "/q", QuotaKey{QuotaUser, 1000}, Amount{Bytes: 100, Files: 5}); err != nil {
		t.Fatal(err)
	}
	used := func() Amount {
		qs, err := ns.Quotas(Root, "/")
		if err != nil || len(qs) != 1 {
			t.Fatalf("quota ls: %+v %v", qs, err)
		}
		return qs[0].Used[QuotaKey{QuotaUser, 1000}]
	}
	if u := used(); u != (Amount{10, 1}) {
		t.Fatalf("initial usage %+v", u)
	}
	mustKind(t, upload(alice, "/q/big", 95, 95), kerr.Quota)
	// Bookings: two uploads of 50 announced fit, a third does not.
	f1, err := ns.BeginCreate(alice, "/q/a", CreateOptions{SizeHint: 50}, place)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ns.BeginCreate(alice, "/q/b", CreateOptions{SizeHint: 50}, place)
	mustKind(t, err, kerr.Quota)
	if err := ns.Abort(f1.ID); err != nil {
		t.Fatal(err)
	}
	if err := upload(alice, "/q/b", 50, 50); err != nil {
		t.Fatalf("after an abort released its booking: %v", err)
	}
	// An upload that announced little but wrote more is refused at commit.
	mustKind(t, upload(alice, "/q/liar", 1, 60), kerr.Quota)
	if _, err := ns.Stat(Root, "/q/liar"); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("over-quota upload visible: %v", err)
	}
	if u := used(); u != (Amount{60, 2}) {
		t.Fatalf("usage after refusals %+v", u)
	}
	// Other users are not limited by alice's quota; the project is summed.
	if err := upload(Caller{UID: 2000, GID: 2000}, "/q/bob", 500, 500); err != nil {
		t.Fatal(err)
	}
	// Remove, rename out, rename in (checked), chown.
	if err := ns.Remove(alice, "/q/before", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Rename(alice, "/q/b", "/free/b", false); err != nil {
		t.Fatal(err)
	}
	if u := used(); u != (Amount{0, 0}) {
		t.Fatalf("usage after remove and rename out %+v", u)
	}
	upload(alice, "/free/huge", 0, 101)
	_, err = ns.Rename(alice, "/free/huge", "/q/huge", false)
	mustKind(t, err, kerr.Quota)
	if _, err := ns.Rename(alice, "/free/b", "/q/b", false); err != nil {
		t.Fatal(err)
	}
	if err := ns.Chown(Root, "/q/bob", 1000, 1000); err != nil {
		t.Fatal(err)
	}
	// Files limit.
	ns.SetQuota(Root, "/q", QuotaKey{QuotaUser, 1000}, Amount{Bytes: 10000, Files: 4})
	for i := 0; i < 2; i++ {
		if err := upload(alice, fmt.Sprintf("/q/s%d", i), 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	mustKind(t, upload(alice, "/q/s9", 1, 1), kerr.Quota)
	// Persisted, and equal to a recount.
	ns2, err := Open(eng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	qs, _ := ns2.Quotas(Root, "/q")
	recount, err := ns2.RecountQuota(Root, "/q")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range recount {
		if qs[0].Used[k] != v {
			t.Fatalf("%s: stored %+v, recount %+v", k, qs[0].Used[k], v)
		}
	}
	if qs[0].Used[QuotaKey{QuotaUser, 1000}] != (Amount{552, 4}) {
		t.Fatalf("after reopen %+v", qs[0].Used)
	}
	if err := ns2.RemoveQuota(Root, "/q", QuotaKey{QuotaUser, 1000}); err != nil {
		t.Fatal(err)
	}
	if qs, _ := ns2.Quotas(Root, "/"); len(qs) != 0 {
		t.Fatalf("quota node left after its last limit: %+v", qs)
	}
}

// TestQuotaRace: 16 uploads racing for the last bytes of a quota never
// leave usage above the limit.
func TestQuotaRace(t *testing.T) {
	ns := newNS(t)
	ns.Mkdir(Root, "/q", 0o777, false)
	ns.SetQuota(Root, "/q", QuotaKey{QuotaProject, 0}, Amount{Bytes: 1000})
	var wg sync.WaitGroup
	var ok atomic.Int32
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			hint := int64(100)
			if i%2 == 0 {
				hint = 0 // no size announced: checked at commit only
			}
			f, err := ns.BeginCreate(Caller{UID: uint32(1000 + i)}, fmt.Sprintf("/q/f%d", i), CreateOptions{SizeHint: hint}, place)
			if err != nil {
				return
			}
			if _, err := ns.Commit(f.ID, 100, nil); err == nil {
				ok.Add(1)
			}
		}(i)
	}
	wg.Wait()
	qs, _ := ns.Quotas(Root, "/q")
	u := qs[0].Used[QuotaKey{QuotaProject, 0}]
	if u.Bytes > 1000 || u.Bytes != int64(ok.Load())*100 || ok.Load() != 10 {
		t.Fatalf("usage %+v with %d uploads committed", u, ok.Load())
	}
	if len(qs[0].Booked) != 0 {
		t.Fatalf("bookings left: %+v", qs[0].Booked)
	}
}

// TestRecycle: deletes below sys.recycle are recoverable (files and
// trees), keep counting in their quota node until purged, are listed to
// their owner only, restore refuses to overwrite (or renames beside), and
// purge queues the data for deletion.
func TestRecycle(t *testing.T) {
	eng := memkv.New()
	ns, _ := Open(eng, Options{})
	alice := Caller{UID: 1000, GID: 1000}
	ns.Mkdir(Root, "/r", 0o777, false)
	ns.SetXAttr(Root, "/r", nsapi.AttrRecycle, "on")
	ns.SetQuota(Root, "/r", QuotaKey{QuotaProject, 0}, Amount{Bytes: 1 << 20})
	ns.Mkdir(alice, "/r/tree/sub", 0o755, true)
	f, _ := ns.BeginCreate(alice, "/r/tree/sub/f", CreateOptions{}, place)
	ns.Commit(f.ID, 100, nil)
	g, _ := ns.BeginCreate(alice, "/r/g", CreateOptions{}, place)
	ns.Commit(g.ID, 10, nil)
	usage := func() Amount {
		qs, _ := ns.Quotas(Root, "/r")
		return qs[0].Used[QuotaKey{QuotaProject, 0}]
	}
	if err := ns.Remove(alice, "/r/g", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ns.Remove(alice, "/r/tree", RemoveOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Stat(Root, "/r/tree"); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("recycled tree still visible: %v", err)
	}
	if d, _ := ns.Stat(Root, "/r"); d.TreeFiles != 0 || d.TreeSize != 0 {
		t.Fatalf("tree accounting after recycling: %+v", d)
	}
	if u := usage(); u != (Amount{110, 2}) {
		t.Fatalf("recycled data must keep counting in its quota node: %+v", u)
	}
	if ds, _ := ns.Deletions(1, 10); len(ds) != 0 {
		t.Fatalf("recycled data queued for deletion: %v", ds)
	}
	es, err := ns.RecycleList(alice)
	if err != nil || len(es) != 2 || es[0].Path != "/r/g" || es[1].Path != "/r/tree" || !es[1].Dir || es[1].Files != 1 {
		t.Fatalf("recycle ls: %+v %v", es, err)
	}
	if es, _ := ns.RecycleList(Caller{UID: 2000}); len(es) != 0 {
		t.Fatalf("another user sees alice's entries: %+v", es)
	}
	if _, err := ns.RecycleRestore(Caller{UID: 2000}, es[1].Key, false); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("another user restores: %v", err)
	}
	// Restore the tree; a new /r/g blocks restoring the file unless renamed.
	if p, err := ns.RecycleRestore(alice, es[1].Key, false); err != nil || p != "/r/tree" {
		t.Fatalf("restore tree: %q %v", p, err)
	}
	if n, err := ns.Stat(alice, "/r/tree/sub/f"); err != nil || n.Size != 100 {
		t.Fatalf("restored file: %+v %v", n, err)
	}
	h, _ := ns.BeginCreate(alice, "/r/g", CreateOptions{}, place)
	ns.Commit(h.ID, 5, nil)
	if _, err := ns.RecycleRestore(alice, es[0].Key, false); !kerr.Is(err, kerr.Exists) {
		t.Fatalf("restore over an existing file: %v", err)
	}
	p, err := ns.RecycleRestore(alice, es[0].Key, true)
	if err != nil || !strings.HasPrefix(p, "/r/g.restored-") {
		t.Fatalf("restore beside: %q %v", p, err)
	}
	if u := usage(); u != (Amount{115, 3}) {
		t.Fatalf("usage after restores: %+v", u)
	}
	// Purge: data queued for deletion, usage released.
	if err := ns.Remove(alice, "/r/tree", RemoveOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if n, err := ns.RecyclePurge(alice, "", 0); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if ds, _ := ns.Deletions(1, 10); len(ds) != 1 || ds[0].Fid != f.ID {
		t.Fatalf("purged data not queued: %v", ds)
	}
	if u := usage(); u != (Amount{15, 2}) {
		t.Fatalf("usage after purge: %+v", u)
	}
	// Bypass, expiry by age, and a reopen keeps the bin.
	ns.Remove(alice, p, RemoveOptions{NoRecycle: true})
	ns.Remove(alice, "/r/g", RemoveOptions{})
	ns2, _ := Open(eng, Options{Now: func() time.Time { return time.Now().Add(48 * time.Hour) }})
	if es, _ := ns2.RecycleList(Root); len(es) != 1 {
		t.Fatalf("after reopen: %+v", es)
	}
	if n, err := ns2.RecycleExpire(24*time.Hour, 0); err != nil || n != 1 {
		t.Fatalf("expire: %d %v", n, err)
	}
	if _, err := ns2.Stat(Root, "/.kaon-recycle"); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("the bin is reachable by path: %v", err)
	}
}

// TestSetMTime: utimensat's rules — an explicit time by the owner (or
// root) only, the current time also by whoever may write the file; the
// time set is what stat answers.
func TestSetMTime(t *testing.T) {
	ns := newNS(t)
	if err := ns.Mkdir(Root, "/t", 0o777, false); err != nil {
		t.Fatal(err)
	}
	create(t, ns, "/t/f", 1)
	if err := ns.Chmod(Root, "/t/f", 0o666); err != nil {
		t.Fatal(err)
	}
	other := Caller{UID: 1000, GID: 1000}
	want := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC).UnixNano()
	mustKind(t, ns.SetMTime(other, "/t/f", want, false), kerr.Permission)
	if err := ns.SetMTime(Root, "/t/f", want, false); err != nil {
		t.Fatal(err)
	}
	if n, err := ns.Stat(Root, "/t/f"); err != nil || n.MTime != want {
		t.Fatalf("mtime after utimes: %v %v, want %d", n.MTime, err, want)
	}
	if err := ns.SetMTime(other, "/t/f", 0, true); err != nil {
		t.Fatalf("utimes now by a writer: %v", err)
	}
	if n, _ := ns.Stat(Root, "/t/f"); n.MTime == want {
		t.Fatal("utimes now left the explicit time")
	}
	if err := ns.Chmod(Root, "/t/f", 0o644); err != nil {
		t.Fatal(err)
	}
	mustKind(t, ns.SetMTime(other, "/t/f", 0, true), kerr.Permission)
}

// TestOwnerChgrpAndSetgid: a file's owner may change its group to one of
// theirs, never give it away nor pick another group (POSIX chown); in a
// set-group-ID directory new entries take the directory's group and new
// directories stay set-group-ID.
func TestOwnerChgrpAndSetgid(t *testing.T) {
	ns := newNS(t)
	alice := Caller{UID: 1000, GID: 1000, Groups: []uint32{1000, 2000}}
	if err := ns.Mkdir(Root, "/pub", 0o777, false); err != nil {
		t.Fatal(err)
	}
	f, err := ns.BeginCreate(alice, "/pub/mine", CreateOptions{}, place)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Commit(f.ID, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := ns.Chown(alice, "/pub/mine", 1000, 2000); err != nil {
		t.Fatalf("owner to a group of theirs: %v", err)
	}
	mustKind(t, ns.Chown(alice, "/pub/mine", 1000, 3000), kerr.Permission)
	mustKind(t, ns.Chown(alice, "/pub/mine", 0, 2000), kerr.Permission)
	mustKind(t, ns.Chown(Caller{UID: 1001, GID: 2000, Groups: []uint32{2000}}, "/pub/mine", 1000, 2000), kerr.Permission)
	if st, _ := ns.Stat(Root, "/pub/mine"); st.UID != 1000 || st.GID != 2000 {
		t.Fatalf("after chgrp: %d:%d, want 1000:2000", st.UID, st.GID)
	}

	if err := ns.Mkdir(Root, "/sgid", 0o777, false); err != nil {
		t.Fatal(err)
	}
	ns.Chown(Root, "/sgid", 0, 2000)
	ns.Chmod(Root, "/sgid", 0o2777)
	if err := ns.Mkdir(alice, "/sgid/sd", 0o755, false); err != nil {
		t.Fatal(err)
	}
	g, err := ns.BeginCreate(alice, "/sgid/sf", CreateOptions{}, place)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Commit(g.ID, 0, nil); err != nil {
		t.Fatal(err)
	}
	if st, _ := ns.Stat(Root, "/sgid/sd"); st.UID != 1000 || st.GID != 2000 || st.Mode != 0o2755 {
		t.Errorf("dir in a setgid dir: %d:%d %o, want 1000:2000 2755", st.UID, st.GID, st.Mode)
	}
	if st, _ := ns.Stat(Root, "/sgid/sf"); st.UID != 1000 || st.GID != 2000 {
		t.Errorf("file in a setgid dir: %d:%d, want 1000:2000", st.UID, st.GID)
	}
	if err := ns.Mkdir(alice, "/pub/plain", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if st, _ := ns.Stat(Root, "/pub/plain"); st.GID != 1000 || st.Mode != 0o755 {
		t.Errorf("dir in a plain dir: gid %d %o, want 1000 755", st.GID, st.Mode)
	}
}

// TestReplaceKeepsMode: an upload that replaces a file and names no mode
// keeps the permission bits of the file it replaces (open(O_TRUNC)): a
// private file stays private (kaon mount streams a file written from
// its start as such an upload); setuid and setgid go with the old
// content; a mode named wins, and a new file gets the default.
func TestReplaceKeepsMode(t *testing.T) {
	ns := newNS(t)
	if _, err := ns.CreateEmpty(Root, "/p", CreateOptions{Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	if f := create(t, ns, "/p", 5); f.Mode&0o7777 != 0o600 {
		t.Fatalf("a private file replaced with no mode named: mode %o, want 600", f.Mode&0o7777)
	}
	if err := ns.Chmod(Root, "/p", 0o4750); err != nil {
		t.Fatal(err)
	}
	if f := create(t, ns, "/p", 6); f.Mode&0o7777 != 0o750 {
		t.Fatalf("a setuid file replaced: mode %o, want 750", f.Mode&0o7777)
	}
	f, err := ns.BeginCreate(Root, "/p", CreateOptions{Mode: 0o640}, place)
	if err != nil {
		t.Fatal(err)
	}
	if f.Mode&0o7777 != 0o640 {
		t.Fatalf("a replacement naming mode 640: %o", f.Mode&0o7777)
	}
	if f := create(t, ns, "/new", 1); f.Mode&0o7777 != 0o644 {
		t.Fatalf("a new file: mode %o, want the default 644", f.Mode&0o7777)
	}
}

package namespace

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// tickingNS is a namespace whose clock advances one second per reading,
// so every commit has its own mtime.
func tickingNS(t *testing.T) *Namespace {
	var mu sync.Mutex
	now := time.Unix(1700000000, 0)
	ns, err := Open(memkv.New(), Options{Now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}})
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

// names lists the entries of the container at p.
func names(t *testing.T, ns *Namespace, c Caller, p string) []string {
	t.Helper()
	es, err := ns.List(c, p)
	if err != nil {
		t.Fatalf("list %s: %v", p, err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

// TestOverwriteKeepsVersions: below sys.versioning=2 every overwrite moves
// the replaced file into .sys.v#.NAME as <mtime>.<fid hex>, the two newest
// are kept, the older ones go to the deletion queue, and the folder is
// left out of the listing of its directory.
func TestOverwriteKeepsVersions(t *testing.T) {
	ns := tickingNS(t)
	if err := ns.Mkdir(Root, "/v", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if err := ns.SetXAttr(Root, "/v", "sys.versioning", "2"); err != nil {
		t.Fatal(err)
	}
	var gen []*Inode
	for i := range 4 {
		gen = append(gen, create(t, ns, "/v/f", int64(100+i)))
	}
	want := []string{
		fmt.Sprintf("%d.%08x", gen[1].MTime/1e9, gen[1].ID),
		fmt.Sprintf("%d.%08x", gen[2].MTime/1e9, gen[2].ID),
	}
	if got := names(t, ns, Root, "/v/.sys.v#.f"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("versions kept: %v, want %v", got, want)
	}
	for i, w := range want {
		n, err := ns.Stat(Root, "/v/.sys.v#.f/"+w)
		if err != nil || n.ID != gen[i+1].ID || n.Size != gen[i+1].Size {
			t.Fatalf("version %s: %+v %v", w, n, err)
		}
	}
	if cur, err := ns.Stat(Root, "/v/f"); err != nil || cur.ID != gen[3].ID {
		t.Fatalf("current file: %+v %v", cur, err)
	}
	if got := names(t, ns, Root, "/v"); strings.Join(got, " ") != "f" {
		t.Fatalf("listing of /v shows %v, want only f", got)
	}
	// The oldest version (generation 0) was purged into the deletion queue.
	ds, _ := ns.Deletions(1, 10)
	if len(ds) != 1 || ds[0].Fid != gen[0].ID {
		t.Fatalf("deletion queue %+v, want only generation 0 (fid %d)", ds, gen[0].ID)
	}
	// Subtree accounting counts the versions (they hold data).
	if d, _ := ns.Stat(Root, "/v"); d.TreeFiles != 3 || d.TreeSize != 101+102+103 || d.TreeDirs != 1 {
		t.Fatalf("accounting of /v: files %d size %d dirs %d", d.TreeFiles, d.TreeSize, d.TreeDirs)
	}
	// Without the attribute an overwrite keeps nothing.
	ns.Mkdir(Root, "/plain", 0o755, false)
	create(t, ns, "/plain/f", 1)
	create(t, ns, "/plain/f", 2)
	if _, err := ns.Stat(Root, "/plain/.sys.v#.f"); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("version folder without sys.versioning: %v", err)
	}
}

// versionedDir makes dir with sys.versioning=keep, writable by everybody.
func versionedDir(t *testing.T, ns *Namespace, dir string, keep int) {
	t.Helper()
	if err := ns.Mkdir(Root, dir, 0o777, true); err != nil {
		t.Fatal(err)
	}
	if err := ns.SetXAttr(Root, dir, nsapi.AttrVersioning, fmt.Sprint(keep)); err != nil {
		t.Fatal(err)
	}
}

// upload writes p with size bytes, announcing no size (as a chunked
// upload does).
func upload(t *testing.T, ns *Namespace, c Caller, p string, size int64) (*Inode, error) {
	t.Helper()
	f, err := ns.BeginCreate(c, p, CreateOptions{}, place)
	if err != nil {
		return nil, err
	}
	return ns.Commit(f.ID, size, map[string]string{"adler32": fmt.Sprintf("%08x", size)})
}

// TestVersionsQuota: versions count in the quota node; an overwrite must
// fit with the versions it keeps, and what it purges is freed first.
func TestVersionsQuota(t *testing.T) {
	ns := tickingNS(t)
	alice := Caller{UID: 1000, GID: 1000}
	versionedDir(t, ns, "/q", 2)
	if err := ns.SetQuota(Root, "/q", QuotaKey{QuotaUser, 1000}, Amount{Bytes: 100}); err != nil {
		t.Fatal(err)
	}
	used := func() Amount {
		qs, _ := ns.Quotas(Root, "/q")
		return qs[0].Used[QuotaKey{QuotaUser, 1000}]
	}
	recount := func() {
		t.Helper()
		got, err := ns.RecountQuota(Root, "/q")
		if err != nil || got[QuotaKey{QuotaUser, 1000}] != used() {
			t.Fatalf("stored usage %+v, recount %+v %v", used(), got, err)
		}
	}
	for _, size := range []int64{30, 30, 30} {
		if _, err := upload(t, ns, alice, "/q/f", size); err != nil {
			t.Fatal(err)
		}
	}
	if u := used(); u != (Amount{90, 3}) {
		t.Fatalf("usage with two versions: %+v, want 90 bytes in 3 files", u)
	}
	recount()
	// A fourth content of 40 bytes: the oldest version (30) is purged,
	// 60 stay, the 40 fit in 100; 50 would not, and nothing changes then.
	if _, err := upload(t, ns, alice, "/q/f", 50); !kerr.Is(err, kerr.Quota) {
		t.Fatalf("overwrite beyond the quota with the versions it keeps: %v", err)
	}
	if u := used(); u != (Amount{90, 3}) {
		t.Fatalf("usage after a refused overwrite: %+v", u)
	}
	if vs, _ := ns.Versions(alice, "/q/f"); len(vs) != 2 {
		t.Fatalf("a refused overwrite changed the versions: %d", len(vs))
	}
	if _, err := upload(t, ns, alice, "/q/f", 40); err != nil {
		t.Fatal(err)
	}
	if u := used(); u != (Amount{100, 3}) {
		t.Fatalf("usage after the purge: %+v", u)
	}
	recount()
	// Removing the file removes its versions and frees all of it.
	if err := ns.Remove(alice, "/q/f", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if u := used(); u != (Amount{0, 0}) {
		t.Fatalf("usage after rm: %+v", u)
	}
	if d, _ := ns.Stat(Root, "/q"); d.TreeFiles != 0 || d.TreeSize != 0 || d.TreeDirs != 0 {
		t.Fatalf("accounting after rm: %+v", d)
	}
	if _, err := ns.Stat(Root, "/q/.sys.v#.f"); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("versions left behind by rm: %v", err)
	}
	if ds, _ := ns.Deletions(1, 10); len(ds) != 5 {
		t.Fatalf("deletions after rm: %d, want all 5 contents written (the refused one too)", len(ds))
	}
}

// TestRestoreVersion: a restore swaps, in one step, the current content
// with a version; the content it replaces becomes the newest version and
// the setting still bounds how many are kept.
func TestRestoreVersion(t *testing.T) {
	ns := tickingNS(t)
	versionedDir(t, ns, "/v", 2)
	g0 := create(t, ns, "/v/f", 10)
	g1 := create(t, ns, "/v/f", 11)
	g2 := create(t, ns, "/v/f", 12)
	vs, err := ns.Versions(Root, "/v/f")
	if err != nil || len(vs) != 2 || vs[0].ID != g0.ID || vs[1].ID != g1.ID || vs[0].Name != versionID(g0) {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	n, err := ns.RestoreVersion(Root, "/v/f", versionID(g0))
	if err != nil || n.ID != g0.ID {
		t.Fatalf("restore: %+v %v", n, err)
	}
	cur, _ := ns.Stat(Root, "/v/f")
	if cur.ID != g0.ID || cur.Size != 10 || cur.MTime <= g2.MTime {
		t.Fatalf("after restore /v/f is %+v, want generation 0 with a new mtime", cur)
	}
	vs, _ = ns.Versions(Root, "/v/f")
	if len(vs) != 2 || vs[0].ID != g1.ID || vs[1].ID != g2.ID {
		t.Fatalf("versions after restore: %v", idsOf(vs))
	}
	if d, _ := ns.Stat(Root, "/v"); d.TreeFiles != 3 || d.TreeSize != 33 {
		t.Fatalf("accounting after restore: files %d size %d", d.TreeFiles, d.TreeSize)
	}
	// The restored content, replaced again, is the newest version: the
	// oldest (generation 1) goes.
	g3 := create(t, ns, "/v/f", 13)
	vs, _ = ns.Versions(Root, "/v/f")
	if len(vs) != 2 || vs[0].ID != g2.ID || vs[1].ID != g0.ID {
		t.Fatalf("versions after overwriting a restored file: %v", idsOf(vs))
	}
	// A lowered setting is applied by a restore too.
	ns.SetXAttr(Root, "/v", nsapi.AttrVersioning, "1")
	if _, err := ns.RestoreVersion(Root, "/v/f", versionID(g2)); err != nil {
		t.Fatal(err)
	}
	vs, _ = ns.Versions(Root, "/v/f")
	if len(vs) != 1 || vs[0].ID != g3.ID {
		t.Fatalf("versions after a restore with sys.versioning=1: %v", idsOf(vs))
	}
	ds, _ := ns.Deletions(1, 10)
	if len(ds) != 2 || ds[0].Fid != g0.ID && ds[1].Fid != g0.ID {
		t.Fatalf("purged versions not queued: %+v", ds)
	}
	// Errors name the file and the version.
	_, err = ns.RestoreVersion(Root, "/v/f", "123.0000abcd")
	mustKind(t, err, kerr.NotFound)
	if !strings.Contains(err.Error(), "/v/f") || !strings.Contains(err.Error(), "123.0000abcd") {
		t.Fatalf("error does not name path and version: %v", err)
	}
	mustKind(t, errOf(ns.RestoreVersion(Root, "/v", "x")), kerr.IsDir)
	mustKind(t, errOf(ns.Versions(Root, "/v/.sys.v#.f/"+versionID(g3))), kerr.Invalid)
	mustKind(t, errOf(ns.Versions(Root, "/v/nothing")), kerr.NotFound)
	create(t, ns, "/v/g", 1)
	if vs, err := ns.Versions(Root, "/v/g"); err != nil || len(vs) != 0 {
		t.Fatalf("versions of a file never replaced: %v %v", vs, err)
	}
}

func idsOf(vs []*Inode) []uint64 {
	var out []uint64
	for _, v := range vs {
		out = append(out, v.ID)
	}
	return out
}

// TestVersionsAccess: only who may read the file reads its versions, only
// who may replace it restores one, and nobody puts entries into a
// version folder or names one.
func TestVersionsAccess(t *testing.T) {
	ns := tickingNS(t)
	alice, bob := Caller{UID: 1000, GID: 1000}, Caller{UID: 2000, GID: 2000}
	versionedDir(t, ns, "/v", 3)
	if _, err := upload(t, ns, alice, "/v/f", 5); err != nil {
		t.Fatal(err)
	}
	g1, err := upload(t, ns, alice, "/v/f", 6)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := ns.Versions(alice, "/v/f")
	vp := "/v/.sys.v#.f/" + first[0].Name
	// Readable by all (0644) so far.
	if !ns.Permits(bob, mustStat(t, ns, vp), Read) {
		t.Fatal("bob may read the file but not its version")
	}
	if err := ns.Chmod(alice, "/v/f", 0o600); err != nil {
		t.Fatal(err)
	}
	if ns.Permits(bob, mustStat(t, ns, vp), Read) {
		t.Fatal("bob may read a version of a file he may not read")
	}
	if !ns.Permits(alice, mustStat(t, ns, vp), Read) {
		t.Fatal("alice may not read her own version")
	}
	mustKind(t, errOf(ns.Versions(bob, "/v/f")), kerr.Permission)
	if n, _ := ns.Stat(bob, vp); len(n.Checksums) != 0 {
		t.Fatalf("bob sees the checksums of a version he may not read: %v", n.Checksums)
	}
	mustKind(t, errOf(ns.RestoreVersion(bob, "/v/f", first[0].Name)), kerr.Permission)
	if cur := mustStat(t, ns, "/v/f"); cur.ID != g1.ID {
		t.Fatal("a refused restore changed the file")
	}
	// Reserved names and version folders.
	mustKind(t, errOf(upload(t, ns, alice, "/v/.sys.v#.f/x", 1)), kerr.Permission)
	mustKind(t, errOf(upload(t, ns, Root, "/v/.sys.v#.g", 1)), kerr.Invalid)
	mustKind(t, ns.Mkdir(Root, "/v/.sys.v#.h/sub", 0o755, true), kerr.Invalid)
	mustKind(t, ns.Mkdir(Root, "/v/.sys.v#.f/sub", 0o755, false), kerr.Permission)
	mustKind(t, errOf(ns.CreateEmpty(alice, "/v/.sys.v#.f/e", CreateOptions{})), kerr.Permission)
	mustKind(t, errOf(ns.Rename(Root, "/v/.sys.v#.f", "/v/other", false)), kerr.Permission)
	mustKind(t, errOf(ns.Rename(alice, "/v/f", "/v/.sys.v#.f/in", false)), kerr.Permission)
	mustKind(t, ns.SetXAttr(Root, "/v", nsapi.AttrVersioning, "-1"), kerr.Invalid)
	mustKind(t, ns.SetXAttr(Root, "/v", nsapi.AttrVersioning, "many"), kerr.Invalid)
	mustKind(t, ns.SetQuota(Root, "/v/.sys.v#.f", QuotaKey{QuotaProject, 0}, Amount{Bytes: 1}), kerr.Invalid)
	// A version can be taken out of the folder as a file of its own.
	if _, err := ns.Rename(alice, vp, "/v/f.old", false); err != nil {
		t.Fatalf("moving a version out: %v", err)
	}
	if n := mustStat(t, ns, "/v/f.old"); n.ID != first[0].ID {
		t.Fatalf("moved version: %+v", n)
	}
}

func mustStat(t *testing.T, ns *Namespace, p string) *Inode {
	t.Helper()
	n, err := ns.Stat(Root, p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestVersionsFollowTheirFile: rm under sys.recycle recycles the version
// folder beside the file (restorable, still counted in quota), rm without
// it deletes them, mv moves them, and a mv over a file with versions
// removes those as rm would.
func TestVersionsFollowTheirFile(t *testing.T) {
	ns := tickingNS(t)
	versionedDir(t, ns, "/r", 2)
	ns.SetXAttr(Root, "/r", nsapi.AttrRecycle, "on")
	ns.SetQuota(Root, "/r", QuotaKey{QuotaProject, 0}, Amount{Bytes: 1 << 20})
	for _, s := range []int64{1, 2, 3} {
		create(t, ns, "/r/f", s)
	}
	if err := ns.Remove(Root, "/r/f", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	es, _ := ns.RecycleList(Root)
	if len(es) != 2 || es[0].Path != "/r/.sys.v#.f" || es[0].Files != 2 || es[1].Path != "/r/f" {
		t.Fatalf("recycle ls after rm of a versioned file: %+v", es)
	}
	if d := mustStat(t, ns, "/r"); d.TreeFiles != 0 || d.TreeDirs != 0 {
		t.Fatalf("accounting after recycling: %+v", d)
	}
	if qs, _ := ns.Quotas(Root, "/r"); qs[0].Used[QuotaKey{QuotaProject, 0}] != (Amount{6, 3}) {
		t.Fatalf("recycled versions stopped counting: %+v", qs[0].Used)
	}
	for _, e := range es {
		if _, err := ns.RecycleRestore(Root, e.Key, false); err != nil {
			t.Fatal(err)
		}
	}
	if vs, err := ns.Versions(Root, "/r/f"); err != nil || len(vs) != 2 {
		t.Fatalf("versions after restoring from the bin: %d %v", len(vs), err)
	}
	// mv takes the versions along; over a file with versions, those go.
	create(t, ns, "/r/g", 7)
	create(t, ns, "/r/g", 8)
	if _, err := ns.Rename(Root, "/r/f", "/r/g", true); err != nil {
		t.Fatal(err)
	}
	if vs, err := ns.Versions(Root, "/r/g"); err != nil || len(vs) != 2 || vs[0].Size != 1 {
		t.Fatalf("versions of the renamed file: %+v %v", vs, err)
	}
	if _, err := ns.Stat(Root, "/r/.sys.v#.f"); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("version folder left at the old name: %v", err)
	}
	es, _ = ns.RecycleList(Root)
	if len(es) != 1 || es[0].Path != "/r/.sys.v#.g" {
		t.Fatalf("the replaced file's versions: %+v", es)
	}
	if d := mustStat(t, ns, "/r"); d.TreeFiles != 3 || d.TreeSize != 6 || d.TreeDirs != 1 {
		t.Fatalf("accounting after mv: files %d size %d dirs %d", d.TreeFiles, d.TreeSize, d.TreeDirs)
	}
	// Across directories, and without recycling: rm deletes them.
	ns.Mkdir(Root, "/plain", 0o777, false)
	if _, err := ns.Rename(Root, "/r/g", "/plain/h", false); err != nil {
		t.Fatal(err)
	}
	if vs, _ := ns.Versions(Root, "/plain/h"); len(vs) != 2 {
		t.Fatalf("versions after mv across directories: %d", len(vs))
	}
	before, _ := ns.Deletions(1, 100)
	if err := ns.Remove(Root, "/plain/h", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	after, _ := ns.Deletions(1, 100)
	if len(after)-len(before) != 3 {
		t.Fatalf("rm queued %d deletions, want the file and its 2 versions", len(after)-len(before))
	}
	if d := mustStat(t, ns, "/plain"); d.TreeFiles != 0 || d.TreeDirs != 0 {
		t.Fatalf("accounting after rm: %+v", d)
	}
}

// TestShortOverwriteKeepsPrevious: the safety net for a truncated or
// mistaken overwrite — the content it replaced is a version, readable and
// restorable, whatever the new size.
func TestShortOverwriteKeepsPrevious(t *testing.T) {
	ns := tickingNS(t)
	versionedDir(t, ns, "/v", 1)
	whole := create(t, ns, "/v/f", 4<<20)
	create(t, ns, "/v/f", 300000) // cut short
	vs, err := ns.Versions(Root, "/v/f")
	if err != nil || len(vs) != 1 || vs[0].ID != whole.ID || vs[0].Size != 4<<20 || len(vs[0].Locations) == 0 {
		t.Fatalf("the replaced content is not kept whole: %+v %v", vs, err)
	}
	if _, err := ns.RestoreVersion(Root, "/v/f", vs[0].Name); err != nil {
		t.Fatal(err)
	}
	if cur := mustStat(t, ns, "/v/f"); cur.ID != whole.ID || cur.Size != 4<<20 {
		t.Fatalf("restored: %+v", cur)
	}
	if ds, _ := ns.Deletions(1, 10); len(ds) != 0 {
		t.Fatalf("something was deleted: %+v", ds)
	}
}

// BenchmarkOverwrite: the cost versioning adds to a commit that replaces
// a file (move into the folder, purge of the oldest) on Pebble.
func BenchmarkOverwrite(b *testing.B) {
	for _, keep := range []string{"0", "2"} {
		b.Run("versioning="+keep, func(b *testing.B) {
			ns := benchNS(b)
			ns.SetXAttr(Root, "/d", nsapi.AttrVersioning, keep)
			sums := map[string]string{"adler32": "00000001"}
			for i := 0; i < b.N; i++ {
				f, err := ns.BeginCreate(Root, "/d/f", CreateOptions{}, place)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := ns.Commit(f.ID, 1000, sums); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestVersionFloor: the scan of a version folder starts at its floor, so
// a version put back below it (from the recycle bin) must lower it, and a
// reopened namespace (no floors) finds every version.
func TestVersionFloor(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1700000000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}
	eng := memkv.New()
	ns, _ := Open(eng, Options{Now: clock})
	versionedDir(t, ns, "/v", 2)
	ns.SetXAttr(Root, "/v", nsapi.AttrRecycle, "on")
	var gen []*Inode
	for i := range 4 {
		gen = append(gen, create(t, ns, "/v/f", int64(i)))
	}
	// Versions: 1, 2. Recycle version 1; two overwrites purge 2 (the
	// floor is 2 now): versions 3, 4; put 1 back, below the floor.
	if err := ns.Remove(Root, "/v/.sys.v#.f/"+versionID(gen[1]), RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	gen = append(gen, create(t, ns, "/v/f", 4), create(t, ns, "/v/f", 5))
	es, _ := ns.RecycleList(Root)
	if _, err := ns.RecycleRestore(Root, es[len(es)-1].Key, false); err != nil {
		t.Fatal(err)
	}
	if vs, _ := ns.Versions(Root, "/v/f"); fmt.Sprint(idsOf(vs)) != fmt.Sprint([]uint64{gen[1].ID, gen[3].ID, gen[4].ID}) {
		t.Fatalf("versions after putting one back: %v", idsOf(vs))
	}
	// The next overwrite purges down to 2: the oldest two, 1 and 3.
	create(t, ns, "/v/f", 6)
	if vs, _ := ns.Versions(Root, "/v/f"); fmt.Sprint(idsOf(vs)) != fmt.Sprint([]uint64{gen[4].ID, gen[5].ID}) {
		t.Fatalf("versions after the purge: %v", idsOf(vs))
	}
	ns2, _ := Open(eng, Options{Now: clock})
	if vs, _ := ns2.Versions(Root, "/v/f"); len(vs) != 2 {
		t.Fatalf("versions after reopen: %v", idsOf(vs))
	}
}

// TestVersionsBoundedCommits: on a store that bounds its commits (etcd),
// a lowered sys.versioning is applied a few versions per replacement and
// rm of a file with many versions removes them in steps; every commit
// fits, nothing is lost track of.
func TestVersionsBoundedCommits(t *testing.T) {
	ns, err := Open(limitedStore{memkv.New(), 64}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	versionedDir(t, ns, "/v", 40)
	ns.SetXAttr(Root, "/v", nsapi.AttrLayout, "replica:3")
	for i := range 41 {
		create(t, ns, "/v/f", int64(i))
	}
	count := func() int {
		vs, err := ns.Versions(Root, "/v/f")
		if err != nil {
			t.Fatal(err)
		}
		return len(vs)
	}
	if n := count(); n != 40 {
		t.Fatalf("%d versions, want 40", n)
	}
	ns.SetXAttr(Root, "/v", nsapi.AttrVersioning, "1")
	prev, written := 40, 41
	for prev > 1 {
		create(t, ns, "/v/f", 100)
		written++
		n := count()
		if n >= prev {
			t.Fatalf("a replacement with sys.versioning=1 purged nothing: %d versions (before %d)", n, prev)
		}
		prev = n
	}
	ns.SetXAttr(Root, "/v", nsapi.AttrVersioning, "40")
	for range 30 {
		create(t, ns, "/v/f", 7)
		written++
	}
	if err := ns.Remove(Root, "/v/f", RemoveOptions{}); err != nil {
		t.Fatalf("rm of a file with 31 versions: %v", err)
	}
	if d := mustStat(t, ns, "/v"); d.TreeFiles != 0 || d.TreeDirs != 0 {
		t.Fatalf("accounting after rm: files %d dirs %d", d.TreeFiles, d.TreeDirs)
	}
	ds, _ := ns.Deletions(1, 1000)
	if len(ds) != written { // every content written (the stripes on fs 1)
		t.Fatalf("%d contents queued for deletion, want %d", len(ds), written)
	}
}

// TestVersionFolderNameTaken: a file named like the version folder (made
// before such names were reserved) is never overwritten by the folder:
// the replacement is refused and both stay as they were.
func TestVersionFolderNameTaken(t *testing.T) {
	ns := tickingNS(t)
	versionedDir(t, ns, "/v", 2)
	create(t, ns, "/v/f", 1)
	l := create(t, ns, "/v/legacy", 9)
	if err := ns.mutate("test", func(tx *txn) error { // rename it as an old binary could
		tx.del(dentryKey(l.Parent, l.Name))
		l.Name = VersionPrefix + "f"
		putFile(tx, l)
		tx.put(inodeKey(l.ID), fileIndex(l.Parent, l.Name))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, err := upload(t, ns, Root, "/v/f", 2)
	mustKind(t, err, kerr.Exists)
	if !strings.Contains(err.Error(), ".sys.v#.f") {
		t.Fatalf("the error does not name the file in the way: %v", err)
	}
	if n := mustStat(t, ns, "/v/.sys.v#.f"); n.ID != l.ID || n.IsDir {
		t.Fatalf("the file in the way: %+v", n)
	}
	if n := mustStat(t, ns, "/v/f"); n.Size != 1 {
		t.Fatalf("/v/f replaced without its version: %+v", n)
	}
	if _, err := ns.GetAttr(Root, l.ID); err != nil {
		t.Fatalf("the file in the way lost its inode: %v", err)
	}
}

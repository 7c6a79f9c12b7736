package namespace

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
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

package namespace

import (
	"slices"
	"testing"
)

// TestFsckReads: files by fid (committed, pending, a container's id,
// unknown), every committed file in chunks that resume, the deletion
// queue.
func TestFsckReads(t *testing.T) {
	ns := newNS(t)
	if err := ns.Mkdir(Root, "/a/b", 0o755, true); err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, p := range []string{"/a/f1", "/a/b/f2", "/f3", "/a/b/f4", "/z"} {
		ids = append(ids, create(t, ns, p, 10).ID)
	}
	pending, err := ns.BeginCreate(Root, "/a/p", CreateOptions{}, place)
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := ns.Stat(Root, "/a")
	st, err := ns.LookupFids([]uint64{ids[1], pending.ID, dir.ID, 999999})
	if err != nil {
		t.Fatal(err)
	}
	if st[0].File == nil || st[0].File.ID != ids[1] || st[0].Pending {
		t.Fatalf("committed file: %+v", st[0])
	}
	if p, _ := ns.PathOf(st[0].File); p != "/a/b/f2" {
		t.Fatalf("path %q", p)
	}
	if st[1].File != nil || !st[1].Pending || st[2].File != nil || st[2].Pending || st[3].File != nil || st[3].Pending {
		t.Fatalf("pending, container, unknown: %+v", st[1:])
	}
	var seen []uint64
	var from []byte
	for chunks := 0; ; chunks++ {
		from, err = ns.ScanFiles(from, 2, func(f *Inode) { seen = append(seen, f.ID) })
		if err != nil {
			t.Fatal(err)
		}
		if from == nil {
			if chunks != 2 {
				t.Fatalf("5 files in chunks of 2 took %d resumptions", chunks)
			}
			break
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, ids) {
		t.Fatalf("ScanFiles saw %v, want %v", seen, ids)
	}
	if q, _ := ns.DeletionQueued(3, 77, 1); q {
		t.Fatal("nothing queued yet")
	}
	if err := ns.QueueDeletions([]Deletion{{FsID: 3, Fid: 77, Stripe: 1}}); err != nil {
		t.Fatal(err)
	}
	if q, _ := ns.DeletionQueued(3, 77, 1); !q {
		t.Fatal("queued deletion not found")
	}
	if ds, _ := ns.Deletions(3, 10); len(ds) != 1 || ds[0].Fid != 77 {
		t.Fatalf("deletion queue of fs 3: %+v", ds)
	}
}

package ceph_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/cephtest"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestCephFSDirectoryVanishes (issue 24: a disk lost the way it happens,
// its CephFS directory vanishes): of three filesystems inside a CephFS
// mount holding replica:2 files, one's directory is removed behind the
// storage server's back; it goes offline, is declared lost after
// --rebuild-after and rebuilt from the other replicas; every file then
// reads back byte-exact over HTTP and root:// with two stripes on the
// two filesystems left, each there on CephFS.
func TestCephFSDirectoryVanishes(t *testing.T) {
	c := cephtest.Start(t)
	mnt := t.TempDir()
	c.Mount(t, mnt)
	top := filepath.Join(mnt, fmt.Sprintf("kaon-vanish-%d", time.Now().UnixNano()))
	within(t, "mkdir on CephFS", func() error { return os.Mkdir(top, 0o755) })
	k, node := kaonUp(t, "--rebuild-after", "3s")
	for i := 1; i <= 3; i++ {
		k.MustKaon("fs", "add", "--node", node, "--path", filepath.Join(top, fmt.Sprintf("rep%d", i)), "--space", "cephrep")
	}
	fss := waitFs(t, k, top, "booted", booted)
	k.MustKaon("mkdir", "/rep")
	k.MustKaon("attr", "set", "/rep", "sys.forced.space=cephrep")
	k.MustKaon("attr", "set", "/rep", "sys.forced.layout=replica:2")
	files := makeFiles(t, []string{"/rep"}, 12, 256<<10)
	for _, f := range files {
		if err := f.put(t, k); err != nil {
			t.Fatal(err)
		}
	}
	// The victim: the filesystem holding the most stripes.
	count := map[uint32]int{}
	for _, f := range files {
		e, err := api(k).FileInfo(context.Background(), f.path)
		if err != nil {
			t.Fatalf("file info %s: %v", f.path, err)
		}
		for _, s := range e.Stripes {
			count[s.FsID]++
		}
	}
	victim := fss[0]
	for _, f := range fss {
		if count[f.ID] > count[victim.ID] {
			victim = f
		}
	}
	within(t, "rm -rf "+victim.Path, func() error { return os.RemoveAll(victim.Path) })
	t.Logf("removed %s (fs %d, %d stripes)", victim.Path, victim.ID, count[victim.ID])

	waitFs(t, k, victim.Path, "declared lost and rebuilt (empty)", func(f nsapi.Filesystem) bool {
		return f.ConfigStatus == "lost" && f.Drain == "empty"
	})
	for _, f := range files {
		if err := readBack(t, k, f.path, f.data); err != nil {
			t.Errorf("after the rebuild: %v", err)
		}
		e, err := api(k).FileInfo(context.Background(), f.path)
		if err != nil {
			t.Fatalf("file info %s: %v", f.path, err)
		}
		var on []uint32
		for _, s := range e.Stripes {
			if _, err := os.Stat(s.PhysPath); err != nil || s.FsID == victim.ID || !strings.HasPrefix(s.PhysPath, top+"/") {
				t.Errorf("%s: stripe on fs %d at %s (lost fs %d): %v", f.path, s.FsID, s.PhysPath, victim.ID, err)
			}
			if !slices.Contains(on, s.FsID) {
				on = append(on, s.FsID)
			}
		}
		if len(on) != 2 {
			t.Errorf("%s: stripes on filesystems %v, want 2 distinct (redundancy full again)", f.path, on)
		}
	}
}

package ceph_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/cephtest"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestConvertToCephFS: files on the old local disk (the default space)
// move to a space of filesystems inside a CephFS mount, one by `kaon file
// convert --space ceph --layout replica:2`, the others by the directory
// policy sys.convert.space=ceph; they read back byte-exact with curl and
// xrdcp, their stripes are all on CephFS, and the local disk is emptied.
func TestConvertToCephFS(t *testing.T) {
	c := cephtest.Start(t)
	mnt := t.TempDir()
	c.Mount(t, mnt)
	top := filepath.Join(mnt, fmt.Sprintf("kaon-move-%d", time.Now().UnixNano()))
	within(t, "mkdir on CephFS", func() error { return os.Mkdir(top, 0o755) })
	k, node := kaonUp(t, "--cap-ttl", "5s")
	k.MustKaon("space", "define", "ceph")
	for i := 1; i <= 2; i++ {
		k.MustKaon("fs", "add", "--node", node, "--path", filepath.Join(top, fmt.Sprint(i)), "--space", "ceph")
	}
	waitFs(t, k, top, "booted as cephfs", func(f nsapi.Filesystem) bool { return booted(f) && f.Kind == "cephfs" })
	k.MustKaon("mkdir", "-p", "/old/sub")
	files := makeFiles(t, []string{"/old", "/old/sub"}, 4, 6<<20)
	for _, f := range files {
		if err := f.put(t, k); err != nil {
			t.Fatal(err)
		}
	}
	onCeph := func(path string) bool {
		e, err := api(k).FileInfo(t.Context(), path)
		if err != nil {
			t.Fatalf("file info %s: %v", path, err)
		}
		for _, s := range e.Stripes {
			if !strings.HasPrefix(s.PhysPath, top) {
				return false
			}
		}
		return len(e.Stripes) > 0
	}
	out := k.MustKaon("file", "convert", files[0].path, "--space", "ceph", "--layout", "replica:2")
	if !strings.Contains(out, "replica:2") || !onCeph(files[0].path) {
		t.Fatalf("file convert to ceph: %s", out)
	}
	k.MustKaon("attr", "set", "/old", "sys.convert.space=ceph")
	deadline := time.Now().Add(3 * time.Minute)
	for _, f := range files {
		for !onCeph(f.path) {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for the policy to move %s to CephFS: not within 3m\n%s", f.path, k.MustKaon("file", "convert", "--status"))
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	for _, f := range files {
		if err := readBack(t, k, f.path, f.data); err != nil {
			t.Fatal(err)
		}
	}
	// The old disk is emptied once the grace is over.
	local := filepath.Join(k.Dir, "fs", "01")
	deadline = time.Now().Add(time.Minute)
	for {
		left := 0
		buckets, _ := os.ReadDir(local)
		for _, b := range buckets {
			if b.IsDir() {
				ents, _ := os.ReadDir(filepath.Join(local, b.Name()))
				left += len(ents)
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for the local disk to be emptied: %d stripes left after 1m", left)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

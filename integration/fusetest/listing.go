package fusetest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// testLargeDir: a directory needing many READDIR(PLUS) requests lists
// exactly the entries made in it, warm and cold, through several
// getdents calls of one open directory; fsync of a directory works.
func testLargeDir(t *testing.T, m Mounted) {
	d := filepath.Join(m.Root, "big")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 0; i < 2500; i++ {
		name := fmt.Sprintf("entry-with-a-fairly-long-name-%05d", i)
		if err := os.WriteFile(filepath.Join(d, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
	}
	sort.Strings(want)
	if m.Caps.InTree {
		if below := ListNames(t, filepath.Join(m.Tree, "big")); strings.Join(below, "/") != strings.Join(want, "/") {
			t.Fatalf("tree below the mount has %d entries, want the %d made", len(below), len(want))
		}
	}
	check := func(what string) {
		got := ListNames(t, d)
		if strings.Join(got, "/") != strings.Join(want, "/") {
			t.Errorf("%s listing: %d entries, want %d", what, len(got), len(want))
		}
	}
	check("first")
	check("cached")
	dropCaches()
	check("cold")
	// Small getdents buffers: many reads of one open directory.
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 512)
	n := 0
	for {
		k, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			break
		}
		_, c, _ := unix.ParseDirent(buf[:k], -1, nil)
		n += c
	}
	if n != 2500 {
		t.Errorf("getdents in small chunks: %d entries, want 2500", n)
	}
	// fsync on a directory works (cfsd: without an OPENDIR handle).
	f, err := os.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil && err.(*os.PathError).Err != syscall.ENOTSUP {
		t.Errorf("fsync dir: %v", err)
	}
	f.Close()
}

// ListNames is dir's listing, sorted.
func ListNames(t *testing.T, dir string) []string {
	t.Helper()
	names, err := Listing(dir)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	return names
}

// dropCaches empties the kernel's page, dentry and inode caches, so the
// next listing asks the mount again.
func dropCaches() {
	syscall.Sync()
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
}

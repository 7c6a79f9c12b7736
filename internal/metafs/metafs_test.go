package metafs

import (
	"bytes"
	"errors"
	"log"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// mkTree builds a small tree with every entry type the index records.
func mkTree(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "tree")
	for _, d := range []string{"a/b/c", "a/e", "lib", "empty"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range []string{"a/f1", "a/b/f2", "a/b/c/f3", "lib/libz.so.1", "top"} {
		if err := os.WriteFile(filepath.Join(root, f), bytes.Repeat([]byte{'x'}, 100*i+1), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.Symlink("libz.so.1", filepath.Join(root, "lib/libz.so")))
	must(t, os.Symlink("../nowhere", filepath.Join(root, "a/dangling")))
	must(t, os.Link(filepath.Join(root, "top"), filepath.Join(root, "a/hard")))
	must(t, unix.Mkfifo(filepath.Join(root, "a/fifo"), 0o600))
	must(t, os.Chmod(filepath.Join(root, "a/e"), 0o700))
	if err := unix.Setxattr(filepath.Join(root, "a/f1"), "user.kaon", []byte("v1"), 0); err == nil {
		must(t, unix.Setxattr(filepath.Join(root, "a/f1"), "user.empty", nil, 0))
	}
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func build(t *testing.T, root string) *Index {
	t.Helper()
	x, err := Build(root, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestRoundTripMatchesTree(t *testing.T) {
	root := mkTree(t)
	file := filepath.Join(t.TempDir(), "idx")
	if _, err := build(t, root).WriteFile(file); err != nil {
		t.Fatal(err)
	}
	x, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		n++
		rel, _ := filepath.Rel(root, p)
		i, ok := x.Resolve(filepath.ToSlash(rel))
		if !ok {
			t.Errorf("%s: not in index", rel)
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		a := x.Attr(i)
		if a.Mode != st.Mode || a.Uid != st.Uid || a.Gid != st.Gid || a.Size != uint64(st.Size) ||
			a.Ino != st.Ino || a.Nlink != uint32(st.Nlink) || a.Mtime != st.Mtim.Nano() || a.Ctime != st.Ctim.Nano() ||
			a.Blocks != uint64(st.Blocks) {
			t.Errorf("%s: attr %+v, lstat %+v", rel, a, st)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			want, _ := os.Readlink(p)
			if got := string(x.Readlink(i)); got != want {
				t.Errorf("%s: readlink %q, want %q", rel, got, want)
			}
		}
		if fi.IsDir() {
			f, _ := os.Open(p)
			names, _ := f.Readdirnames(-1)
			f.Close()
			first, cnt := x.Children(i)
			var got []string
			for c := first; c < first+cnt; c++ {
				got = append(got, x.Name(c))
			}
			if strings.Join(got, "/") != strings.Join(names, "/") {
				t.Errorf("%s: listing %v, want %v (same order)", rel, got, names)
			}
		}
		return nil
	})
	must(t, err)
	if n != x.Len() {
		t.Fatalf("index has %d entries, tree %d", x.Len(), n)
	}
	if _, ok := x.Resolve("a/b/missing"); ok {
		t.Error("missing name resolved")
	}
	if _, ok := x.Resolve("a/f1/below-a-file"); ok {
		t.Error("name below a file resolved")
	}
	i, _ := x.Resolve("a/f1")
	var xa []string
	x.Xattrs(i, func(n string, v []byte) bool { xa = append(xa, n+"="+string(v)); return true })
	if len(xa) > 0 && strings.Join(xa, ",") != "user.kaon=v1,user.empty=" && strings.Join(xa, ",") != "user.empty=,user.kaon=v1" {
		t.Errorf("xattrs %v", xa)
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	root := mkTree(t)
	build(t, root) // settle access times (relatime) moved by the first walk
	a, err := Build(root, BuildOptions{Workers: 1})
	must(t, err)
	b, err := Build(root, BuildOptions{Workers: 64})
	must(t, err)
	if !bytes.Equal(a.ents, b.ents) || !bytes.Equal(a.sorted, b.sorted) || !bytes.Equal(a.arena, b.arena) ||
		a.Source.Fingerprint != b.Source.Fingerprint {
		t.Fatal("index depends on walk parallelism")
	}
}

func TestCorruptionDetected(t *testing.T) {
	root := mkTree(t)
	file := filepath.Join(t.TempDir(), "idx")
	_, err := build(t, root).WriteFile(file)
	must(t, err)
	good, _ := os.ReadFile(file)
	cases := map[string][]byte{
		"flipped payload byte": func() []byte { b := bytes.Clone(good); b[len(b)/2] ^= 0x40; return b }(),
		"flipped header byte":  func() []byte { b := bytes.Clone(good); b[60] ^= 1; return b }(),
		"truncated":            good[:len(good)-100],
		"bad magic":            append([]byte("NOTMETA!"), good[8:]...),
	}
	for name, data := range cases {
		must(t, os.WriteFile(file, data, 0o644))
		_, err := Load(file)
		if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), file) {
			t.Errorf("%s: Load error %v, want a corruption error naming the file", name, err)
		}
	}
	must(t, os.WriteFile(file, good, 0o644))
	if _, err := Load(file); err != nil {
		t.Fatal(err)
	}
}

func TestCheckFreshAndCompare(t *testing.T) {
	root := mkTree(t)
	x := build(t, root)
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(fd)
	must(t, x.CheckFresh(fd, root))
	// The same tree mounted again (a FUSE or network filesystem remounted,
	// or mounted on another node) has another device number: still fresh.
	x.Source.Dev ^= 0xffff
	must(t, x.CheckFresh(fd, root))
	if d := Compare(x, build(t, root)); len(d) != 0 {
		t.Fatalf("fresh tree differs: %v", d)
	}
	must(t, os.WriteFile(filepath.Join(root, "a/b/c/new"), nil, 0o644))
	must(t, os.WriteFile(filepath.Join(root, "a/f1"), []byte("changed size"), 0o644))
	must(t, os.Remove(filepath.Join(root, "top")))
	err = x.CheckFresh(fd, root)
	if !IsStale(err) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("CheckFresh after change: %v", err)
	}
	got := map[string]string{}
	for _, d := range Compare(x, build(t, root)) {
		got[d.Path] = d.Kind
	}
	for p, k := range map[string]string{"a/b/c/new": "added", "a/f1": "changed", "top": "removed"} {
		if got[p] != k {
			t.Errorf("%s: diff %q, want %q (all: %v)", p, got[p], k, got)
		}
	}
}

// TestFSOperations drives the overlay's FUSE handlers directly (no mount).
func TestFSOperations(t *testing.T) {
	root := mkTree(t)
	x := build(t, root)
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	fs, err := NewFS(x, fd, root, MountOptions{NoPassthrough: true})
	must(t, err)
	defer fs.closeAll()

	lookup := func(parent uint64, name string) *fuse.EntryOut {
		var out fuse.EntryOut
		if st := fs.Lookup(nil, &fuse.InHeader{NodeId: parent}, name, &out); !st.Ok() {
			t.Fatalf("lookup %s: %v", name, st)
		}
		return &out
	}
	a := lookup(1, "a")
	if a.NodeId == 0 || a.Attr.Mode&syscall.S_IFDIR == 0 {
		t.Fatalf("lookup a: %+v", a)
	}
	if neg := lookup(a.NodeId, "nope"); neg.NodeId != 0 || neg.EntryTimeout() == 0 {
		t.Fatalf("negative lookup must be a cached miss: %+v", neg)
	}
	f1 := lookup(a.NodeId, "f1")
	var oo fuse.OpenOut
	if st := fs.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: f1.NodeId}, Flags: syscall.O_RDWR}, &oo); st != fuse.EROFS {
		t.Fatalf("open O_RDWR: %v", st)
	}
	if st := fs.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: f1.NodeId}}, &oo); !st.Ok() {
		t.Fatalf("open: %v", st)
	}
	buf := make([]byte, 4096)
	rr, st := fs.Read(nil, &fuse.ReadIn{Fh: oo.Fh, Size: 4096}, buf)
	if !st.Ok() {
		t.Fatal(st)
	}
	data, _ := rr.Bytes(buf)
	want, _ := os.ReadFile(filepath.Join(root, "a/f1"))
	if !bytes.Equal(data, want) {
		t.Fatalf("read %q want %q", data, want)
	}
	fs.Release(nil, &fuse.ReleaseIn{Fh: oo.Fh})
	// A second open reuses the cached lower file.
	must2 := fs.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: f1.NodeId}}, &oo)
	if !must2.Ok() || fs.Stats.LowerOpens.Load() != 1 {
		t.Fatalf("second open: %v, lower opens %d", must2, fs.Stats.LowerOpens.Load())
	}
	if st := fs.Mkdir(nil, &fuse.MkdirIn{}, "x", &fuse.EntryOut{}); st != fuse.EROFS {
		t.Fatalf("mkdir: %v", st)
	}
	if st := fs.SetXAttr(nil, &fuse.SetXAttrIn{}, "user.x", nil); st != fuse.EROFS {
		t.Fatalf("setxattr: %v", st)
	}

	// Reload: the new index is served under new node IDs, the root
	// immediately.
	must(t, os.WriteFile(filepath.Join(root, "added"), nil, 0o644))
	must(t, fs.Reload(build(t, root), false))
	if e := lookup(1, "added"); e.NodeId == 0 {
		t.Fatal("reloaded index does not show the new file")
	}
	if a2 := lookup(1, "a"); a2.NodeId == a.NodeId {
		t.Fatal("reload reused node IDs")
	}
	// The old generation stays valid while the kernel references it.
	var ao fuse.AttrOut
	if st := fs.GetAttr(nil, &fuse.GetAttrIn{InHeader: fuse.InHeader{NodeId: a.NodeId}}, &ao); !st.Ok() {
		t.Fatalf("old node after reload: %v", st)
	}
}

// TestFSOpenChangedBelow: opens of files changed below since the index was
// built fail with EIO and are logged with the path, also when the lower
// file is kept open from an earlier open; an open made before the change
// keeps reading (the check is at open), and the stale lower file is closed
// once its last opener is gone.
func TestFSOpenChangedBelow(t *testing.T) {
	root := mkTree(t)
	x := build(t, root)
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	var logs bytes.Buffer
	fs, err := NewFS(x, fd, root, MountOptions{NoPassthrough: true, Logger: log.New(&logs, "", 0)})
	must(t, err)
	defer fs.closeAll()
	node := func(p string) uint64 {
		var out fuse.EntryOut
		id := uint64(1)
		for _, name := range strings.Split(p, "/") {
			if st := fs.Lookup(nil, &fuse.InHeader{NodeId: id}, name, &out); !st.Ok() || out.NodeId == 0 {
				t.Fatalf("lookup %s in %s: %v", name, p, st)
			}
			id = out.NodeId
		}
		return id
	}
	open := func(p string) (uint64, fuse.Status) {
		var oo fuse.OpenOut
		st := fs.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: node(p)}}, &oo)
		return oo.Fh, st
	}
	held, st := open("a/f1")
	if !st.Ok() {
		t.Fatalf("open a/f1: %v", st)
	}
	fh, st := open("a/f1")
	if !st.Ok() {
		t.Fatalf("second open a/f1: %v", st)
	}
	fs.Release(nil, &fuse.ReleaseIn{Fh: fh})

	f, err := os.OpenFile(filepath.Join(root, "a/f1"), os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.WriteString("more")
	must(t, err)
	must(t, f.Close())
	must(t, os.Remove(filepath.Join(root, "a/b/c/f3")))
	must(t, os.Mkdir(filepath.Join(root, "a/b/c/f3"), 0o755))

	if _, st := open("a/f1"); st != fuse.EIO {
		t.Fatalf("open of a/f1 appended to below: %v, want EIO", st)
	}
	if _, st := open("a/b/c/f3"); st != fuse.EIO {
		t.Fatalf("open of a/b/c/f3, a directory below: %v, want EIO", st)
	}
	for _, w := range []string{"open of " + filepath.Join(root, "a/f1") + " refused", "found size 5", "index: size 1,",
		"a/b/c/f3 refused", "not a regular file"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, logs.String())
		}
	}
	if n := fs.Stats.Refused.Load(); n != 2 {
		t.Errorf("refused %d opens, want 2", n)
	}
	// Opened before the change: reads the file as it is now.
	buf := make([]byte, 64)
	rr, st := fs.Read(nil, &fuse.ReadIn{Fh: held, Size: 64}, buf)
	if !st.Ok() {
		t.Fatalf("read through an open made before the change: %v", st)
	}
	if data, _ := rr.Bytes(buf); string(data) != "xmore" {
		t.Fatalf("read through an open made before the change: %q, want the file as it is now", data)
	}
	fs.Release(nil, &fuse.ReleaseIn{Fh: held})
	// Kept open after its last release, then refused and closed.
	if _, st := open("a/f1"); st != fuse.EIO {
		t.Fatalf("open of a/f1 after the last release: %v, want EIO", st)
	}
	fs.fmu.Lock()
	kept := len(fs.files)
	fs.fmu.Unlock()
	if kept != 0 {
		t.Errorf("%d lower files still open, want none: a changed one is closed when refused and unused", kept)
	}
	if fh, st := open("a/b/f2"); !st.Ok() {
		t.Fatalf("open of an unchanged file: %v", st)
	} else {
		fs.Release(nil, &fuse.ReleaseIn{Fh: fh})
	}
}

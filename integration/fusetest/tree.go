package fusetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// MakeTree creates a tree exercising every kind of entry and attribute
// (the tree the read-only scenarios present), and returns its root.
func MakeTree(t *testing.T) string {
	t.Helper()
	root := filepath.Join(TempDir(t), "sw")
	for _, d := range []string{"bin", "lib/python3/site", "lib/empty", "share/doc/pkg", "private", "sticky", "big"} {
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	files := map[string]int{"bin/tool": 5000, "lib/libfoo.so.1.2": 70000, "lib/python3/site/mod.py": 42,
		"share/doc/pkg/README with space": 0, "share/doc/pkg/ünïcödé": 7, "private/secret": 12, "top": 1}
	for f, n := range files {
		must(t, os.WriteFile(filepath.Join(root, f), bytes.Repeat([]byte{byte(len(f))}, n), 0o644))
	}
	for i := 0; i < 300; i++ { // several READDIR(PLUS) rounds
		must(t, os.WriteFile(filepath.Join(root, "big", fmt.Sprintf("entry-%03d-%s", i, strings.Repeat("n", i%40))), nil, 0o644))
	}
	must(t, os.Chmod(filepath.Join(root, "bin/tool"), 0o4755))
	must(t, os.Chmod(filepath.Join(root, "private"), 0o700))
	must(t, os.Chown(filepath.Join(root, "private/secret"), 1234, 5678))
	must(t, os.Chmod(filepath.Join(root, "private/secret"), 0o600))
	must(t, os.Chmod(filepath.Join(root, "sticky"), 0o1777))
	must(t, os.Symlink("libfoo.so.1.2", filepath.Join(root, "lib/libfoo.so.1")))
	must(t, os.Symlink("libfoo.so.1", filepath.Join(root, "lib/libfoo.so")))
	must(t, os.Symlink("/etc/hostname", filepath.Join(root, "abs-link")))
	must(t, os.Symlink("does/not/exist", filepath.Join(root, "dangling")))
	must(t, os.Link(filepath.Join(root, "top"), filepath.Join(root, "bin/hardlink")))
	must(t, unix.Mkfifo(filepath.Join(root, "fifo"), 0o640))
	must(t, unix.Mknod(filepath.Join(root, "null-dev"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, unix.Setxattr(filepath.Join(root, "lib/libfoo.so.1.2"), "user.kaon.checksum", []byte("adler32:0badf00d"), 0))
	must(t, unix.Setxattr(filepath.Join(root, "lib/libfoo.so.1.2"), "user.empty", nil, 0))
	must(t, unix.Setxattr(filepath.Join(root, "share"), "user.origin", bytes.Repeat([]byte("x"), 3000), 0))
	must(t, os.Chtimes(filepath.Join(root, "top"), time.Unix(1e9, 123456789), time.Unix(1.2e9, 987654321)))
	// Let the (coarse) clock move past the last change, so the access-time
	// update settle causes is the last one relatime makes.
	time.Sleep(50 * time.Millisecond)
	settle(t, root)
	return root
}

// settle touches every directory listing and symlink once, so relatime has
// already moved the access times the comparisons below look at.
func settle(t *testing.T, root string) {
	t.Helper()
	must(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type()&os.ModeSymlink != 0 {
			os.Readlink(p)
		}
		return err
	}))
}

// Xattrs lists p's extended attributes with their values (and, under
// "\x00order", their names in the order listed).
func Xattrs(p string) (map[string]string, error) {
	buf := make([]byte, 65536)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	var order []string
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 65536)
		vn, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			return nil, fmt.Errorf("getxattr %s %s: %w", p, name, err)
		}
		m[name] = string(v[:vn])
		order = append(order, name)
	}
	m["\x00order"] = strings.Join(order, ",")
	return m, nil
}

func Listing(p string) ([]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// CompareTree checks every metadata answer under mnt against the same
// path under lower, and returns how many entries it compared. Access
// times are compared with c.Atimes (the tree was settled and nothing
// read data since), extended attributes with c.Xattrs; c.OwnInodes
// relaxes what a mount with inodes of its own cannot reproduce (metafs'
// kernel mode: its tmpfs skeleton's): inode numbers, ctime, file block
// counts and directory sizes.
func CompareTree(t *testing.T, lower, mnt string, c Caps) int {
	atime, ownInodes := c.Atimes, c.OwnInodes
	t.Helper()
	n := 0
	must(t, filepath.WalkDir(lower, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		rel, _ := filepath.Rel(lower, p)
		q := filepath.Join(mnt, rel)
		var a, b unix.Stat_t
		must(t, unix.Lstat(p, &a))
		if err := unix.Lstat(q, &b); err != nil {
			t.Errorf("%s: lstat through mount: %v", rel, err)
			return nil
		}
		type f = struct {
			name string
			x, y any
		}
		isDir := a.Mode&unix.S_IFMT == unix.S_IFDIR
		for _, fld := range []f{{"mode", a.Mode, b.Mode}, {"ino", a.Ino, b.Ino}, {"nlink", a.Nlink, b.Nlink},
			{"uid", a.Uid, b.Uid}, {"gid", a.Gid, b.Gid}, {"size", a.Size, b.Size}, {"blocks", a.Blocks, b.Blocks},
			{"rdev", a.Rdev, b.Rdev}, {"mtime", a.Mtim, b.Mtim}, {"ctime", a.Ctim, b.Ctim}} {
			skip := ownInodes && (fld.name == "ino" || fld.name == "ctime" || fld.name == "blocks" || isDir && fld.name == "size")
			if !skip && fld.x != fld.y {
				t.Errorf("%s: %s through mount %v, below %v", rel, fld.name, fld.y, fld.x)
			}
		}
		if atime && a.Atim != b.Atim {
			t.Errorf("%s: atime through mount %v, below %v", rel, b.Atim, a.Atim)
		}
		// os.Lstat too, as applications see it
		fa, _ := os.Lstat(p)
		fb, _ := os.Lstat(q)
		if fa.Mode() != fb.Mode() || (fa.Size() != fb.Size() && !(ownInodes && isDir)) || !fa.ModTime().Equal(fb.ModTime()) || (rel != "." && fa.Name() != fb.Name()) {
			t.Errorf("%s: os.Lstat differs: %v/%v/%v vs %v/%v/%v", rel, fa.Mode(), fa.Size(), fa.ModTime(), fb.Mode(), fb.Size(), fb.ModTime())
		}
		switch a.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			la, _ := os.Readlink(p)
			lb, err := os.Readlink(q)
			if err != nil || la != lb {
				t.Errorf("%s: readlink %q (%v), below %q", rel, lb, err, la)
			}
		case unix.S_IFDIR:
			la, err1 := Listing(p)
			lb, err2 := Listing(q)
			if err1 != nil || err2 != nil || strings.Join(la, "\x00") != strings.Join(lb, "\x00") {
				t.Errorf("%s: readdir through mount %q (%v), below %q (%v)", rel, lb, err2, la, err1)
			}
		}
		if c.Xattrs {
			xa, err1 := Xattrs(p)
			xb, err2 := Xattrs(q)
			if err1 != nil || err2 != nil || fmt.Sprint(xa) != fmt.Sprint(xb) {
				t.Errorf("%s: xattrs through mount %v (%v), below %v (%v)", rel, xb, err2, xa, err1)
			}
		}
		// access(2) answers from the same attributes
		for _, m := range []uint32{unix.R_OK, unix.X_OK} {
			ea := unix.Access(p, m)
			eb := unix.Access(q, m)
			if ea != eb && a.Mode&unix.S_IFMT != unix.S_IFLNK {
				t.Errorf("%s: access(%d) through mount %v, below %v", rel, m, eb, ea)
			}
		}
		return nil
	}))
	return n
}

// testTree: every metadata answer through the mount is the tree's.
func testTree(t *testing.T, m Mounted) {
	if n := CompareTree(t, m.Tree, m.Root, m.Caps); n < 300 {
		t.Fatalf("compared only %d entries", n)
	}
}

// testNegativeLookups: names that are not in the tree are not found,
// again once the kernel may have cached the miss, and a name below a file
// is not a directory.
func testNegativeLookups(t *testing.T, m Mounted) {
	mnt := m.Root
	for _, p := range []string{"missing", "lib/libbar.so", "lib/python3/site/nomod.py", "lib/python3/site/nomod/__init__.py", "no/such/dir"} {
		for i := 0; i < 2; i++ { // second round hits the kernel's negative entry
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(mnt, p), &st); err != unix.ENOENT {
				t.Errorf("lstat %s: %v, want ENOENT", p, err)
			}
			if _, err := unix.Open(filepath.Join(mnt, p), unix.O_RDONLY|unix.O_CLOEXEC, 0); err != unix.ENOENT {
				t.Errorf("open %s: %v, want ENOENT", p, err)
			}
			if err := unix.Access(filepath.Join(mnt, p), unix.F_OK); err != unix.ENOENT {
				t.Errorf("access %s: %v, want ENOENT", p, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(mnt, "top/below-a-file")); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("lookup below a file: %v, want ENOTDIR", err)
	}
}

// testReadOnly: every write path fails with EROFS, nothing changes in the
// tree, and reads still work.
func testReadOnly(t *testing.T, m Mounted) {
	f := filepath.Join(m.Root, "lib/python3/site/mod.py")
	CheckReadOnly(t, m.Tree, m.Root)
	if data, err := os.ReadFile(f); err != nil || len(data) != 42 {
		t.Fatalf("read: %d %v", len(data), err)
	}
}

// CheckReadOnly tries every write path through mnt and checks that each fails
// with EROFS and nothing changed below.
func CheckReadOnly(t *testing.T, lower, mnt string) {
	t.Helper()
	f := filepath.Join(mnt, "lib/python3/site/mod.py")
	dir := filepath.Join(mnt, "lib")
	ops := map[string]func() error{
		"create": func() error {
			_, err := unix.Open(filepath.Join(dir, "new"), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			return err
		},
		"create-excl": func() error {
			_, err := unix.Open(filepath.Join(dir, "new"), unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY|unix.O_CLOEXEC, 0o644)
			return err
		},
		"mknod":         func() error { return unix.Mknod(filepath.Join(dir, "fifo2"), unix.S_IFIFO|0o644, 0) },
		"mkdir":         func() error { return unix.Mkdir(filepath.Join(dir, "newdir"), 0o755) },
		"unlink":        func() error { return unix.Unlink(f) },
		"rmdir":         func() error { return unix.Rmdir(filepath.Join(mnt, "lib/empty")) },
		"rename":        func() error { return unix.Rename(f, f+".old") },
		"rename-dir":    func() error { return unix.Rename(filepath.Join(mnt, "lib/empty"), filepath.Join(mnt, "empty2")) },
		"link":          func() error { return unix.Link(f, filepath.Join(dir, "hard")) },
		"symlink":       func() error { return unix.Symlink("x", filepath.Join(dir, "sym")) },
		"chmod":         func() error { return unix.Chmod(f, 0o777) },
		"chown":         func() error { return unix.Lchown(f, 1, 1) },
		"truncate":      func() error { return unix.Truncate(f, 0) },
		"setxattr":      func() error { return unix.Lsetxattr(f, "user.x", []byte("y"), 0) },
		"removexattr":   func() error { return unix.Lremovexattr(filepath.Join(mnt, "lib/libfoo.so.1.2"), "user.empty") },
		"utimes":        func() error { return unix.UtimesNano(f, []unix.Timespec{{Sec: 1}, {Sec: 1}}) },
		"open-wronly":   func() error { _, err := unix.Open(f, unix.O_WRONLY|unix.O_CLOEXEC, 0); return err },
		"open-rdwr":     func() error { _, err := unix.Open(f, unix.O_RDWR|unix.O_CLOEXEC, 0); return err },
		"open-trunc":    func() error { _, err := unix.Open(f, unix.O_RDONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0); return err },
		"open-append":   func() error { _, err := unix.Open(f, unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0); return err },
		"tmpfile":       func() error { _, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600); return err },
		"chmod-symlink": func() error { return unix.Fchmodat(unix.AT_FDCWD, filepath.Join(mnt, "lib/libfoo.so"), 0o700, 0) },
	}
	for name, op := range ops {
		if err := op(); err != unix.EROFS {
			t.Errorf("%s: %v, want EROFS", name, err)
		}
	}
	// Nothing changed below.
	if fi, err := os.Stat(filepath.Join(lower, "lib/python3/site/mod.py")); err != nil || fi.Size() != 42 || fi.Mode().Perm() != 0o644 {
		t.Fatalf("lower file changed: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(lower, "lib/new")); !os.IsNotExist(err) {
		t.Fatal("create reached the lower filesystem")
	}
}

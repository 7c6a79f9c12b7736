package fusetest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// posixTranscript runs a fixed sequence of file system operations in dir
// and records every observable result. Run in a plain directory and
// through the mount, the two transcripts must be identical. Steps a mount
// cannot take (c) are left out of both.
func posixTranscript(dir string, c Caps) []string {
	var log []string
	rec := func(step string, v ...any) {
		log = append(log, strings.ReplaceAll(step+": "+fmt.Sprint(v...), dir, "DIR"))
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	st := func(n string) string {
		var s unix.Stat_t
		if err := unix.Lstat(p(n), &s); err != nil {
			return err.Error()
		}
		return fmt.Sprintf("mode=%o uid=%d gid=%d size=%d nlink=%d", s.Mode, s.Uid, s.Gid, s.Size, s.Nlink)
	}

	// create / read / write / truncate
	fd, err := unix.Open(p("f"), unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o640)
	rec("create", err)
	n, err := unix.Write(fd, []byte("hello world"))
	rec("write", n, err)
	buf := make([]byte, 64)
	n, err = unix.Pread(fd, buf, 6)
	rec("pread", string(buf[:n]), err)
	_, err = unix.Open(p("f"), unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o640)
	rec("excl again", err)
	rec("ftruncate", unix.Ftruncate(fd, 5), st("f"))
	rec("truncate", unix.Truncate(p("f"), 3))
	b, err := os.ReadFile(p("f"))
	rec("after truncate", string(b), err)
	rec("fallocate", unix.Fallocate(fd, 0, 0, 1<<20), st("f"))
	var s unix.Stat_t
	unix.Fstat(fd, &s)
	rec("fallocate blocks>=2048", s.Blocks >= 2048)
	rec("punch hole", unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 1<<19), st("f"))
	unix.Close(fd)

	// sparse file, SEEK_DATA/SEEK_HOLE
	if c.Holes {
		fd, _ = unix.Open(p("sparse"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		n, err = unix.Pwrite(fd, []byte("x"), 1<<30)
		rec("sparse write", n, err, st("sparse"))
		unix.Fstat(fd, &s)
		rec("sparse blocks small", s.Blocks < 1024)
		off, err := unix.Seek(fd, 0, unix.SEEK_DATA)
		rec("seek data", off, err)
		off, err = unix.Seek(fd, 0, unix.SEEK_HOLE)
		rec("seek hole", off, err)
		unix.Close(fd)
	}

	// O_APPEND from two descriptors
	a1, _ := unix.Open(p("app"), unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_CLOEXEC, 0o644)
	a2, _ := unix.Open(p("app"), unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
	unix.Write(a1, []byte("1"))
	unix.Write(a2, []byte("22"))
	unix.Pwrite(a1, []byte("333"), 0) // O_APPEND ignores the offset on Linux
	unix.Close(a1)
	unix.Close(a2)
	b, _ = os.ReadFile(p("app"))
	rec("append", string(b))

	// rename variants
	os.WriteFile(p("r1"), []byte("one"), 0o644)
	os.WriteFile(p("r2"), []byte("two"), 0o644)
	rec("noreplace", unix.Renameat2(unix.AT_FDCWD, p("r1"), unix.AT_FDCWD, p("r2"), unix.RENAME_NOREPLACE))
	if c.Exchange {
		rec("exchange", unix.Renameat2(unix.AT_FDCWD, p("r1"), unix.AT_FDCWD, p("r2"), unix.RENAME_EXCHANGE))
		b1, _ := os.ReadFile(p("r1"))
		b2, _ := os.ReadFile(p("r2"))
		rec("after exchange", string(b1), string(b2))
	}
	rec("rename over", os.Rename(p("r1"), p("r2")), st("r1"))
	b, _ = os.ReadFile(p("r2"))
	rec("renamed content", string(b))
	rec("noreplace to new", unix.Renameat2(unix.AT_FDCWD, p("r2"), unix.AT_FDCWD, p("r3"), unix.RENAME_NOREPLACE), st("r3"))

	// hard links (without them, h2 and ld as the later steps need them)
	if c.HardLinks {
		os.WriteFile(p("h"), []byte("linked"), 0o644)
		rec("link", os.Link(p("h"), p("h2")), st("h"))
		rec("unlink first", os.Remove(p("h")), st("h2"))
		b, _ = os.ReadFile(p("h2"))
		rec("link content", string(b))
	} else {
		os.WriteFile(p("h2"), []byte("linked"), 0o644)
	}
	os.Mkdir(p("ld"), 0o755)
	if c.HardLinks {
		rec("link dir", unix.Link(p("ld"), p("ld2")))
		// Link counts seen through a descriptor while the names go one by
		// one (cfsd: the recycle bin must not show in them).
		os.WriteFile(p("k1"), []byte("kk"), 0o644)
		os.Link(p("k1"), p("k2"))
		kf, _ := unix.Open(p("k1"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		rec("unlink one of two", unix.Unlink(p("k1")), st("k2"))
		unix.Fstat(kf, &s)
		rec("open after one unlink", s.Nlink)
		rec("unlink last", unix.Unlink(p("k2")), st("k2"))
		unix.Fstat(kf, &s)
		rec("open after last unlink", s.Nlink)
		n, _ = unix.Pread(kf, buf, 0)
		rec("read after last unlink", string(buf[:n]))
		unix.Close(kf)
	}
	os.Mkdir(p("od"), 0o755)
	odf, _ := unix.Open(p("od"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	rec("rmdir open dir", unix.Rmdir(p("od")))
	unix.Fstat(odf, &s)
	rec("removed dir nlink", s.Nlink)
	unix.Close(odf)

	// symlinks and utimensat on them
	ts := []unix.Timespec{{Sec: 1000000, Nsec: 5}, {Sec: 2000000, Nsec: 7}}
	if c.Symlinks {
		rec("symlink", os.Symlink("h2", p("sl")), st("sl"))
		tgt, err := os.Readlink(p("sl"))
		rec("readlink", tgt, err)
		if c.Utimes {
			rec("utimens symlink", unix.UtimesNanoAt(unix.AT_FDCWD, p("sl"), ts, unix.AT_SYMLINK_NOFOLLOW))
			unix.Lstat(p("sl"), &s)
			rec("symlink mtime", s.Mtim.Sec, s.Mtim.Nsec)
			unix.Stat(p("sl"), &s)
			rec("target mtime untouched", s.Mtim.Sec != 2000000)
		}
	}
	if c.Utimes {
		rec("utimens file", unix.UtimesNanoAt(unix.AT_FDCWD, p("h2"), ts, 0))
		unix.Stat(p("h2"), &s)
		if c.NoAtime {
			rec("file mtime", s.Mtim.Sec, s.Mtim.Nsec)
		} else {
			rec("file times", s.Atim.Sec, s.Atim.Nsec, s.Mtim.Sec, s.Mtim.Nsec)
		}
	}
	if c.Symlinks {
		b, err = os.ReadFile(p("sl"))
		rec("read through symlink", string(b), err)
		rec("dangling", os.Symlink("nowhere", p("dang")))
		_, err = os.ReadFile(p("dang"))
		rec("read dangling", err)
	}

	// directories
	rec("mkdir", os.Mkdir(p("d"), 0o750), st("d"))
	os.WriteFile(p("d/x"), nil, 0o644)
	rec("rmdir nonempty", unix.Rmdir(p("d")))
	rec("rmdir file", unix.Rmdir(p("d/x")))
	rec("unlink dir", unix.Unlink(p("d")))
	rec("mkdir exists", os.Mkdir(p("d"), 0o755))
	os.Remove(p("d/x"))
	rec("rmdir", unix.Rmdir(p("d")), st("d"))

	// mode 0
	rec("mkdir mode 0", unix.Mkdir(p("z0"), 0), st("z0"))
	zf, err := unix.Open(p("zf"), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0)
	rec("create mode 0", err, st("zf"))
	unix.Close(zf)
	rec("chmod dir 0", unix.Chmod(p("ld"), 0), st("ld"))
	rec("chmod dir back", unix.Chmod(p("ld"), 0o755), st("ld"))

	// chmod / chown
	rec("chmod", os.Chmod(p("h2"), 0o4711), st("h2"))
	rec("chown", os.Chown(p("h2"), 1000, 2000), st("h2"))
	if c.Symlinks {
		rec("lchown", os.Lchown(p("sl"), 1001, 1001), st("sl"))
	}
	rec("chmod dir", os.Chmod(p("ld"), 0o1777), st("ld"))

	// user xattrs
	if c.Xattrs {
		rec("setxattr", unix.Setxattr(p("h2"), "user.k", []byte("v1"), 0))
		xb := make([]byte, 64)
		n, err = unix.Getxattr(p("h2"), "user.k", xb)
		rec("getxattr", string(xb[:max(n, 0)]), err)
		rec("setxattr create-only", unix.Setxattr(p("h2"), "user.k", []byte("v2"), unix.XATTR_CREATE))
		n, err = unix.Listxattr(p("h2"), xb)
		names := strings.Split(strings.TrimRight(string(xb[:max(n, 0)]), "\x00"), "\x00")
		sort.Strings(names)
		rec("listxattr", names, err)
		rec("removexattr", unix.Removexattr(p("h2"), "user.k"))
		_, err = unix.Getxattr(p("h2"), "user.k", xb)
		rec("getxattr removed", err)
		rec("dir xattr", unix.Setxattr(p("ld"), "user.d", []byte("dv"), 0))
		n, err = unix.Getxattr(p("ld"), "user.d", xb)
		rec("dir getxattr", string(xb[:max(n, 0)]), err)
	}

	// locks: flock and OFD fcntl locks between two open descriptions
	if c.Locks {
		l1, _ := unix.Open(p("lock"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		l2, _ := unix.Open(p("lock"), unix.O_RDWR|unix.O_CLOEXEC, 0)
		rec("flock ex", unix.Flock(l1, unix.LOCK_EX|unix.LOCK_NB))
		rec("flock conflict", unix.Flock(l2, unix.LOCK_EX|unix.LOCK_NB))
		unix.Flock(l1, unix.LOCK_UN)
		rec("flock after unlock", unix.Flock(l2, unix.LOCK_EX|unix.LOCK_NB))
		unix.Flock(l2, unix.LOCK_UN)
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 10}
		rec("ofd lock", unix.FcntlFlock(uintptr(l1), unix.F_OFD_SETLK, &lk))
		lk2 := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 5, Len: 10}
		rec("ofd conflict", unix.FcntlFlock(uintptr(l2), unix.F_OFD_SETLK, &lk2))
		lk3 := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 5, Len: 10}
		unix.FcntlFlock(uintptr(l2), unix.F_OFD_GETLK, &lk3)
		rec("ofd getlk", lk3.Type == unix.F_WRLCK, lk3.Start, lk3.Len)
		unix.Close(l1)
		unix.Close(l2)
	}

	// mmap shared write, read back with read(2)
	mf, _ := unix.Open(p("mm"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	unix.Ftruncate(mf, 8192)
	mem, err := unix.Mmap(mf, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	rec("mmap", err)
	if err == nil {
		copy(mem[4000:], "mapped!")
		rec("msync", unix.Msync(mem, unix.MS_SYNC))
		unix.Munmap(mem)
	}
	unix.Close(mf)
	b, _ = os.ReadFile(p("mm"))
	rec("mmap content", string(bytes.Trim(b, "\x00")))

	// O_DIRECT with an aligned buffer
	df, err := unix.Open(p("direct"), unix.O_RDWR|unix.O_CREAT|unix.O_DIRECT|unix.O_CLOEXEC, 0o644)
	rec("open O_DIRECT", err)
	if err == nil {
		al, _ := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		copy(al, "direct-io")
		n, err = unix.Pwrite(df, al, 0)
		rec("direct write", n, err)
		clear(al)
		n, err = unix.Pread(df, al, 0)
		rec("direct read", n, err, string(bytes.Trim(al, "\x00")))
		unix.Munmap(al)
		unix.Close(df)
	}

	// unlinked but open
	uf, _ := unix.Open(p("gone"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	unix.Unlink(p("gone"))
	unix.Write(uf, []byte("still here"))
	n, _ = unix.Pread(uf, buf, 0)
	unix.Fstat(uf, &s)
	rec("unlinked open", string(buf[:n]), s.Nlink, s.Size)
	unix.Close(uf)

	// name length limits
	rec("name 255", os.WriteFile(p(strings.Repeat("n", 255)), nil, 0o644))
	_, err = os.Create(p(strings.Repeat("n", 256)))
	rec("name 256", errnoOf(err))
	rec("mkdir 256", errnoOf(os.Mkdir(p(strings.Repeat("m", 256)), 0o755)))

	// special files
	if c.Special {
		rec("mkfifo", unix.Mkfifo(p("fifo"), 0o640), st("fifo"))
	}

	// deep tree beyond PATH_MAX, walked with directory fds
	if c.LongPaths {
		rec("deep", deepTree(dir, 40))
	}

	// listing
	ents, err := os.ReadDir(dir)
	var ls []string
	for _, e := range ents {
		ls = append(ls, e.Name()+"/"+e.Type().String())
	}
	rec("readdir", ls, err)
	return log
}

func errnoOf(err error) error {
	var pe *os.PathError
	if e, ok := err.(*os.PathError); ok {
		pe = e
		return pe.Err
	}
	return err
}

// deepTree creates depth directories with 200-byte names (well past
// PATH_MAX as a whole path), writes and reads a file at the bottom and
// reports what happened.
func deepTree(dir string, depth int) string {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err.Error()
	}
	name := strings.Repeat("d", 200)
	for i := 0; i < depth; i++ {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			return fmt.Sprintf("mkdir level %d: %v", i, err)
		}
		nfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			return fmt.Sprintf("open level %d: %v", i, err)
		}
		fd = nfd
	}
	defer unix.Close(fd)
	ff, err := unix.Openat(fd, "bottom", unix.O_RDWR|unix.O_CREAT, 0o644)
	if err != nil {
		return "create bottom: " + err.Error()
	}
	unix.Write(ff, []byte("deep data"))
	unix.Close(ff)
	ff, err = unix.Openat(fd, "bottom", unix.O_RDONLY, 0)
	if err != nil {
		return "reopen bottom: " + err.Error()
	}
	b := make([]byte, 32)
	n, _ := unix.Read(ff, b)
	unix.Close(ff)
	var s unix.Stat_t
	err = unix.Fstatat(fd, "bottom", &s, 0)
	return fmt.Sprintf("%q size=%d err=%v pathlen>%d", b[:n], s.Size, err, depth*201)
}

func diffTranscripts(t *testing.T, want, got []string) {
	t.Helper()
	for i := 0; i < max(len(want), len(got)); i++ {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("plain dir: %s\n    mount: %s", w, g)
		}
	}
}

// testPOSIX: every operation of the transcript behaves through the
// mount exactly as in a plain directory of the test's file system.
func testPOSIX(t *testing.T, m Mounted) {
	ref := filepath.Join(TempDir(t), "ref")
	os.Mkdir(ref, 0o755)
	want := posixTranscript(ref, m.Caps)
	os.Mkdir(filepath.Join(m.Root, "posix"), 0o755)
	got := posixTranscript(filepath.Join(m.Root, "posix"), m.Caps)
	diffTranscripts(t, want, got)
	// A few absolute checks so "wrong in both" cannot pass.
	must := []string{
		"excl again: file exists",
		"noreplace: file exists",
		"append: 122333",
		"mmap content: mapped!",
		"name 256: file name too long",
		"unlinked open: still here0 10",
		"removed dir nlink: 0",
		"mkdir mode 0: <nil>mode=40000 ",
		"create mode 0: <nil>mode=100000 ",
		"chmod dir 0: <nil>mode=40000 ",
	}
	if m.Caps.Exchange {
		must = append(must, "after exchange: twoone")
	}
	if m.Caps.Symlinks && m.Caps.Utimes {
		must = append(must, "symlink mtime: 2000000 7")
	}
	switch {
	case m.Caps.Utimes && m.Caps.NoAtime:
		must = append(must, "file mtime: 2000000 7")
	case m.Caps.Utimes:
		must = append(must, "file times: 1000000 5 2000000 7")
	}
	if m.Caps.Locks {
		must = append(must,
			"flock conflict: resource temporarily unavailable",
			"ofd conflict: resource temporarily unavailable")
	}
	if m.Caps.HardLinks {
		must = append(must,
			"link: <nil>mode=100644 uid=0 gid=0 size=6 nlink=2",
			"unlink first: <nil>mode=100644 uid=0 gid=0 size=6 nlink=1",
			"unlink one of two: <nil>mode=100644 uid=0 gid=0 size=2 nlink=1",
			"open after one unlink: 1",
			"open after last unlink: 0",
			"read after last unlink: kk")
	}
	joined := strings.Join(got, "\n")
	for _, s := range must {
		if !strings.Contains(joined, s) {
			t.Errorf("mount transcript lacks %q:\n%s", s, joined)
		}
	}
	if m.Caps.LongPaths && !strings.Contains(joined, `deep: "deep data" size=9 err=<nil>`) {
		t.Errorf("deep tree failed through the mount: %s", joined)
	}
	if m.Caps.InTree {
		// The tree really holds what the mount wrote (no shadow state).
		b, err := os.ReadFile(filepath.Join(m.Tree, "posix", "app"))
		if err != nil || string(b) != "122333" {
			t.Errorf("tree below the mount: app = %q, %v", b, err)
		}
	}
}

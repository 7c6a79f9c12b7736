package mount_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/integration/fusetest"
	"github.com/kaon-storage/kaon/integration/harness"
)

// TestWritebackRemoteChange: with the kernel's write-back cache on
// (the default), a change made elsewhere — another mount changing a file in
// place, growing or shrinking it, curl replacing it — still reaches
// mount A's cached pages and attributes, size and content, whether the
// file is closed in A, open with dirty pages, or mapped. The kernel
// trusts its own size with write-back (libfuse issue 864): without the
// mount telling it, every size check below fails.
func TestWritebackRemoteChange(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/wb")
	a := newMount(t, up.EP.HTTP, "/wb", "")
	b := newMount(t, up.EP.HTTP, "/wb", "")
	size := func(p string) int64 {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return -1
		}
		return st.Size
	}
	// cached writes name through A and reads it back through A and B, so
	// both kernels hold its pages and attributes.
	cached := func(t *testing.T, name, content string) (string, string) {
		t.Helper()
		pa, pb := filepath.Join(a.mp, name), filepath.Join(b.mp, name)
		if err := os.WriteFile(pa, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		waitFor(t, visible, name+": B reads A's file", func() bool { return readFile(pb) == content })
		if got := readFile(pa); got != content {
			t.Fatalf("%s: A reads %q", name, got)
		}
		return pa, pb
	}
	pwrite := func(t *testing.T, p string, data string, off int64) {
		t.Helper()
		fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Pwrite(fd, []byte(data), off); err != nil {
			t.Fatal(err)
		}
		if err := unix.Close(fd); err != nil {
			t.Fatalf("close after writing %s: %v", p, err)
		}
	}
	seen := func(t *testing.T, step, p, want string) {
		t.Helper()
		waitFor(t, visible, step, func() bool { return size(p) == int64(len(want)) && readFile(p) == want })
	}

	t.Run("content", func(t *testing.T) {
		pa, pb := cached(t, "content", "0123456789")
		pwrite(t, pb, "AB", 4)
		seen(t, "A sees B's change in place", pa, "0123AB6789")
	})
	t.Run("growth", func(t *testing.T) {
		pa, pb := cached(t, "grow", "short")
		pwrite(t, pb, " and longer", 5)
		seen(t, "A sees the file B grew", pa, "short and longer")
	})
	t.Run("shrink", func(t *testing.T) {
		pa, pb := cached(t, "shrink", "a longer content")
		if err := os.Truncate(pb, 3); err != nil {
			t.Fatal(err)
		}
		seen(t, "A sees the file B shrank", pa, "a l")
	})
	curl := func(t *testing.T, name, content string, hdr ...string) {
		t.Helper()
		src := filepath.Join(t.TempDir(), "src")
		os.WriteFile(src, []byte(content), 0o644)
		args := []string{"-sSf", "-L", "-T", src, up.EP.HTTP + "/wb/" + name}
		for _, h := range hdr {
			args = append(args, "-H", h)
		}
		if out, err := exec.Command("curl", args...).CombinedOutput(); err != nil {
			t.Fatalf("curl PUT %s: %v\n%s", name, err, out)
		}
	}
	t.Run("curl", func(t *testing.T) {
		pa, _ := cached(t, "curl", "before")
		curl(t, "curl", "replaced by curl, longer")
		seen(t, "A sees curl's upload", pa, "replaced by curl, longer")
	})
	t.Run("curl-shrink", func(t *testing.T) {
		pa, _ := cached(t, "curlshrink", strings.Repeat("long ", 2000))
		curl(t, "curlshrink", "short")
		seen(t, "A sees curl's shorter upload", pa, "short")
	})
	t.Run("curl-in-place", func(t *testing.T) {
		// A ranged PUT changes the file in place (same inode), past its
		// end: it grows.
		pa, _ := cached(t, "curlrange", "0123456789")
		curl(t, "curlrange", "ABCDEFGH", "Content-Range: bytes 6-13/*")
		seen(t, "A sees curl's change in place", pa, "012345ABCDEFGH")
	})
	t.Run("open-dirty", func(t *testing.T) {
		// A holds the file open with a dirty page (written, not flushed);
		// B appends. A's kernel writes its page back before it drops it,
		// and learns the new size while the file stays open; at A's close
		// both changes are in the file.
		pa, pb := cached(t, "dirty", "0000000000")
		fd, err := unix.Open(pa, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if _, err := unix.Pwrite(fd, []byte("AA"), 0); err != nil {
			t.Fatal(err)
		}
		pwrite(t, pb, "BBBBB", 10)
		waitFor(t, visible, "A's open file grows to B's size", func() bool {
			var st unix.Stat_t
			return unix.Fstat(fd, &st) == nil && st.Size == 15
		})
		buf := make([]byte, 32)
		n, err := unix.Pread(fd, buf, 0)
		if err != nil || string(buf[:n]) != "AA00000000BBBBB" {
			t.Fatalf("A reads its open file: %q, %v; want its own write and B's append", buf[:n], err)
		}
		if err := unix.Close(fd); err != nil {
			t.Fatalf("close in A: %v", err)
		}
		seen(t, "B sees A's write and its own append", pb, "AA00000000BBBBB")
	})
	t.Run("mmap", func(t *testing.T) {
		pa, pb := cached(t, "mmap", strings.Repeat("m", 8192))
		fd, err := unix.Open(pa, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		mem, err := unix.Mmap(fd, 0, 8192, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(mem)
		if mem[4096] != 'm' {
			t.Fatalf("mapping before: %q", mem[4096])
		}
		pwrite(t, pb, "CHANGED", 4096)
		// A page the kernel fails to read back is a SIGBUS: a failure
		// of this test, not a crash of the test binary.
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("reading A's mapping after B's change: %v", r)
			}
		}()
		waitFor(t, visible, "A's mapping shows B's change", func() bool { return bytes.HasPrefix(mem[4096:], []byte("CHANGED")) })
	})
	t.Run("open-shrink", func(t *testing.T) {
		// The case the kernel prevents: it has no notification that
		// lowers the size of a file it caches with write-back, so a file
		// open in A keeps A's larger size (reads beyond the new end get
		// zeros) until A closes it; then A sees the new size.
		pa, pb := cached(t, "openshrink", "0123456789")
		fd, err := unix.Open(pa, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(pb, 4); err != nil {
			t.Fatal(err)
		}
		waitFor(t, visible, "A's open file shows the new content", func() bool {
			buf := make([]byte, 16)
			n, err := unix.Pread(fd, buf, 0)
			return err == nil && strings.HasPrefix(string(buf[:n]), "0123\x00")
		})
		var st unix.Stat_t
		unix.Fstat(fd, &st)
		t.Logf("open in A after B's truncate to 4: size %d (the kernel's)", st.Size)
		unix.Close(fd)
		seen(t, "A sees the file B shrank once A closed it", pa, "0123")
	})
}

// TestWritebackAcknowledged: with write-back, what fsync and close
// acknowledged is on the servers: curl reads it back. Many small writes
// stay in the kernel's page cache until then.
func TestWritebackAcknowledged(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/ack")
	m := newMount(t, up.EP.HTTP, "/ack", "")
	p := filepath.Join(m.mp, "f")
	get := func() string {
		out, err := exec.Command("curl", "-sSf", "-L", up.EP.HTTP+"/ack/f").Output()
		if err != nil {
			t.Fatalf("curl GET /ack/f: %v", err)
		}
		return string(out)
	}
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}()
	var want []byte
	for i := range 1000 {
		rec := []byte(strings.Repeat(string(rune('a'+i%26)), 7) + "\n")
		if _, err := unix.Write(fd, rec); err != nil {
			t.Fatal(err)
		}
		want = append(want, rec...)
	}
	if err := unix.Fsync(fd); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if got := get(); got != string(want) {
		t.Fatalf("curl after fsync: %d bytes (first difference at %d), want the %d written", len(got), firstDiff(got, string(want)), len(want))
	}
	// Overwrite the start, shrink, append: close acknowledges all.
	if _, err := unix.Pwrite(fd, []byte("START"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, 4000); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(fd, []byte("END"), 4000); err != nil {
		t.Fatal(err)
	}
	want = append(append([]byte("START"), want[5:4000]...), "END"...)
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close: %v", err)
	}
	fd = -1
	if got := get(); got != string(want) {
		t.Fatalf("curl after close: %d bytes (first difference at %d), want %d", len(got), firstDiff(got, string(want)), len(want))
	}
}

// TestWritebackExecWithDirtyFile: with write-back (the default), a
// process holding a file of the mount open with dirty pages can still
// start a program.
// The exec closes the child's copy of the descriptor (O_CLOEXEC, as Go
// and most runtimes open files): the kernel writes the file's times back
// (FUSE SETATTR) from the child while the exec holds the child's
// exec_update_lock. The daemon answered only after reading the caller's
// /proc/PID/environ for its token, which waits for that same lock: the
// exec never finished (integration/ha's TestMountFailover hung so at its
// first `kaon ns status` after the kill; the failover had no part in it).
// The file's data is stored whole at its close.
func TestWritebackExecWithDirtyFile(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/exec")
	m := newMount(t, up.EP.HTTP, "/exec", "")
	f, err := os.Create(filepath.Join(m.mp, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := bytes.Repeat([]byte("dirty in the page cache\n"), 4000)
	if _, err := f.Write(want); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := fusetest.Within(fmt.Sprintf("exec %d of /bin/true while f has dirty pages", i), upDeadline, func() error {
			return exec.Command("/bin/true").Run()
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("again"), int64(i*4096)); err != nil {
			t.Fatal(err)
		}
		copy(want[i*4096:], "again")
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	out, err := exec.Command("curl", "-sSf", "-L", up.EP.HTTP+"/exec/f").Output()
	if err != nil {
		t.Fatalf("curl GET /exec/f: %v", err)
	}
	if !bytes.Equal(out, want) {
		t.Fatalf("curl after close: %d bytes (first difference at %d), want the %d written", len(out), firstDiff(string(out), string(want)), len(want))
	}
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestWriteClearsSetuid: the mount clears setuid on a write by another
// user (the kernel leaves it to the mount, which spares it asking for
// security.capability before every write), and on a chown.
func TestWriteClearsSetuid(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/suid")
	up.MustKaon("chmod", "777", "/suid")
	m := newMount(t, up.EP.HTTP, "/suid", "")
	mode := func(p string) uint32 {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Mode & 0o7777
	}
	p := filepath.Join(m.mp, "s")
	if err := os.WriteFile(p, []byte("suid\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o4777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "echo more >> "+p)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("append as uid 1000: %v\n%s", err, out)
	}
	if got := mode(p); got != 0o777 {
		t.Fatalf("mode after a write by uid 1000: %o, want 777 (setuid cleared)", got)
	}
	if err := os.Chmod(p, 0o6777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if got := mode(p); got != 0o777 {
		t.Fatalf("mode after a chown: %o, want 777 (setuid and setgid cleared)", got)
	}
}

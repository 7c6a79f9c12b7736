package posix

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/backendtest"
	"github.com/kaon-storage/kaon/internal/bench/cputime"
	"github.com/kaon-storage/kaon/internal/bufmem"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/directio"
	"github.com/kaon-storage/kaon/internal/kerr"
)

func hooks(o Options) backendtest.Hooks {
	return backendtest.Hooks{
		// The root does not exist yet: Initialize creates it.
		Open: func(t *testing.T) backend.Store { return New(filepath.Join(t.TempDir(), "fs"), o) },
		Litter: func(t *testing.T, s backend.Store) {
			root := s.(*Store).Root()
			if err := os.MkdirAll(root, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "somebody-elses-file"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
		LoseMarker: func(t *testing.T, s backend.Store) {
			if err := os.Remove(filepath.Join(s.(*Store).Root(), markerName)); err != nil {
				t.Fatal(err)
			}
		},
		Corrupt: func(t *testing.T, s backend.Store, fid uint64, off int64) {
			flipByte(t, PhysPath(s.(*Store).Root(), fid), off)
		},
		CrashApply: func(t *testing.T, s backend.Store, fid uint64, step string) {
			st := s.(*Store)
			st.crashAt = step
			defer func() { st.crashAt = "" }()
			if err := st.Apply(fid); !errors.Is(err, errCrash) {
				t.Fatalf("Apply stopped at %s: %v, want the crash", step, err)
			}
		},
		ApplySteps: []string{"cut", "data", "sums", "footer"},
		Legacy: func(t *testing.T, s backend.Store, fid uint64) {
			// A version 1 stripe is its data alone.
			r, err := s.Open(fid)
			if err != nil {
				t.Fatal(err)
			}
			size := r.Size()
			r.Close()
			if err := os.Truncate(PhysPath(s.(*Store).Root(), fid), size); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// flipByte inverts the byte at off of file p.
func flipByte(t *testing.T, p string, off int64) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestSuite(t *testing.T) {
	t.Run("direct", func(t *testing.T) { backendtest.Run(t, hooks(Options{IO: backend.IODirect, Sync: true})) })
	t.Run("buffered", func(t *testing.T) { backendtest.Run(t, hooks(Options{IO: backend.IOBuffered, Sync: true})) })
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		// tmpfs refuses O_DIRECT on older kernels: the fallback is covered.
		t.Run("tmpfs", func(t *testing.T) {
			h := hooks(Options{IO: backend.IODirect})
			h.Open = func(t *testing.T) backend.Store {
				dir, err := os.MkdirTemp("/dev/shm", "kaon-posix")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(dir) })
				return New(filepath.Join(dir, "fs"), Options{IO: backend.IODirect})
			}
			backendtest.Run(t, h)
		})
	}
}

// TestOnDiskFormat: a data directory written by earlier versions (bare
// "N" marker, stripe files with user.kaon.* xattrs at <%08x fid/10000>/
// <%08x fid>, data only) is read as it is, and new stripes are written
// with the same names and xattrs, their data followed by block sums and
// footer (format.go, version 2), byte for byte.
func TestOnDiskFormat(t *testing.T) {
	root := filepath.Join(t.TempDir(), "fs")
	old := filepath.Join(root, "00000004", "0000a0b3") // fid 41139
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(root, "lost+found"), 0o700)
	os.WriteFile(filepath.Join(root, markerName), []byte("3\n"), 0o600)
	os.WriteFile(old, []byte("old bytes"), 0o600)
	for k, v := range map[string]string{"user.kaon.fid": "41139", "user.kaon.stripe": "2", "user.kaon.layout": "replica:3",
		"user.kaon.size": "9", "user.kaon.checksums": "adler32=11e603a6,md5=x", "user.kaon.path": "/old/file"} {
		if err := unix.Setxattr(old, k, []byte(v), 0); err != nil {
			t.Fatal(err)
		}
	}
	s := New(root, Options{IO: backend.IODirect})
	if got, err := s.Identity(); err != nil || got != (backend.Identity{FsID: 3}) {
		t.Fatalf("version 1 marker: %+v %v", got, err)
	}
	if why := s.CheckIdentity(backend.Identity{FsID: 3, UUID: "u1"}); why != "" {
		t.Fatal(why)
	}
	if b, _ := os.ReadFile(filepath.Join(root, markerName)); string(b) != "fsid=3\nuuid=u1\n" {
		t.Fatalf("upgraded marker %q", b)
	}
	m, err := s.ReadMeta(41139)
	want := backend.Meta{Fid: 41139, Stripe: 2, Layout: "replica:3", Size: 9,
		Checksums: map[string]string{"adler32": "11e603a6", "md5": "x"}, Path: "/old/file"}
	if err != nil || m.Fid != want.Fid || m.Stripe != want.Stripe || m.Layout != want.Layout || m.Size != want.Size ||
		m.Path != want.Path || len(m.Checksums) != 2 || m.Checksums["adler32"] != "11e603a6" {
		t.Fatalf("old stripe metadata %+v %v", m, err)
	}
	if u, err := s.Usage(); err != nil || u.Files != 1 {
		t.Fatalf("old data dir usage %+v %v", u, err)
	}
	r, err := s.Open(41139)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 9)
	r.ReadAt(b, 0)
	r.Close()
	if string(b) != "old bytes" {
		t.Fatalf("old stripe reads %q", b)
	}

	// A new stripe: same names, same xattrs.
	w, err := s.Create(1<<32+7, backend.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("new"))
	if err := w.Finish(backend.Meta{Stripe: 1, Layout: "plain", Size: 3, Checksums: map[string]string{"adler32": "02a80142"}, Path: "/p"}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "00068db8", "100000007")
	if p != PhysPath(root, 1<<32+7) {
		t.Fatalf("PhysPath %s", PhysPath(root, 1<<32+7))
	}
	for k, v := range map[string]string{"user.kaon.fid": "4294967303", "user.kaon.stripe": "1", "user.kaon.layout": "plain",
		"user.kaon.size": "3", "user.kaon.checksums": "adler32=02a80142", "user.kaon.path": "/p"} {
		buf := make([]byte, 256)
		n, err := unix.Getxattr(p, k, buf)
		if err != nil || string(buf[:n]) != v {
			t.Fatalf("%s of a new stripe: %q %v, want %q", k, buf[:max(n, 0)], err, v)
		}
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("new stripe file: %v %v", st, err)
	}
	// "new", crc32c("new") = 0xd743fc2e (the sum of its one block), then
	// the footer: magic, version 1, block 65536, length 3, 0, its crc32c.
	golden := "6e6577" + "2efc43d7" + hex.EncodeToString([]byte("KAONSUMS")) + "01000000" + "00000100" +
		"0300000000000000" + "00000000"
	b, _ = os.ReadFile(p)
	if got := hex.EncodeToString(b); len(b) != 3+4+32 || got[:len(golden)] != golden ||
		binary.LittleEndian.Uint32(b[len(b)-4:]) != checksum.CRC32CSum(b[7:7+28]) {
		t.Fatalf("new stripe file bytes %s, want %s + footer crc", got, golden)
	}
	// The old stripe reads without sums until they are added.
	r, _ = s.Open(41139)
	if r.BlockSums() || r.Close() != nil {
		t.Fatal("a version 1 stripe claims block sums")
	}
}

// TestInitializeBesideLostFound: a freshly made filesystem's lost+found
// does not count as existing data.
func TestInitializeBesideLostFound(t *testing.T) {
	root := t.TempDir()
	os.Mkdir(filepath.Join(root, "lost+found"), 0o700)
	if err := New(root, Options{}).Initialize(backend.Identity{FsID: 1, UUID: "u"}); err != nil {
		t.Fatal(err)
	}
}

// openDirect reports whether the stripe being written by w was opened
// with O_DIRECT, from the kernel's view of its descriptor.
func openDirect(t *testing.T, w backend.Writer) bool {
	t.Helper()
	fd := w.(*writer).f.OS().Fd()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			fl, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			if err != nil {
				t.Fatalf("fdinfo flags %q", v)
			}
			return fl&unix.O_DIRECT != 0
		}
	}
	t.Fatalf("no flags in fdinfo: %s", b)
	return false
}

// TestIOMode: io=auto writes with O_DIRECT on a local disk and through
// the page cache on tmpfs (as on FUSE and network filesystems); the
// operator's direct/buffered wins over detection, and Info says which.
func TestIOMode(t *testing.T) {
	cases := []struct {
		name, dir, io string
		direct        bool
	}{
		{"local auto", t.TempDir(), backend.IOAuto, true},
		{"local buffered", t.TempDir(), backend.IOBuffered, false},
		{"tmpfs auto", "/dev/shm", backend.IOAuto, false},
		{"tmpfs direct", "/dev/shm", backend.IODirect, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var st unix.Statfs_t
			if unix.Statfs(c.dir, &st) != nil || (c.dir == "/dev/shm") != (st.Type == unix.TMPFS_MAGIC) {
				t.Fatalf("%s: not the filesystem kind this case needs (statfs type %#x)", c.dir, st.Type)
			}
			dir, err := os.MkdirTemp(c.dir, "kaon-io")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			s := New(filepath.Join(dir, "fs"), Options{})
			if err := s.Configure(backend.Settings{IO: c.io}); err != nil {
				t.Fatal(err)
			}
			if err := s.Initialize(backend.Identity{FsID: 1, UUID: "u"}); err != nil {
				t.Fatal(err)
			}
			w, err := s.Create(uint64(i+1), backend.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			if got := openDirect(t, w); got != c.direct {
				t.Errorf("stripe opened with O_DIRECT %v, want %v", got, c.direct)
			}
			want := backend.IOBuffered
			if c.direct {
				want = backend.IODirect
			}
			if in := s.Info(); in.IO != want || in.Kind != backend.KindPosix || !strings.HasPrefix(in.Backend, "dev:") {
				t.Errorf("Info %+v, want io %s, kind posix, a dev: backend", in, want)
			}
		})
	}
}

// TestSameDiskSameBackend: two roots on one filesystem name one backend
// (counted once), roots on different filesystems different ones.
func TestSameDiskSameBackend(t *testing.T) {
	base := t.TempDir()
	a, b := New(filepath.Join(base, "a"), Options{}).Info(), New(filepath.Join(base, "b"), Options{}).Info()
	if a.Backend == "" || a.Backend != b.Backend {
		t.Fatalf("two directories of one disk: backends %q and %q", a.Backend, b.Backend)
	}
	shm := New("/dev/shm/kaon-never-made", Options{}).Info()
	if shm.Backend == a.Backend {
		t.Fatalf("tmpfs and %s share backend %q", base, a.Backend)
	}
}

// TestCephLayoutOutsideCephFS: a CephFS layout for a root that is not in
// a CephFS is refused with a reason, not silently ignored.
func TestCephLayoutOutsideCephFS(t *testing.T) {
	s := New(t.TempDir(), Options{})
	err := s.Configure(backend.Settings{CephPool: "kaonfs_ec"})
	if !kerr.Is(err, kerr.Invalid) || !strings.Contains(err.Error(), "not inside a CephFS") {
		t.Fatalf("Configure with a CephFS pool on a local disk: %v", err)
	}
}

// BenchmarkStripeWrite: writing a 64 MiB stripe in 1 MiB pieces with
// O_DIRECT, with block sums (a replica) and without (framed: an
// erasure-coded stripe): the cost of the sums (docs/DESIGN-NOTES.md).
func BenchmarkStripeWrite(b *testing.B) {
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, framed := range []bool{true, false} {
		name := "sums"
		if framed {
			name = "framed"
		}
		b.Run(name, func(b *testing.B) {
			s := New(filepath.Join(b.TempDir(), "fs"), Options{IO: backend.IODirect})
			if err := s.Initialize(backend.Identity{FsID: 1, UUID: "u"}); err != nil {
				b.Fatal(err)
			}
			const size = 64 << 20
			b.SetBytes(size)
			cpu := cputime.Start()
			fid := uint64(0)
			for b.Loop() {
				fid++
				w, err := s.Create(fid, backend.CreateOptions{Overlap: true, Framed: framed})
				if err != nil {
					b.Fatal(err)
				}
				for range size / len(data) {
					w.Write(data)
				}
				if err := w.Finish(backend.Meta{Layout: "plain", Size: size}); err != nil {
					b.Fatal(err)
				}
				s.Remove(fid)
			}
			cpu.Report(b, size)
		})
	}
}

// TestFramedWriterWritesFromFrames: a framed stripe's writer offers the
// erasure writer's copy-free path (erasure.AlignedWriter), and what it
// writes that way reads back.
func TestFramedWriterWritesFromFrames(t *testing.T) {
	s := New(filepath.Join(t.TempDir(), "fs"), Options{IO: backend.IODirect, Sync: true})
	if err := s.Initialize(backend.Identity{FsID: 1, UUID: "framed"}); err != nil {
		t.Fatal(err)
	}
	w, err := s.Create(7, backend.CreateOptions{Framed: true})
	if err != nil {
		t.Fatal(err)
	}
	aw, ok := w.(interface {
		WriteFrom(b []byte, lead int) (int, error)
	})
	if !ok {
		t.Fatal("a framed stripe's writer has no WriteFrom")
	}
	b := bufmem.Aligned(2*directio.Align, directio.Align).Get()
	for i := range b {
		b[i] = byte(i)
	}
	if n, err := aw.WriteFrom(b[:directio.Align+10], 0); err != nil || n != directio.Align+10 {
		t.Fatalf("WriteFrom = %d, %v", n, err)
	}
	if n, err := aw.WriteFrom(b[:directio.Align+30], 10); err != nil || n != directio.Align+20 {
		t.Fatalf("WriteFrom = %d, %v", n, err)
	}
	if err := w.Finish(backend.Meta{Size: 2*directio.Align + 30}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Open(7)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make([]byte, r.Size())
	if _, err := r.ReadAt(got, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	want := append(slices.Clone(b[:directio.Align+10]), b[10:directio.Align+30]...)
	if !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes, want %d, equal %v", len(got), len(want), bytes.Equal(got, want))
	}
}

// TestNoBlockSums: a filesystem set to keep no block sums writes stripes
// that are the file's bytes exactly (what a mount hands the kernel), and
// a scrub's AddBlockSums leaves them so; one that keeps them appends them.
func TestNoBlockSums(t *testing.T) {
	data := bytes.Repeat([]byte("kaon"), 50000)
	for _, off := range []bool{false, true} {
		s := New(filepath.Join(t.TempDir(), "fs"), Options{})
		if err := s.Configure(backend.Settings{NoBlockSums: off}); err != nil {
			t.Fatal(err)
		}
		if err := s.Initialize(backend.Identity{FsID: 1, UUID: "u"}); err != nil {
			t.Fatal(err)
		}
		w, err := s.Create(7, backend.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		if err := w.Finish(backend.Meta{Size: int64(len(data)), Layout: "plain"}); err != nil {
			t.Fatal(err)
		}
		sums := make([]uint32, checksum.Blocks(int64(len(data)), checksum.BlockSize))
		if err := s.AddBlockSums(7, checksum.BlockSize, sums, int64(len(data))); err != nil && off {
			t.Fatal(err)
		}
		st, err := os.Stat(PhysPath(s.Root(), 7))
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Open(7)
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		if plain := st.Size() == int64(len(data)) && !r.BlockSums(); plain != off {
			t.Errorf("blocksums off=%v: stripe file of %d bytes for %d, block sums %v", off, st.Size(), len(data), r.BlockSums())
		}
	}
}

// TestRemoteReadsPrefetch: on a network or FUSE filesystem (here a local
// one taken for one), a sequential read of a summed stripe asks the
// kernel for the next piece as soon as it returns one, so that piece is
// read into the page cache while this one is sent; the bytes read are
// still those written, every block verified.
func TestRemoteReadsPrefetch(t *testing.T) {
	root := filepath.Join(t.TempDir(), "fs")
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(root), &fs); err != nil {
		t.Fatal(err)
	}
	if _, ok := localMagic[int64(fs.Type)]; !ok {
		t.Skip("needs a disk filesystem (the page cache shows what was asked for)")
	}
	s := New(root, Options{IO: backend.IODirect})
	if err := s.Initialize(backend.Identity{FsID: 1, UUID: "u"}); err != nil {
		t.Fatal(err)
	}
	const piece = 1 << 20
	data := make([]byte, 4*piece)
	for i := range data {
		data[i] = byte(i*31 + i>>12)
	}
	w, err := s.Create(9, backend.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := w.Finish(backend.Meta{Size: int64(len(data)), Layout: "plain"}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(PhysPath(root, 9))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, len(data), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	cached := func(off int) bool { // the page at off is in the page cache
		vec := make([]byte, len(data)/os.Getpagesize())
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatal(e)
		}
		return vec[off/os.Getpagesize()]&1 != 0
	}
	last := 2*piece - os.Getpagesize() // the last page of the second piece
	if cached(last) {
		t.Skip("the page cache kept the stripe (DONTNEED not honoured here)")
	}
	s.remote.Store(true) // as detect finds a network or FUSE filesystem
	r, err := s.Open(9)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The disk's own read-ahead (8 MiB on the test VM) would bring the
	// next piece in anyway: turned off on the reader's file, as ceph-fuse's
	// 128 KiB window is next to nothing beside a 1 MiB piece.
	if err := unix.Fadvise(int(r.(*summedReader).f.Fd()), 0, 0, unix.FADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, piece)
	if n, err := r.ReadAt(buf, 0); n != piece || err != nil || !bytes.Equal(buf, data[:piece]) {
		t.Fatalf("first piece: %d bytes, %v, equal %v", n, err, bytes.Equal(buf[:n], data[:n]))
	}
	for deadline := time.Now().Add(10 * time.Second); !cached(last); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after a sequential read of the first piece, the second was never asked for (its last page at %d not in the page cache within 10 s)", last)
		}
	}
	for off := piece; off < len(data); off += piece {
		if n, err := r.ReadAt(buf, int64(off)); n != piece || (err != nil && err != io.EOF) || !bytes.Equal(buf, data[off:off+piece]) {
			t.Fatalf("piece at %d: %d bytes, %v", off, n, err)
		}
	}
}

package fusetest

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// FSX is an fsx-style exerciser: random operations on one file — reads,
// writes at any offset (past the end too), truncates up and down, reads
// and writes through a shared mmap, fsync, close and reopen — each
// checked against a model of what the file must hold. With several
// roots (mounts of one file system, as two nodes would have), every
// reopen happens in the next root: what one mount wrote and closed must
// be what the other opens (close-to-open).
type FSX struct {
	Roots   []string // directories the file is reached through (one or more mounts of one tree)
	Name    string   // the file's name in each root
	Ops     int      // operations to run
	Seed    int64    // the random sequence (printed on failure, to replay it)
	MaxSize int      // the file never grows past it (default 256 KiB)
	NoMmap  bool     // leave out the mmap operations
}

type fsxRun struct {
	t     *testing.T
	o     FSX
	rnd   *rand.Rand
	model []byte
	fd    int
	root  int // index of the root the file is open in
	log   []string
}

// Run runs the operations, failing t at the first answer that differs
// from the model (with the seed and the operations leading to it).
func (o FSX) Run(t *testing.T) {
	t.Helper()
	if o.MaxSize == 0 {
		o.MaxSize = 256 << 10
	}
	r := &fsxRun{t: t, o: o, rnd: rand.New(rand.NewSource(o.Seed)), fd: -1}
	f := filepath.Join(o.Roots[0], o.Name)
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatalf("fsx: create %s: %v", f, err)
	}
	r.open()
	for i := 0; i < o.Ops; i++ {
		r.step(i)
	}
	r.close()
	// What is stored, through every root.
	for i := range o.Roots {
		p := filepath.Join(o.Roots[i], o.Name)
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(b, r.model) {
			r.fail("final content through %s: %d bytes, err %v; want %d bytes (first difference at %d)", p, len(b), err, len(r.model), firstDiff(b, r.model))
		}
	}
}

func (r *fsxRun) path() string { return filepath.Join(r.o.Roots[r.root], r.o.Name) }

func (r *fsxRun) note(format string, a ...any) {
	r.log = append(r.log, fmt.Sprintf(format, a...))
	if len(r.log) > 40 {
		r.log = r.log[1:]
	}
}

func (r *fsxRun) fail(format string, a ...any) {
	r.t.Helper()
	if r.fd >= 0 {
		unix.Close(r.fd) // the mount must unmount after the failure
	}
	r.t.Fatalf("fsx (seed %d): %s\nlast operations:\n  %s", r.o.Seed, fmt.Sprintf(format, a...), strings.Join(r.log, "\n  "))
}

func (r *fsxRun) open() {
	fd, err := unix.Open(r.path(), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		r.fail("open %s: %v", r.path(), err)
	}
	r.fd = fd
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size != int64(len(r.model)) {
		r.fail("size after open in %s: %d (err %v), want %d", r.path(), st.Size, err, len(r.model))
	}
}

func (r *fsxRun) close() {
	err := unix.Close(r.fd)
	r.fd = -1
	if err != nil {
		r.fail("close %s: %v", r.path(), err)
	}
}

func (r *fsxRun) step(i int) {
	size := len(r.model)
	off, n := r.rnd.Intn(r.o.MaxSize), 1+r.rnd.Intn(r.o.MaxSize/8)
	switch op := r.rnd.Intn(100); {
	case op < 30: // read
		r.note("%d read %d+%d (size %d)", i, off, n, size)
		r.checkRead(off, n)
	case op < 60: // write
		n = min(n, r.o.MaxSize-off)
		p := make([]byte, n)
		r.rnd.Read(p)
		r.note("%d write %d+%d (size %d)", i, off, n, size)
		if w, err := unix.Pwrite(r.fd, p, int64(off)); err != nil || w != n {
			r.fail("pwrite %d+%d: %d, %v", off, n, w, err)
		}
		if off+n > size {
			r.model = append(r.model, make([]byte, off+n-size)...)
		}
		copy(r.model[off:], p)
	case op < 70: // truncate
		r.note("%d truncate %d (size %d)", i, off, size)
		if err := unix.Ftruncate(r.fd, int64(off)); err != nil {
			r.fail("ftruncate %d: %v", off, err)
		}
		if off < size {
			r.model = r.model[:off]
		} else {
			r.model = append(r.model, make([]byte, off-size)...)
		}
	case op < 80 && !r.o.NoMmap && size > 0: // mmap read or write
		off %= size
		n = min(n, size-off)
		write := r.rnd.Intn(2) == 0
		r.note("%d mmap %s %d+%d (size %d)", i, map[bool]string{false: "read", true: "write"}[write], off, n, size)
		m, err := unix.Mmap(r.fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			r.fail("mmap %d bytes: %v", size, err)
		}
		if write {
			r.rnd.Read(m[off : off+n])
			copy(r.model[off:], m[off:off+n])
			if err := unix.Msync(m, unix.MS_SYNC); err != nil {
				r.fail("msync: %v", err)
			}
		} else if d := firstDiff(m[off:off+n], r.model[off:off+n]); d >= 0 {
			r.fail("mmap read %d+%d differs at %d", off, n, off+d)
		}
		if err := unix.Munmap(m); err != nil {
			r.fail("munmap: %v", err)
		}
	case op < 85: // fsync
		r.note("%d fsync (size %d)", i, size)
		if err := unix.Fsync(r.fd); err != nil {
			r.fail("fsync: %v", err)
		}
	case op < 95: // close and reopen, in the next root
		r.close()
		r.root = (r.root + 1) % len(r.o.Roots)
		r.note("%d close, reopen in root %d (size %d)", i, r.root, size)
		r.open()
	default: // stat
		r.note("%d fstat (size %d)", i, size)
		var st unix.Stat_t
		if err := unix.Fstat(r.fd, &st); err != nil || st.Size != int64(size) {
			r.fail("fstat: size %d (err %v), want %d", st.Size, err, size)
		}
	}
}

// checkRead reads n bytes at off and compares them with the model
// (a read past the end is short).
func (r *fsxRun) checkRead(off, n int) {
	p := make([]byte, n)
	got, err := unix.Pread(r.fd, p, int64(off))
	want := max(0, min(n, len(r.model)-off))
	if err != nil || got != want {
		r.fail("pread %d+%d: %d bytes (err %v), want %d", off, n, got, err, want)
	}
	if got <= 0 {
		return
	}
	if d := firstDiff(p[:got], r.model[off:off+got]); d >= 0 {
		r.fail("pread %d+%d differs at %d: %#x, want %#x", off, n, off+d, p[d], r.model[off+d])
	}
}

// firstDiff is the first index where a and b differ (-1: equal).
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

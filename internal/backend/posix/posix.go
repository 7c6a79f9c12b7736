// Package posix is the backend.Store of a local directory (normally the
// root of one mounted disk): one file per stripe, named by file id, its
// metadata in xattrs, the crc32c of every 64 KiB block after its data
// or, once it was appended to, in a sums file beside it (verified by
// every read). Stripes are written with O_DIRECT (package
// directio) on local disks and through the page cache with one fsync at
// the end on network and FUSE filesystems (CephFS, NFS, ...), where
// O_DIRECT costs a synchronous round trip per buffer: the store finds out
// which it is at setup (detect.go) unless the operator chose. Inside a
// CephFS it also sets the root's layout (data pool, object size). The
// on-disk format is in format.go.
package posix

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/directio"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Options choose how stripes reach the disk.
type Options struct {
	// IO is the write mode until Configure says otherwise:
	// backend.IODirect writes stripes with O_DIRECT (through aligned
	// staging buffers, bypassing the page cache; see package directio for
	// why and the measurement), IOBuffered through the page cache, IOAuto
	// (or "") chooses by the filesystem: direct on local disks.
	IO string
	// Sync fsyncs every stripe in Finish, before the upload it belongs to
	// is committed. Without it a crash may lose committed data (benchmarks
	// only).
	Sync bool
	// CephHealth, if set, asks the Ceph cluster with that fsid for its
	// health (Info of a root inside a CephFS); "" when it cannot.
	CephHealth func(clusterFSID string) string
}

// Store is one filesystem directory.
type Store struct {
	root string
	opts Options

	direct atomic.Bool // write new stripes with O_DIRECT
	remote atomic.Bool // a network or FUSE filesystem: reads prefetch (summedReader)

	setMu    sync.Mutex
	settings backend.Settings
	found    place // what detect found last

	mu      sync.Mutex
	want    backend.Identity // the identity last checked or initialized
	offline string           // why Create is refused; "" once the identity checked out

	buckets sync.Map // bucket directories known to exist

	rewriting [64]sync.Mutex // in-place changes, by fid (lockFid)
	prepared  sync.Map       // fid → journalID: journals this Store wrote and synced (journal.go)

	crashAt string // tests: the step of Apply that fails as a crash would (journal.go)

	files   atomic.Int64
	counted atomic.Bool // files is the count of this root's stripes
	countMu sync.Mutex
}

var _ backend.Store = (*Store)(nil)

// New returns the store of the directory root. Nothing is created until
// Initialize, or until a stripe is written after the identity checked out.
func New(root string, o Options) *Store {
	s := &Store{root: root, opts: o}
	s.offline = "identity not checked yet"
	s.settings.IO = o.IO
	// Until Configure or Initialize found out what the root is (which
	// may block on a hung mount: New must not).
	s.direct.Store(o.IO != backend.IOBuffered)
	return s
}

// redetect finds out what the root is and chooses the write mode.
func (s *Store) redetect() error {
	p, err := detect(s.root)
	s.setMu.Lock()
	defer s.setMu.Unlock()
	if err == nil {
		s.found = p
		s.remote.Store(p.remote)
	}
	switch s.settings.IO {
	case backend.IODirect:
		s.direct.Store(true)
	case backend.IOBuffered:
		s.direct.Store(false)
	default:
		s.direct.Store(err == nil && !s.found.remote)
	}
	return err
}

// Configure applies the write mode and, inside a CephFS, the root's
// layout (now if the root exists, else when Initialize makes it).
func (s *Store) Configure(set backend.Settings) error {
	switch set.IO {
	case "", backend.IOAuto, backend.IODirect, backend.IOBuffered:
	default:
		return kerr.New(kerr.Invalid, "configure", s.root, fmt.Sprintf("io=%s: want auto, direct or buffered", set.IO))
	}
	s.setMu.Lock()
	s.settings = set
	s.setMu.Unlock()
	if err := s.redetect(); err != nil {
		return kerr.New(kerr.IO, "configure", s.root, err.Error())
	}
	if _, err := os.Stat(s.root); err != nil {
		return nil // Initialize sets the layout
	}
	return s.applyLayout()
}

// applyLayout sets the CephFS layout the settings ask for on the root.
func (s *Store) applyLayout() error {
	s.setMu.Lock()
	set, kind := s.settings, s.found.kind
	s.setMu.Unlock()
	if set.CephPool == "" && set.ObjectSize == 0 {
		return nil
	}
	if kind != backend.KindCephFS {
		return kerr.New(kerr.Invalid, "configure", s.root, "a CephFS layout (pool, object size) is set for this filesystem's space, but it is not inside a CephFS")
	}
	if err := setLayout(s.root, set); err != nil {
		return kerr.New(kerr.KindOf(err), "configure", s.root, "CephFS layout: "+err.Error())
	}
	return nil
}

// Info says what the root is (detected again: a disk may have been
// mounted since).
func (s *Store) Info() backend.Info {
	err := s.redetect()
	s.setMu.Lock()
	p := s.found
	s.setMu.Unlock()
	in := backend.Info{Kind: p.kind, Backend: p.backend, FsType: p.fsType, IO: backend.IOBuffered}
	if s.direct.Load() {
		in.IO = backend.IODirect
	}
	if err != nil {
		in.Health = err.Error()
	} else if p.kind == backend.KindCephFS {
		in.Health = "mount answers"
		if fsid, ok := strings.CutPrefix(p.backend, "cephfs:"); ok && s.opts.CephHealth != nil {
			if h := s.opts.CephHealth(fsid); h != "" {
				in.Health = h
			}
		}
	}
	return in
}

// Root is the store's directory.
func (s *Store) Root() string { return s.root }

// fail turns err from an operation on the stripe of fid into a kerr error
// naming the stripe's file; errnos keep their kind, anything else is I/O.
func (s *Store) fail(op string, fid uint64, err error) error {
	k := kerr.KindOf(err)
	if k == kerr.Internal {
		k = kerr.IO
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return kerr.Wrap(k, op, PhysPath(s.root, fid), err)
}

func (s *Store) Create(fid uint64, o backend.CreateOptions) (backend.Writer, error) {
	s.mu.Lock()
	why := s.offline
	s.mu.Unlock()
	if why != "" {
		return nil, kerr.New(kerr.Unavailable, "create", s.root, "filesystem is offline: "+why)
	}
	p := PhysPath(s.root, fid)
	dir := filepath.Dir(p)
	if _, ok := s.buckets.Load(dir); !ok {
		// Never create anything in a root that is not (or no longer) the
		// registered filesystem: a missing bucket is made only after the
		// identity marker has been seen again.
		if why := s.CheckIdentity(s.wanted()); why != "" {
			return nil, kerr.New(kerr.Unavailable, "create", s.root, "filesystem is offline: "+why)
		}
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, s.fail("create", fid, err)
		}
		s.buckets.Store(dir, true)
	}
	var f *directio.File
	var err error
	if s.direct.Load() {
		f, err = directio.Create(p, 0o600, o.Overlap)
	} else {
		f, err = directio.CreateBuffered(p, 0o600)
	}
	if err != nil {
		return nil, s.fail("create", fid, err)
	}
	// A sums file left by a removal a crash cut short is not this
	// stripe's (a new stripe keeps its sums after its data).
	if err := os.Remove(p + ".sums"); err != nil && !errors.Is(err, os.ErrNotExist) {
		f.Close()
		os.Remove(p)
		return nil, s.fail("create", fid, err)
	}
	s.files.Add(1)
	w := &writer{s: s, fid: fid, f: f}
	if !o.Framed && !s.noSums() {
		w.sums = checksum.NewBlockSummer(checksum.BlockSize)
	}
	return w, nil
}

func (s *Store) wanted() backend.Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.want
}

func (s *Store) WriteMemory(o backend.CreateOptions) int64 {
	switch {
	case !s.direct.Load():
		return 0
	case o.Overlap:
		return 2 * directio.BufSize
	}
	return directio.BufSize
}

// writer writes one new stripe file, summing its blocks as they pass
// (the sums follow the data, format.go).
type writer struct {
	s                *Store
	fid              uint64
	f                *directio.File
	sums             *checksum.BlockSummer // nil: a framed stripe
	closed, finished bool
}

func (w *writer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if w.sums != nil {
		w.sums.Write(p[:n])
	}
	return n, err
}

// DataCRC32C is backend.CRC32CWriter's.
func (w *writer) DataCRC32C() (uint32, bool) {
	if w.sums == nil {
		return 0, false
	}
	return w.sums.CRC32C(), true
}

// WriteFrom writes a framed stripe's frame b[lead:] from its aligned
// buffer b without a staging copy (erasure.AlignedWriter,
// directio.File.WriteFrom).
func (w *writer) WriteFrom(b []byte, lead int) (int, error) {
	if w.sums != nil {
		return w.Write(b[lead:])
	}
	return w.f.WriteFrom(b, lead)
}

func (w *writer) Finish(m backend.Meta) error {
	m.Fid = w.fid
	var err error
	if w.sums != nil {
		_, err = w.f.Write(trailer(w.sums, checksum.BlockSize))
	}
	if err == nil {
		err = w.f.Finish()
	}
	if err == nil {
		err = writeMeta(w.f.OS(), m)
	}
	if err == nil && w.s.opts.Sync {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.closed = true
	if err != nil {
		return w.s.fail("finish", w.fid, err)
	}
	w.finished = true
	return nil
}

func (w *writer) Abort() {
	if w.finished {
		return
	}
	if !w.closed {
		w.f.Close()
		w.closed = true
	}
	if os.Remove(PhysPath(w.s.root, w.fid)) == nil {
		w.s.files.Add(-1)
	}
}

func (s *Store) Open(fid uint64) (backend.Reader, error) {
	p := PhysPath(s.root, fid)
	f, err := os.Open(p)
	if err != nil {
		return nil, s.fail("open", fid, err)
	}
	x, err := sumsOf(f, p, false)
	if err != nil {
		f.Close()
		return nil, s.fail("open", fid, err)
	}
	damaged := damage(f)
	if !x.summed {
		return &reader{f: f, size: x.size, damaged: damaged}, nil
	}
	r := &summedReader{f: f, damaged: damaged, t: x.t, side: x.side, prefetch: s.remote.Load()}
	r.tf, r.tab = x.table(f)
	r.br = checksum.BlockReader{R: f, Len: x.t.len, Size: x.t.block, Sums: r.sums}
	return r, nil
}

// damage reads the damage mark of an open stripe file ("" when none).
func damage(f *os.File) string {
	buf := make([]byte, 1024)
	n, err := unix.Fgetxattr(int(f.Fd()), xaDamaged, buf)
	if err == unix.ERANGE {
		return "damaged (the reason is too long to read)"
	}
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// reader reads a stripe file without block sums (version 1, or framed).
type reader struct {
	f       *os.File
	size    int64
	damaged string
}

func (r *reader) ReadAt(p []byte, off int64) (int, error) { return r.f.ReadAt(p, off) }
func (r *reader) Size() int64                             { return r.size }
func (r *reader) Close() error                            { return r.f.Close() }
func (r *reader) OSFile() *os.File                        { return r.f }
func (r *reader) BlockSums() bool                         { return false }
func (r *reader) Damaged() string                         { return r.damaged }

// summedReader reads a stripe file with block sums, verifying every block
// it returns. The sums are read from their table (after the data, or in
// the sums file) in windows of sumsWindow.
type summedReader struct {
	f       *os.File
	damaged string
	t       sumsInfo
	side    *os.File // the sums file (version 3), nil for a trailer
	tf      *os.File // where the table is: f or side
	tab     int64    // its offset there
	br      checksum.BlockReader

	mu    sync.Mutex
	first int64    // block of win[0]
	win   []uint32 // a window of the table

	// prefetch: after a read that continues the previous one (end), the
	// next piece of the same length is asked for (see ReadAt).
	prefetch bool
	end      atomic.Int64
}

// sumsWindow is how many sums a reader reads at once (16 KiB of table,
// 1 GiB of data with 64 KiB blocks).
const sumsWindow = 4096

func (r *summedReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.br.ReadAt(p, off)
	if r.prefetch && n > 0 && r.end.Swap(off+int64(n)) == off {
		// A sequential reader (a whole-file GET, a copy) sends this piece
		// before it asks for the next. On a network or FUSE filesystem
		// the kernel reads ahead only its small window (128 KiB on
		// ceph-fuse) while the piece is sent; the whole next piece is
		// asked for now, into the page cache, with no memory of ours.
		// (Through Control: a read the guard gave up on may end after
		// Close, and the descriptor's number may name another file by then.)
		if rc, err := r.f.SyscallConn(); err == nil {
			next := off + int64(n)
			rc.Control(func(fd uintptr) { _ = unix.Fadvise(int(fd), next, int64(len(p)), unix.FADV_WILLNEED) })
		}
	}
	if err != nil && err != io.EOF {
		err = kerr.Wrap(kerr.IO, "read", r.f.Name(), err)
	}
	return n, err
}

func (r *summedReader) sums(first, n int64) ([]uint32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if first >= r.first && first+n <= r.first+int64(len(r.win)) {
		return r.win[first-r.first : first-r.first+n], nil
	}
	total := checksum.Blocks(r.t.len, r.t.block)
	if first < 0 || first+n > total {
		return nil, fmt.Errorf("blocks %d-%d are beyond the stripe's %d", first, first+n-1, total)
	}
	count := min(max(n, sumsWindow), total-first)
	b := make([]byte, 4*count)
	if _, err := r.tf.ReadAt(b, r.tab+4*first); err != nil {
		return nil, fmt.Errorf("reading the block sums: %w", err)
	}
	r.first, r.win = first, checksum.ParseSums(b)
	return r.win[:n], nil
}

func (r *summedReader) Size() int64 { return r.t.len }
func (r *summedReader) Close() error {
	if r.side != nil {
		r.side.Close()
	}
	return r.f.Close()
}
func (r *summedReader) BlockSums() bool { return true }
func (r *summedReader) Damaged() string { return r.damaged }

// lockFid serializes the in-place changes of one stripe (Rewrite,
// AddBlockSums, Apply).
func (s *Store) lockFid(fid uint64) func() {
	m := &s.rewriting[fid%uint64(len(s.rewriting))]
	m.Lock()
	return m.Unlock
}

func (s *Store) Rewrite(fid uint64, off int64, p []byte) error {
	defer s.lockFid(fid)()
	path := PhysPath(s.root, fid)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return s.fail("rewrite", fid, err)
	}
	defer f.Close()
	x, err := sumsOf(f, path, true)
	if err != nil {
		return s.fail("rewrite", fid, err)
	}
	defer x.close()
	t, summed := x.t, x.summed
	end := off + int64(len(p))
	dataLen := x.dataLen()
	if off < 0 || end > dataLen {
		return kerr.New(kerr.Invalid, "rewrite", PhysPath(s.root, fid),
			fmt.Sprintf("bytes %d-%d are outside the stripe's %d", off, end-1, dataLen))
	}
	var sums []byte
	var first int64
	if summed {
		var news []uint32
		r := &summedReader{f: f, t: t}
		r.tf, r.tab = x.table(f)
		first, news, err = checksum.RewriteSums(t.block, t.len, off, p, func(b []byte, at int64) error {
			_, err := f.ReadAt(b, at)
			return err
		}, r.sums)
		if err != nil {
			return kerr.Wrap(kerr.IO, "rewrite", PhysPath(s.root, fid), err)
		}
		sums = checksum.PutSums(news)
	}
	if _, err := f.WriteAt(p, off); err != nil {
		return s.fail("rewrite", fid, err)
	}
	if len(sums) > 0 {
		tf, tab := x.table(f)
		if _, err := tf.WriteAt(sums, tab+4*first); err != nil {
			return s.fail("rewrite", fid, err)
		}
	}
	if s.opts.Sync {
		if err := f.Sync(); err != nil {
			return s.fail("rewrite", fid, err)
		}
		if x.side != nil {
			if err := x.side.Sync(); err != nil {
				return s.fail("rewrite", fid, err)
			}
		}
	}
	if err := unix.Fremovexattr(int(f.Fd()), xaDamaged); err != nil && err != unix.ENODATA {
		return s.fail("rewrite", fid, err)
	}
	return nil
}

// noSums: the filesystem keeps stripes without block sums
// (backend.Settings.NoBlockSums).
func (s *Store) noSums() bool {
	s.setMu.Lock()
	defer s.setMu.Unlock()
	return s.settings.NoBlockSums
}

// AddBlockSums adds nothing where the filesystem keeps no block sums.
func (s *Store) AddBlockSums(fid uint64, bs int, sums []uint32, length int64) error {
	if s.noSums() {
		return nil
	}
	defer s.lockFid(fid)()
	p := PhysPath(s.root, fid)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return s.fail("add block sums", fid, err)
	}
	defer f.Close()
	x, err := sumsOf(f, p, false)
	if err != nil || x.summed {
		x.close()
		return s.failIf("add block sums", fid, err)
	}
	size := x.size
	if bs < checksum.MinBlockSize || bs > checksum.MaxBlockSize || size != length || int64(len(sums)) != checksum.Blocks(length, bs) {
		return kerr.New(kerr.Invalid, "add block sums", PhysPath(s.root, fid),
			fmt.Sprintf("%d sums of %d-byte blocks for %d bytes; the stripe holds %d", len(sums), bs, length, size))
	}
	t := append(checksum.PutSums(sums), encodeFooter(sumsInfo{block: bs, len: length})...)
	if _, err := f.WriteAt(t, length); err != nil {
		_ = f.Truncate(length)
		return s.fail("add block sums", fid, err)
	}
	if err := f.Sync(); err != nil {
		return s.fail("add block sums", fid, err)
	}
	return nil
}

// failIf is fail for a non-nil err, else nil.
func (s *Store) failIf(op string, fid uint64, err error) error {
	if err == nil {
		return nil
	}
	return s.fail(op, fid, err)
}

func (s *Store) MarkDamaged(fid uint64, why string) error {
	p := PhysPath(s.root, fid)
	var err error
	if why == "" {
		if err = unix.Removexattr(p, xaDamaged); err == unix.ENODATA {
			err = nil
		}
	} else {
		err = unix.Setxattr(p, xaDamaged, []byte(why), 0)
	}
	return s.failIf("mark damaged", fid, err)
}

func (s *Store) ReadMeta(fid uint64) (backend.Meta, error) {
	m, err := readMeta(PhysPath(s.root, fid))
	if err != nil {
		return m, s.fail("read metadata", fid, err)
	}
	return m, nil
}

func (s *Store) Remove(fid uint64) error {
	p := PhysPath(s.root, fid)
	if err := os.Remove(p); err != nil {
		return s.fail("remove", fid, err)
	}
	s.files.Add(-1)
	// Its sums file, if any (a stripe created under the fid again
	// removes one left by a crash here: Create), and one a crash left
	// half written.
	os.Remove(p + ".sums")
	os.Remove(p + ".sums.tmp")
	return nil
}

func (s *Store) Walk(fn func(fid uint64, m backend.Meta, err error) error) error {
	return s.walk(func(fid uint64, path string) error {
		m, err := readMeta(path)
		if err != nil {
			err = s.fail("read metadata", fid, err)
		}
		return fn(fid, m, err)
	})
}

// walk calls fn with every stripe file under the root; anything else
// (the marker, lost+found, foreign files) is skipped.
func (s *Store) walk(fn func(fid uint64, path string) error) error {
	buckets, err := os.ReadDir(s.root)
	if err != nil {
		return kerr.Wrap(kerr.KindOf(err), "walk", s.root, unwrapPath(err))
	}
	for _, b := range buckets {
		if !b.IsDir() {
			continue
		}
		dir := filepath.Join(s.root, b.Name())
		ents, err := os.ReadDir(dir)
		if err != nil {
			return kerr.Wrap(kerr.IO, "walk", dir, unwrapPath(err))
		}
		for _, e := range ents {
			if fid, ok := parseName(b.Name(), e.Name()); ok && e.Type().IsRegular() {
				if err := fn(fid, filepath.Join(dir, e.Name())); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (s *Store) Usage() (backend.Usage, error) {
	var u backend.Usage
	var st unix.Statfs_t
	if err := unix.Statfs(s.root, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return u, kerr.New(kerr.NotFound, "usage", s.root, "root directory: "+err.Error())
		}
		return u, kerr.New(kerr.IO, "usage", s.root, err.Error())
	}
	u.Capacity = st.Blocks * uint64(st.Bsize)
	u.Used = (st.Blocks - st.Bavail) * uint64(st.Bsize)
	s.count()
	u.Files = s.files.Load()
	if unix.Access(s.root, unix.W_OK) != nil {
		return u, kerr.New(kerr.ReadOnly, "usage", s.root, "not writable")
	}
	return u, nil
}

// count counts the stripes once, and again after an identity check
// failed (what is at the root may have changed); writes and removals keep
// the figure up to date in between.
func (s *Store) count() {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	if s.counted.Load() {
		return
	}
	var n int64
	_ = s.walk(func(uint64, string) error { n++; return nil })
	s.files.Store(n)
	s.counted.Store(true)
}

func (s *Store) Identity() (backend.Identity, error) {
	id, err := readMarker(s.root)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return id, kerr.New(kerr.NotFound, "identity", s.root, "identity marker "+markerName+" missing")
	case err != nil:
		return id, kerr.New(kerr.IO, "identity", s.root, "identity marker: "+unwrapPath(err).Error())
	}
	return id, nil
}

func (s *Store) Initialize(id backend.Identity) error {
	if err := os.MkdirAll(s.root, 0o700); err != nil {
		return kerr.Wrap(kerr.KindOf(err), "initialize", s.root, unwrapPath(err))
	}
	ents, err := os.ReadDir(s.root)
	if err != nil {
		return kerr.Wrap(kerr.KindOf(err), "initialize", s.root, unwrapPath(err))
	}
	for _, e := range ents {
		if e.Name() != "lost+found" {
			return kerr.New(kerr.NotEmpty, "initialize", s.root,
				fmt.Sprintf("not empty (%s); refusing to initialize over existing data", e.Name()))
		}
	}
	_ = s.redetect()
	if err := s.applyLayout(); err != nil {
		return err
	}
	if err := writeMarker(s.root, id); err != nil {
		return kerr.Wrap(kerr.IO, "initialize", s.root, unwrapPath(err))
	}
	s.mu.Lock()
	s.want, s.offline = id, ""
	s.mu.Unlock()
	s.files.Store(0)
	s.counted.Store(true)
	return nil
}

func (s *Store) CheckIdentity(want backend.Identity) string {
	why := s.check(want)
	s.mu.Lock()
	s.want, s.offline = want, why
	s.mu.Unlock()
	if why != "" {
		s.counted.Store(false)
		s.buckets.Clear()
	}
	return why
}

func (s *Store) check(want backend.Identity) string {
	if st, err := os.Stat(s.root); err != nil {
		return "root directory: " + unwrapPath(err).Error()
	} else if !st.IsDir() {
		return "root is not a directory"
	}
	id, err := readMarker(s.root)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "identity marker " + markerName + " missing (filesystem not mounted?)"
	case err != nil:
		return "identity marker: " + unwrapPath(err).Error()
	case id.FsID != want.FsID:
		return fmt.Sprintf("identity marker names fs %d, not fs %d", id.FsID, want.FsID)
	case id.UUID == "" && want.UUID != "":
		// Written before markers carried a uuid: adopt it now.
		if err := writeMarker(s.root, want); err != nil {
			return "cannot upgrade identity marker: " + err.Error()
		}
	case want.UUID != "" && id.UUID != want.UUID:
		return fmt.Sprintf("identity marker is of another instance's fs %d (uuid %s, expected %s)", id.FsID, id.UUID, want.UUID)
	}
	return ""
}

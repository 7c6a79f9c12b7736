//go:build ceph

package rados

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/rados"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Options are a storage server's defaults for its RADOS filesystems.
type Options struct {
	User string // Ceph client id for places that name none ("" = Ceph's default, admin)
	Conf string // ceph.conf for places that name none ("" = Ceph's default search)
	// Timeout bounds every librados operation (osd, monitor, connect):
	// past it an operation fails (kerr.Unavailable) instead of waiting
	// for the cluster. 0 means no bound.
	Timeout time.Duration
}

// Store is one filesystem: an object namespace in a RADOS pool.
type Store struct {
	place Place
	where string // rados://pool/namespace, in errors
	cl    *cluster

	ioMu  sync.Mutex
	ioctx *rados.IOContext

	objSize atomic.Int64

	mu      sync.Mutex
	want    backend.Identity
	offline string

	files   atomic.Int64
	counted atomic.Bool
	countMu sync.Mutex
}

var _ backend.Store = (*Store)(nil)

// Open returns the store of place (rados://...). Nothing is contacted
// until the store is used.
func Open(place string, o Options) (backend.Store, error) {
	p, err := ParsePlace(place)
	if err != nil {
		return nil, kerr.New(kerr.Invalid, "open", place, err.Error())
	}
	if p.User == "" {
		p.User = o.User
	}
	if p.Conf == "" {
		p.Conf = o.Conf
	}
	s := &Store{place: p, where: fmt.Sprintf("rados://%s/%s", p.Pool, p.Namespace), cl: clusterOf(p.Conf, p.User, o.Timeout)}
	s.objSize.Store(DefaultObjectSize)
	s.offline = "identity not checked yet"
	return s, nil
}

// fail turns a librados error about object obj into a kerr error.
func (s *Store) fail(op, obj string, err error) error {
	where := s.where
	if obj != "" {
		where += "/" + obj
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return kerr.Wrap(ke.Kind, op, where, err)
	}
	return kerr.Wrap(kindOf(err), op, where, err)
}

// io returns the pool's I/O context in the filesystem's namespace.
func (s *Store) io() (*rados.IOContext, error) {
	s.ioMu.Lock()
	defer s.ioMu.Unlock()
	if s.ioctx != nil {
		return s.ioctx, nil
	}
	conn, err := s.cl.connect()
	if err != nil {
		return nil, kerr.New(kerr.Unavailable, "connect", s.where, "cannot reach the Ceph cluster: "+err.Error())
	}
	ioctx, err := conn.OpenIOContext(s.place.Pool)
	if err != nil {
		return nil, s.fail("open pool", "", err)
	}
	ioctx.SetNamespace(s.place.Namespace)
	// A full pool answers writes with ENOSPC/EDQUOT instead of holding
	// them until space is freed.
	if err := ioctx.SetPoolFullTry(); err != nil {
		ioctx.Destroy()
		return nil, s.fail("open pool", "", err)
	}
	s.ioctx = ioctx
	return ioctx, nil
}

func (s *Store) Create(fid uint64, o backend.CreateOptions) (backend.Writer, error) {
	s.mu.Lock()
	why := s.offline
	s.mu.Unlock()
	if why != "" {
		return nil, kerr.New(kerr.Unavailable, "create", s.where, "filesystem is offline: "+why)
	}
	ioctx, err := s.io()
	if err != nil {
		return nil, err
	}
	head := headName(fid)
	if err := ioctx.Create(head, rados.CreateExclusive); err != nil {
		return nil, s.fail("create", head, err)
	}
	s.files.Add(1)
	w := &writer{s: s, io: ioctx, fid: fid, objSize: s.objSize.Load(), unit: unitOf(s.objSize.Load())}
	if o.Overlap {
		w.slots = make(chan struct{}, writeDepth)
	}
	return w, nil
}

// writeUnit is the largest single write: RADOS writes of a few MiB keep
// an OSD's pipeline full without holding much memory per stream.
const writeUnit = 4 << 20

// writeDepth is how many writes one overlapped stripe writer keeps in
// flight while it fills the next buffer.
const writeDepth = 2

func unitOf(objSize int64) int64 { return min(objSize, writeUnit) }

func (s *Store) WriteMemory(o backend.CreateOptions) int64 {
	u := unitOf(s.objSize.Load())
	if o.Overlap {
		return (writeDepth + 1) * u
	}
	return u
}

var bufPool sync.Pool

func getBuf(n int64) []byte {
	if b, ok := bufPool.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		return (*b)[:n]
	}
	return make([]byte, n)
}

func putBuf(b []byte) { bufPool.Put(&b) }

// writer cuts a new stripe into objects.
type writer struct {
	s       *Store
	io      *rados.IOContext
	fid     uint64
	objSize int64
	unit    int64

	buf []byte // being filled
	n   int64  // bytes in buf
	off int64  // stripe offset of buf[0]

	slots chan struct{} // overlapped writes in flight (nil: writes are synchronous)
	wg    sync.WaitGroup

	errMu    sync.Mutex
	err      error
	lastObj  atomic.Int64 // the highest object index written
	finished bool
	aborted  bool
}

func (w *writer) setErr(err error) {
	if err == nil {
		return
	}
	w.errMu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.errMu.Unlock()
}

func (w *writer) firstErr() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

func (w *writer) Write(p []byte) (int, error) {
	if err := w.firstErr(); err != nil {
		return 0, err
	}
	if w.finished || w.aborted {
		return 0, kerr.New(kerr.Invalid, "write", w.s.where+"/"+headName(w.fid), "stripe closed")
	}
	done := 0
	for done < len(p) {
		if w.buf == nil {
			w.buf = getBuf(w.unit)
		}
		c := copy(w.buf[w.n:], p[done:])
		w.n += int64(c)
		done += c
		if w.n == w.unit {
			w.flush()
		}
	}
	return done, w.firstErr()
}

// flush sends the buffer: in the background (at most writeDepth at once)
// when overlapped, else now.
func (w *writer) flush() {
	if w.n == 0 {
		return
	}
	b, off := w.buf[:w.n], w.off
	w.off += w.n
	w.buf, w.n = nil, 0
	if w.slots == nil {
		w.setErr(w.put(b, off))
		putBuf(b)
		return
	}
	w.slots <- struct{}{}
	w.wg.Add(1)
	go func() {
		defer func() { <-w.slots; w.wg.Done() }()
		w.setErr(w.put(b, off))
		putBuf(b)
	}()
}

// put writes b at stripe offset off, into as many objects as it spans.
func (w *writer) put(b []byte, off int64) error {
	for len(b) > 0 {
		obj, in := off/w.objSize, off%w.objSize
		n := min(int64(len(b)), w.objSize-in)
		name := objectName(w.fid, obj)
		if err := w.io.Write(name, b[:n], uint64(in)); err != nil {
			return w.s.fail("write", name, err)
		}
		for last := w.lastObj.Load(); obj > last && !w.lastObj.CompareAndSwap(last, obj); last = w.lastObj.Load() {
		}
		b, off = b[n:], off+n
	}
	return nil
}

// Finish writes what is buffered, waits for the writes in flight, and
// then records the metadata on the head in one operation: only then is
// the stripe complete.
func (w *writer) Finish(m backend.Meta) error {
	if w.finished || w.aborted {
		return kerr.New(kerr.Invalid, "finish", w.s.where+"/"+headName(w.fid), "stripe closed")
	}
	w.flush()
	w.wg.Wait()
	if err := w.firstErr(); err != nil {
		return err
	}
	m.Fid = w.fid
	op := rados.CreateWriteOp()
	defer op.Release()
	for k, v := range encodeMeta(m, w.off, w.objSize) {
		if len(v) > 0 { // an empty value reads back as a missing one
			op.SetXattr(k, v)
		}
	}
	head := headName(w.fid)
	if err := op.Operate(w.io, head, rados.OperationFullTry); err != nil {
		return w.s.fail("finish", head, err)
	}
	w.finished = true
	return nil
}

func (w *writer) Abort() {
	if w.finished || w.aborted {
		return
	}
	w.aborted = true
	w.wg.Wait()
	if w.buf != nil {
		putBuf(w.buf)
		w.buf = nil
	}
	for n := w.lastObj.Load(); n >= 1; n-- {
		_ = w.io.Delete(objectName(w.fid, n))
	}
	if err := w.io.Delete(headName(w.fid)); err == nil {
		w.s.files.Add(-1)
	}
}

// head reads the metadata of stripe fid.
func (s *Store) head(op string, fid uint64) (*rados.IOContext, backend.Meta, int64, int64, error) {
	ioctx, err := s.io()
	if err != nil {
		return nil, backend.Meta{}, 0, 0, err
	}
	name := headName(fid)
	xa, err := ioctx.ListXattrs(name)
	if err != nil {
		return nil, backend.Meta{}, 0, 0, s.fail(op, name, err)
	}
	m, length, objSize, err := decodeMeta(xa)
	if err != nil {
		return nil, m, 0, 0, kerr.Wrap(kerr.IO, op, s.where+"/"+name, err)
	}
	return ioctx, m, length, objSize, nil
}

func (s *Store) Open(fid uint64) (backend.Reader, error) {
	ioctx, err := s.io()
	if err != nil {
		return nil, err
	}
	name := headName(fid)
	xa, err := ioctx.ListXattrs(name)
	if err != nil {
		return nil, s.fail("open", name, err)
	}
	_, length, objSize, err := decodeMeta(xa)
	if err != nil {
		return nil, kerr.Wrap(kerr.IO, "open", s.where+"/"+name, err)
	}
	return &reader{s: s, io: ioctx, fid: fid, length: length, objSize: objSize, unit: min(objSize, readUnit),
		damaged: string(xa[xaDamaged])}, nil
}

// Rewrite writes p over the objects holding [off, off+len(p)). There are
// no sums to recompute: BlueStore keeps its own per block.
func (s *Store) Rewrite(fid uint64, off int64, p []byte) error {
	ioctx, _, length, objSize, err := s.head("rewrite", fid)
	if err != nil {
		return err
	}
	if end := off + int64(len(p)); off < 0 || end > length {
		return kerr.New(kerr.Invalid, "rewrite", s.where+"/"+headName(fid), fmt.Sprintf("bytes %d-%d are outside the stripe's %d", off, end-1, length))
	}
	for len(p) > 0 {
		obj, in := off/objSize, off%objSize
		n := min(int64(len(p)), objSize-in)
		name := objectName(fid, obj)
		if err := ioctx.Write(name, p[:n], uint64(in)); err != nil {
			return s.fail("rewrite", name, err)
		}
		p, off = p[n:], off+n
	}
	return s.MarkDamaged(fid, "")
}

// AddBlockSums adds nothing: every block of a RADOS object is summed and
// verified by BlueStore (bluestore_csum_type, crc32c by default).
func (s *Store) AddBlockSums(uint64, int, []uint32, int64) error { return nil }

func (s *Store) MarkDamaged(fid uint64, why string) error {
	ioctx, err := s.io()
	if err != nil {
		return err
	}
	name := headName(fid)
	// RADOS creates a missing object on setxattr: a stripe that does not
	// exist is NotFound, not a new empty object carrying the mark.
	if _, err := ioctx.Stat(name); err != nil {
		return s.fail("mark damaged", name, err)
	}
	if why == "" {
		err = ioctx.RmXattr(name, xaDamaged)
		if e, ok := errnoOf(err); ok && e == syscall.ENODATA {
			err = nil
		}
	} else {
		err = ioctx.SetXattr(name, xaDamaged, []byte(why))
	}
	if err != nil {
		return s.fail("mark damaged", name, err)
	}
	return nil
}

// readUnit is what a reader fetches at once; it reads the next unit ahead
// while the caller consumes one, so a sequential read keeps two RADOS
// reads in flight.
const readUnit = 2 << 20

// reader reads a finished stripe through a two-unit read-ahead cache.
type reader struct {
	s       *Store
	io      *rados.IOContext
	fid     uint64
	length  int64
	objSize int64
	unit    int64

	damaged string

	mu        sync.Mutex
	cur, next *chunk
	closed    bool
}

// BlockSums is true: BlueStore verifies every block it reads (a block
// that fails comes back as EIO).
func (r *reader) BlockSums() bool { return true }
func (r *reader) Damaged() string { return r.damaged }

type chunk struct {
	off  int64
	data []byte
	err  error
	done chan struct{}
}

func (r *reader) Size() int64 { return r.length }

func (r *reader) Close() error {
	r.mu.Lock()
	r.closed = true
	r.cur, r.next = nil, nil
	r.mu.Unlock()
	return nil
}

// fetch starts reading the unit at off.
func (r *reader) fetch(off int64) *chunk {
	c := &chunk{off: off, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		buf := make([]byte, min(r.unit, r.length-off))
		for got := int64(0); got < int64(len(buf)); {
			at := off + got
			obj, in := at/r.objSize, at%r.objSize
			want := min(int64(len(buf))-got, r.objSize-in)
			name := objectName(r.fid, obj)
			n, err := r.io.Read(name, buf[got:got+want], uint64(in))
			if err == nil && n == 0 {
				err = fmt.Errorf("object ends at %d, stripe is %d bytes", at, r.length)
			}
			if err != nil {
				c.err = r.s.fail("read", name, err)
				return
			}
			got += int64(n)
		}
		c.data = buf
	}()
	return c
}

// chunkAt returns the unit holding off, reading it if needed, and reads
// the following unit ahead.
func (r *reader) chunkAt(off int64) (*chunk, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, kerr.New(kerr.Invalid, "read", r.s.where+"/"+headName(r.fid), "reader closed")
	}
	start := off - off%r.unit
	switch {
	case r.cur != nil && r.cur.off == start:
	case r.next != nil && r.next.off == start:
		r.cur, r.next = r.next, nil
	default:
		r.cur, r.next = r.fetch(start), nil
	}
	if r.next == nil && start+r.unit < r.length {
		r.next = r.fetch(start + r.unit)
	}
	return r.cur, nil
}

func (r *reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, kerr.New(kerr.Invalid, "read", r.s.where+"/"+headName(r.fid), "negative offset")
	}
	n := 0
	for n < len(p) && off+int64(n) < r.length {
		at := off + int64(n)
		c, err := r.chunkAt(at)
		if err != nil {
			return n, err
		}
		<-c.done
		if c.err != nil {
			r.mu.Lock()
			if r.cur == c {
				r.cur = nil // not cached: the next read tries again
			}
			r.mu.Unlock()
			return n, c.err
		}
		n += copy(p[n:], c.data[at-c.off:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (s *Store) ReadMeta(fid uint64) (backend.Meta, error) {
	_, m, _, _, err := s.head("read metadata", fid)
	return m, err
}

func (s *Store) Remove(fid uint64) error {
	ioctx, err := s.io()
	if err != nil {
		return err
	}
	head := headName(fid)
	xa, err := ioctx.ListXattrs(head)
	if err != nil {
		return s.fail("remove", head, err)
	}
	_, length, objSize, err := decodeMeta(xa)
	if err == nil {
		for n := (length - 1) / objSize; n >= 1; n-- {
			if err := ioctx.Delete(objectName(fid, n)); err != nil && !errors.Is(err, rados.ErrNotFound) {
				return s.fail("remove", objectName(fid, n), err)
			}
		}
	} else {
		// Being written or damaged: its objects run until the first gap.
		for n := int64(1); ; n++ {
			if err := ioctx.Delete(objectName(fid, n)); err != nil {
				break
			}
		}
	}
	if err := ioctx.Delete(head); err != nil {
		return s.fail("remove", head, err)
	}
	s.files.Add(-1)
	return nil
}

func (s *Store) Walk(fn func(fid uint64, m backend.Meta, err error) error) error {
	return s.walk(func(fid uint64) error {
		m, err := s.ReadMeta(fid)
		if kerr.Is(err, kerr.NotFound) {
			return nil // removed meanwhile
		}
		return fn(fid, m, err)
	})
}

// walk calls fn with the fid of every head in the namespace.
func (s *Store) walk(fn func(fid uint64) error) error {
	ioctx, err := s.io()
	if err != nil {
		return err
	}
	it, err := ioctx.Iter()
	if err != nil {
		return s.fail("walk", "", err)
	}
	defer it.Close()
	for it.Next() {
		if fid, ok := parseHead(it.Value()); ok {
			if err := fn(fid); err != nil {
				return err
			}
		}
	}
	if err := it.Err(); err != nil {
		return s.fail("walk", "", err)
	}
	return nil
}

// Usage is the pool's: stored bytes against what it can still take (its
// quota, if it has one), as `ceph df` says; a full pool is an error.
func (s *Store) Usage() (backend.Usage, error) {
	var u backend.Usage
	if _, err := s.io(); err != nil {
		return u, err
	}
	st, err := s.cl.pool(s.place.Pool)
	if err != nil {
		return u, kerr.New(kerr.Unavailable, "usage", s.where, err.Error())
	}
	u.Capacity, u.Used = st.Stored+st.MaxAvail, st.Stored
	if st.QuotaBytes > 0 {
		u.Capacity = min(u.Capacity, st.QuotaBytes)
	}
	s.count()
	u.Files = s.files.Load()
	switch {
	case st.QuotaBytes > 0 && st.Stored >= st.QuotaBytes:
		return u, kerr.New(kerr.NoSpace, "usage", s.where, fmt.Sprintf("full: pool %s holds %d bytes, its quota is %d", s.place.Pool, st.Stored, st.QuotaBytes))
	case st.MaxAvail == 0:
		return u, kerr.New(kerr.NoSpace, "usage", s.where, fmt.Sprintf("full: pool %s has no space left", s.place.Pool))
	}
	return u, nil
}

// count counts the stripes once (and again after an identity check
// failed); writes and removals keep the figure in between.
func (s *Store) count() {
	s.countMu.Lock()
	defer s.countMu.Unlock()
	if s.counted.Load() {
		return
	}
	var n int64
	if s.walk(func(uint64) error { n++; return nil }) == nil {
		s.files.Store(n)
		s.counted.Store(true)
	}
}

func (s *Store) Identity() (backend.Identity, error) {
	ioctx, err := s.io()
	if err != nil {
		return backend.Identity{}, err
	}
	b := make([]byte, 256)
	n, err := ioctx.Read(markerObject, b, 0)
	switch {
	case errors.Is(err, rados.ErrNotFound):
		return backend.Identity{}, kerr.New(kerr.NotFound, "identity", s.where, "identity marker "+markerObject+" missing")
	case err != nil:
		return backend.Identity{}, s.fail("identity", markerObject, err)
	}
	id, err := decodeMarker(b[:n])
	if err != nil {
		return id, kerr.New(kerr.IO, "identity", s.where, err.Error())
	}
	return id, nil
}

func (s *Store) Initialize(id backend.Identity) error {
	ioctx, err := s.io()
	if err != nil {
		return err
	}
	var found string
	err = s.walkAll(ioctx, func(name string) bool { found = name; return false })
	if err != nil {
		return err
	}
	if found != "" {
		return kerr.New(kerr.NotEmpty, "initialize", s.where,
			fmt.Sprintf("namespace not empty (%s); refusing to initialize over existing data", found))
	}
	if err := ioctx.WriteFull(markerObject, encodeMarker(id)); err != nil {
		return s.fail("initialize", markerObject, err)
	}
	s.mu.Lock()
	s.want, s.offline = id, ""
	s.mu.Unlock()
	s.files.Store(0)
	s.counted.Store(true)
	return nil
}

// walkAll calls fn with every object name in the namespace until fn
// returns false.
func (s *Store) walkAll(ioctx *rados.IOContext, fn func(string) bool) error {
	it, err := ioctx.Iter()
	if err != nil {
		return s.fail("list", "", err)
	}
	defer it.Close()
	for it.Next() {
		if !fn(it.Value()) {
			return nil
		}
	}
	if err := it.Err(); err != nil {
		return s.fail("list", "", err)
	}
	return nil
}

func (s *Store) CheckIdentity(want backend.Identity) string {
	why := s.check(want)
	s.mu.Lock()
	s.want, s.offline = want, why
	s.mu.Unlock()
	if why != "" {
		s.counted.Store(false)
	}
	return why
}

func (s *Store) check(want backend.Identity) string {
	id, err := s.Identity()
	switch {
	case kerr.Is(err, kerr.NotFound):
		return "identity marker " + markerObject + " missing"
	case err != nil:
		var ke *kerr.Error
		if errors.As(err, &ke) && ke.Msg != "" {
			return ke.Msg
		}
		return err.Error()
	case id.FsID != want.FsID:
		return fmt.Sprintf("identity marker names fs %d, not fs %d", id.FsID, want.FsID)
	case id.UUID == "" && want.UUID != "":
		ioctx, err := s.io()
		if err == nil {
			err = ioctx.WriteFull(markerObject, encodeMarker(want))
		}
		if err != nil {
			return "cannot upgrade identity marker: " + err.Error()
		}
	case want.UUID != "" && id.UUID != want.UUID:
		return fmt.Sprintf("identity marker is of another instance's fs %d (uuid %s, expected %s)", id.FsID, id.UUID, want.UUID)
	}
	return ""
}

// Configure takes the object size new stripes are cut into. The write
// mode does not apply to RADOS, nor does a CephFS data pool (a space's
// cephfs.pool): both are accepted and ignored.
func (s *Store) Configure(set backend.Settings) error {
	switch set.IO {
	case "", backend.IOAuto, backend.IODirect, backend.IOBuffered:
	default:
		return kerr.New(kerr.Invalid, "configure", s.where, "io="+set.IO+": want auto, direct or buffered")
	}
	switch {
	case set.ObjectSize == 0:
		s.objSize.Store(DefaultObjectSize)
	case set.ObjectSize < 4096 || set.ObjectSize > 1<<30:
		return kerr.New(kerr.Invalid, "configure", s.where, fmt.Sprintf("object size %d: want 4 KiB to 1 GiB", set.ObjectSize))
	default:
		s.objSize.Store(set.ObjectSize)
	}
	return nil
}

func (s *Store) Info() backend.Info {
	in := backend.Info{Kind: backend.KindRados, FsType: fmt.Sprintf("rados pool %s (objects of %d MiB)", s.place.Pool, s.objSize.Load()>>20)}
	if _, err := s.cl.connect(); err != nil {
		in.Health = "cannot reach the cluster: " + err.Error()
		return in
	}
	s.cl.mu.Lock()
	in.Backend = "rados:" + s.cl.fsid + "/" + s.place.Pool
	s.cl.mu.Unlock()
	in.Health = s.cl.healthText()
	return in
}

// Package memstore is a backend.Store in memory, for unit tests of the
// storage core (as memkv is for the namespace). It passes the same suite
// as the real backends.
package memstore

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Capacity is the capacity every Store reports.
const Capacity = 1 << 40

// Store is an in-memory filesystem.
type Store struct {
	name string

	mu       sync.Mutex
	stripes  map[uint64]*stripe
	marker   *backend.Identity
	litter   bool   // holds something that is not a stripe
	offline  string // why Create is refused
	journals map[uint64]*journal
}

type stripe struct {
	data    []byte        // never changed in place (Rewrite replaces it)
	meta    *backend.Meta // nil while being written
	sums    []uint32      // block sums; nil: none (framed, or made by Legacy)
	bs      int           // their block size
	damaged string
}

var _ backend.Store = (*Store)(nil)

// New returns an empty, uninitialized store; name appears in errors.
func New(name string) *Store {
	return &Store{name: name, stripes: map[uint64]*stripe{}, offline: "identity not checked yet"}
}

func (s *Store) where(fid uint64) string { return fmt.Sprintf("mem:%s/%08x", s.name, fid) }

// SetMarker replaces the identity marker (nil removes it), as a disk
// swapped under a mountpoint would.
func (s *Store) SetMarker(id *backend.Identity) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == nil {
		s.marker = nil
		return
	}
	c := *id
	s.marker = &c
}

// Litter puts something that is not a stripe in the store, as foreign
// files in a directory; Initialize then refuses it.
func (s *Store) Litter() {
	s.mu.Lock()
	s.litter = true
	s.mu.Unlock()
}

func (s *Store) Create(fid uint64, o backend.CreateOptions) (backend.Writer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.offline != "" {
		return nil, kerr.New(kerr.Unavailable, "create", "mem:"+s.name, "filesystem is offline: "+s.offline)
	}
	if _, ok := s.stripes[fid]; ok {
		return nil, kerr.New(kerr.Exists, "create", s.where(fid), "stripe exists")
	}
	st := &stripe{}
	s.stripes[fid] = st
	return &writer{s: s, fid: fid, st: st, framed: o.Framed}, nil
}

func (s *Store) WriteMemory(backend.CreateOptions) int64 { return 0 }

type writer struct {
	s      *Store
	fid    uint64
	st     *stripe
	framed bool
	buf    bytes.Buffer
	end    bool // finished or aborted
	ok     bool // finished
}

func (w *writer) Write(p []byte) (int, error) {
	if w.end {
		return 0, kerr.New(kerr.Invalid, "write", w.s.where(w.fid), "stripe closed")
	}
	return w.buf.Write(p)
}

func (w *writer) Finish(m backend.Meta) error {
	if w.end {
		return kerr.New(kerr.Invalid, "finish", w.s.where(w.fid), "stripe closed")
	}
	w.end, w.ok = true, true
	m.Fid = w.fid
	m.Checksums = maps.Clone(m.Checksums)
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.st.data, w.st.meta = w.buf.Bytes(), &m
	if !w.framed {
		w.st.sums, w.st.bs = sumsOf(w.st.data), BlockSize
	}
	return nil
}

func sumsOf(data []byte) []uint32 {
	sums := checksum.NewBlockSummer(BlockSize)
	sums.Write(data)
	return sums.Sums()
}

// BlockSize is the block size of a memstore's sums: small, so that unit
// tests of a few KiB have several blocks.
const BlockSize = 4 << 10

func (w *writer) Abort() {
	if w.ok {
		return
	}
	w.end = true
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.s.stripes[w.fid] == w.st {
		delete(w.s.stripes, w.fid)
	}
}

func (s *Store) get(op string, fid uint64) (*stripe, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stripes[fid]
	if st == nil {
		return nil, kerr.New(kerr.NotFound, op, s.where(fid), "no such stripe")
	}
	if st.meta == nil {
		return nil, kerr.New(kerr.IO, op, s.where(fid), "stripe is being written")
	}
	return st, nil
}

func (s *Store) Open(fid uint64) (backend.Reader, error) {
	st, err := s.get("open", fid)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &reader{data: st.data, damaged: st.damaged, where: s.where(fid)}
	if st.sums != nil {
		sums := st.sums
		r.br = &checksum.BlockReader{R: bytes.NewReader(st.data), Len: int64(len(st.data)), Size: st.bs,
			Sums: table(sums)}
	}
	return r, nil
}

// reader reads the stripe as it was when opened.
type reader struct {
	data    []byte
	br      *checksum.BlockReader // nil: no sums
	damaged string
	where   string
}

func (r *reader) ReadAt(p []byte, off int64) (int, error) {
	if r.br == nil {
		return bytes.NewReader(r.data).ReadAt(p, off)
	}
	n, err := r.br.ReadAt(p, off)
	if err != nil && err != io.EOF {
		err = kerr.Wrap(kerr.IO, "read", r.where, err)
	}
	return n, err
}

func (r *reader) Size() int64     { return int64(len(r.data)) }
func (r *reader) Close() error    { return nil }
func (r *reader) BlockSums() bool { return r.br != nil }
func (r *reader) Damaged() string { return r.damaged }

// Corrupt flips the bits of the byte at off of the stripe of fid behind
// the store's back, as rot on a disk does.
func (s *Store) Corrupt(fid uint64, off int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stripes[fid]
	st.data = bytes.Clone(st.data)
	st.data[off] ^= 0xff
}

// Legacy drops the block sums of the stripe of fid, as if it had been
// written before stores kept them.
func (s *Store) Legacy(fid uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stripes[fid].sums = nil
}

func (s *Store) Rewrite(fid uint64, off int64, p []byte) error {
	st, err := s.get("rewrite", fid)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	end := off + int64(len(p))
	if off < 0 || end > int64(len(st.data)) {
		return kerr.New(kerr.Invalid, "rewrite", s.where(fid), fmt.Sprintf("bytes %d-%d are outside the stripe's %d", off, end-1, len(st.data)))
	}
	if st.sums != nil {
		sums := st.sums
		first, news, err := checksum.RewriteSums(st.bs, int64(len(st.data)), off, p,
			func(b []byte, at int64) error { copy(b, st.data[at:]); return nil },
			table(sums))
		if err != nil {
			return kerr.Wrap(kerr.IO, "rewrite", s.where(fid), err)
		}
		st.sums = slices.Clone(sums)
		copy(st.sums[first:], news)
	}
	st.data = bytes.Clone(st.data)
	copy(st.data[off:], p)
	st.damaged = ""
	return nil
}

func (s *Store) AddBlockSums(fid uint64, bs int, sums []uint32, length int64) error {
	st, err := s.get("add block sums", fid)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case st.sums != nil:
		return nil
	case int64(len(st.data)) != length || int64(len(sums)) != checksum.Blocks(length, bs):
		return kerr.New(kerr.Invalid, "add block sums", s.where(fid), fmt.Sprintf("%d sums for %d bytes; the stripe holds %d", len(sums), length, len(st.data)))
	}
	st.sums, st.bs = slices.Clone(sums), bs
	return nil
}

func (s *Store) MarkDamaged(fid uint64, why string) error {
	st, err := s.get("mark damaged", fid)
	if err != nil {
		return err
	}
	s.mu.Lock()
	st.damaged = why
	s.mu.Unlock()
	return nil
}

func (s *Store) ReadMeta(fid uint64) (backend.Meta, error) {
	st, err := s.get("read metadata", fid)
	if err != nil {
		return backend.Meta{}, err
	}
	s.mu.Lock() // Apply replaces it
	m := *st.meta
	s.mu.Unlock()
	m.Checksums = maps.Clone(m.Checksums)
	return m, nil
}

func (s *Store) Remove(fid uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.stripes[fid]; !ok {
		return kerr.New(kerr.NotFound, "remove", s.where(fid), "no such stripe")
	}
	delete(s.stripes, fid)
	return nil
}

func (s *Store) Walk(fn func(fid uint64, m backend.Meta, err error) error) error {
	s.mu.Lock()
	fids := make([]uint64, 0, len(s.stripes))
	for fid := range s.stripes {
		fids = append(fids, fid)
	}
	s.mu.Unlock()
	for _, fid := range fids {
		m, err := s.ReadMeta(fid)
		if kerr.Is(err, kerr.NotFound) {
			continue // removed meanwhile
		}
		if err := fn(fid, m, err); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) Usage() (backend.Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := backend.Usage{Capacity: Capacity, Files: int64(len(s.stripes))}
	for _, st := range s.stripes {
		u.Used += uint64(len(st.data))
	}
	return u, nil
}

// Configure accepts every valid setting; nothing changes in memory.
func (s *Store) Configure(set backend.Settings) error {
	switch set.IO {
	case "", backend.IOAuto, backend.IODirect, backend.IOBuffered:
		return nil
	}
	return kerr.New(kerr.Invalid, "configure", "mem:"+s.name, "io="+set.IO+": want auto, direct or buffered")
}

// Info describes the store: every memstore is its own backend.
func (s *Store) Info() backend.Info {
	return backend.Info{Kind: "memory", Backend: "mem:" + s.name, FsType: "memory"}
}

func (s *Store) Identity() (backend.Identity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.marker == nil {
		return backend.Identity{}, kerr.New(kerr.NotFound, "identity", "mem:"+s.name, "identity marker missing")
	}
	return *s.marker, nil
}

func (s *Store) Initialize(id backend.Identity) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.marker != nil || s.litter || len(s.stripes) > 0 {
		return kerr.New(kerr.NotEmpty, "initialize", "mem:"+s.name, "not empty; refusing to initialize over existing data")
	}
	s.marker, s.offline = &id, ""
	return nil
}

func (s *Store) CheckIdentity(want backend.Identity) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.marker
	switch {
	case m == nil:
		s.offline = "identity marker missing"
	case m.FsID != want.FsID:
		s.offline = fmt.Sprintf("identity marker names fs %d, not fs %d", m.FsID, want.FsID)
	case m.UUID == "" && want.UUID != "":
		m.UUID, s.offline = want.UUID, ""
	case want.UUID != "" && m.UUID != want.UUID:
		s.offline = fmt.Sprintf("identity marker is of another instance's fs %d (uuid %s, expected %s)", m.FsID, m.UUID, want.UUID)
	default:
		s.offline = ""
	}
	return s.offline
}

var _ backend.Updater = (*Store)(nil)

// journal is a prepared update held beside a stripe.
type journal struct {
	head backend.JournalHead
	ops  []byte
}

func (s *Store) Prepare(fid uint64, h backend.JournalHead, ops io.Reader) error {
	if _, err := s.get("prepare update", fid); err != nil {
		return err
	}
	b, err := io.ReadAll(ops)
	if err != nil {
		return kerr.Wrap(kerr.IO, "prepare update", s.where(fid), err)
	}
	h.Meta.Checksums = maps.Clone(h.Meta.Checksums)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journals == nil {
		s.journals = map[uint64]*journal{}
	}
	s.journals[fid] = &journal{head: h, ops: b}
	return nil
}

func (s *Store) Prepared(fid uint64) (backend.JournalHead, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.journals[fid]
	if j == nil {
		return backend.JournalHead{}, kerr.New(kerr.NotFound, "update", s.where(fid), "no prepared update")
	}
	return j.head, nil
}

func (s *Store) Apply(fid uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, st := s.journals[fid], s.stripes[fid]
	if j == nil {
		return kerr.New(kerr.NotFound, "update", s.where(fid), "no prepared update")
	}
	delete(s.journals, fid)
	if st == nil || st.meta == nil {
		return kerr.New(kerr.NotFound, "update", s.where(fid), "no such stripe")
	}
	switch st.meta.Version {
	case j.head.Meta.Version:
		return nil
	case j.head.From:
	default:
		return kerr.New(kerr.IO, "update", s.where(fid), fmt.Sprintf("stripe is at data version %d, the update is from %d (stale stripe)", st.meta.Version, j.head.From))
	}
	// With block sums: the touched blocks verified first, summed again
	// after (backend/journal.go); the stripe is changed all at once.
	var touched *backend.Touched
	if st.sums != nil {
		var err error
		touched, err = backend.TouchedBlocks(bytes.NewReader(j.ops), int64(len(j.ops)), int64(len(st.data)), st.bs)
		if err == nil {
			err = touched.Verify(readFrom(st.data), table(st.sums))
		}
		if err != nil {
			return kerr.Wrap(kerr.IO, "update", s.where(fid), err)
		}
	}
	t := &backend.Buffer{B: bytes.Clone(st.data)} // readers hold the old slice
	if err := backend.ReplayOps(bytes.NewReader(j.ops), t); err != nil {
		return kerr.Wrap(kerr.IO, "update", s.where(fid), err)
	}
	if touched != nil {
		sums, err := touched.Sums(table(st.sums), readFrom(t.B))
		if err != nil {
			return kerr.Wrap(kerr.IO, "update", s.where(fid), err)
		}
		st.sums = sums
	}
	m := j.head.Meta
	m.Fid = fid
	st.data, st.meta = t.B, &m
	return nil
}

// readFrom reads data as a stripe's bytes.
func readFrom(data []byte) func(p []byte, off int64) error {
	return func(p []byte, off int64) error {
		if copy(p, data[min(off, int64(len(data))):]) < len(p) {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
}

// table is the SumsFunc of sums.
func table(sums []uint32) checksum.SumsFunc {
	return func(first, n int64) ([]uint32, error) { return sums[first : first+n], nil }
}

func (s *Store) Discard(fid uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.journals, fid)
	return nil
}

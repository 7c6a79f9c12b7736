package posix

import (
	"bytes"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// journalStore is a store holding stripe 5 of old's bytes, with block sums.
func journalStore(t *testing.T, old []byte) *Store {
	t.Helper()
	s := New(t.TempDir()+"/fs", Options{IO: backend.IOBuffered, Sync: true})
	if err := s.Initialize(backend.Identity{FsID: 1, UUID: "journal-test"}); err != nil {
		t.Fatal(err)
	}
	w, err := s.Create(5, backend.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(old); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(backend.Meta{Fid: 5, Layout: "replica:2", Size: int64(len(old)), Path: "/j"}); err != nil {
		t.Fatal(err)
	}
	return s
}

// spooled writes ops to a spool file as an update session does.
func spooled(t *testing.T, ops []byte, crc uint32) *backend.SpooledOps {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "spool")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(ops); err != nil {
		t.Fatal(err)
	}
	return &backend.SpooledOps{F: f, N: int64(len(ops)), CRC: crc}
}

func readStripe(t *testing.T, s *Store, n int) []byte {
	t.Helper()
	r, err := s.Open(5)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b := make([]byte, n)
	if _, err := r.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if r.Size() != int64(n) {
		t.Fatalf("stripe is %d bytes, want %d", r.Size(), n)
	}
	return b
}

// TestSpooledJournal: a journal prepared from a spool (copied in the
// kernel, its sum carried over) is byte for byte the one prepared from a
// stream, applies to the same content, and one whose carried sum is
// wrong is refused as damaged with the stripe left as it was.
func TestSpooledJournal(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	old := make([]byte, 300<<10)
	for i := range old {
		old[i] = byte(r.Uint32())
	}
	var ops []byte
	want := bytes.Clone(old)
	for i := range 50 {
		p := make([]byte, 1+r.IntN(9000))
		for j := range p {
			p[j] = byte(i + j)
		}
		off := r.Int64N(int64(len(want)) + 4096)
		ops = backend.EncodeWrite(ops, off, p)
		if end := off + int64(len(p)); end > int64(len(want)) {
			want = append(want, make([]byte, end-int64(len(want)))...)
		}
		copy(want[off:], p)
	}
	h := backend.JournalHead{From: 0, Meta: backend.Meta{Fid: 5, Layout: "replica:2", Size: int64(len(want)), Path: "/j", Version: 1}}
	crc := crc32.Checksum(ops, castagnoli)

	a, b := journalStore(t, old), journalStore(t, old)
	if err := a.Prepare(5, h, bytes.NewReader(ops)); err != nil {
		t.Fatal(err)
	}
	if err := b.Prepare(5, h, spooled(t, ops, crc)); err != nil {
		t.Fatal(err)
	}
	ja, _ := os.ReadFile(journalPath(a.root, 5))
	jb, _ := os.ReadFile(journalPath(b.root, 5))
	if len(ja) == 0 || !bytes.Equal(ja, jb) {
		t.Fatalf("journals differ: streamed %d bytes, spooled %d bytes", len(ja), len(jb))
	}
	if err := b.Apply(5); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readStripe(t, b, len(want)), want) {
		t.Fatal("the spooled journal applied to other bytes than the update wrote")
	}

	c := journalStore(t, old)
	if err := c.Prepare(5, h, spooled(t, ops, crc^1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(5); !kerr.Is(err, kerr.IO) {
		t.Fatalf("Apply of a journal whose spool sum is wrong: %v, want kerr.IO (damaged)", err)
	}
	if !bytes.Equal(readStripe(t, c, len(old)), old) {
		t.Fatal("a refused journal changed the stripe")
	}
}

// TestJournalBackAfterApply: the journal Apply drops is not synced away,
// so a crash right after an apply can bring it back; it takes the stripe
// to the version it has, and is dropped again, not applied. (A later
// Prepare's directory sync makes its removal durable.)
func TestJournalBackAfterApply(t *testing.T) {
	old := bytes.Repeat([]byte("o"), 100<<10)
	s := journalStore(t, old)
	h := backend.JournalHead{From: 0, Meta: backend.Meta{Fid: 5, Layout: "replica:2", Size: int64(len(old)), Path: "/j", Version: 1}}
	if err := s.Prepare(5, h, bytes.NewReader(backend.EncodeWrite(nil, 10, []byte("first")))); err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(journalPath(s.root, 5))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(5); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(old)
	copy(want[10:], "first")
	// The crash: the journal's removal was lost.
	if err := os.WriteFile(journalPath(s.root, 5), saved, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(5); err != nil {
		t.Fatalf("Apply of a journal the stripe already took: %v", err)
	}
	if _, err := s.Prepared(5); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("the journal stayed: %v", err)
	}
	if !bytes.Equal(readStripe(t, s, len(want)), want) {
		t.Fatal("a journal that came back changed the stripe")
	}
	if m, err := s.ReadMeta(5); err != nil || m.Version != 1 {
		t.Fatalf("metadata: %+v %v, want version 1", m, err)
	}
}

// TestCopyRange: the in-kernel copy and its fallback through user space
// (taken when the kernel refuses, e.g. a spool on another filesystem)
// copy the same bytes to the same place.
func TestCopyRange(t *testing.T) {
	src := make([]byte, 3<<20+17)
	for i := range src {
		src[i] = byte(i * 7)
	}
	dir := t.TempDir()
	sf, err := os.Create(dir + "/src")
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	if _, err := sf.Write(src); err != nil {
		t.Fatal(err)
	}
	for name, cp := range map[string]func(*os.File, int64, *os.File, int64, int64) error{"kernel": copyRange, "user": copyRangeSlow} {
		df, err := os.Create(dir + "/dst-" + name)
		if err != nil {
			t.Fatal(err)
		}
		if err := cp(df, 100, sf, 5, int64(len(src))-10); err != nil {
			t.Fatalf("%s copy: %v", name, err)
		}
		df.Close()
		got, _ := os.ReadFile(dir + "/dst-" + name)
		if want := append(make([]byte, 100), src[5:len(src)-5]...); !bytes.Equal(got, want) {
			t.Fatalf("%s copy: %d bytes, not the %d copied", name, len(got), len(want))
		}
	}
	if err := copyRange(sf, 0, sf, int64(len(src)), 10); err == nil {
		t.Fatal("a copy from past the end of the source succeeded")
	}
}

// TestJournalCheckedAfterRestart: a streamed journal this Store wrote
// applies without being read back for its checksum (Apply follows its
// Prepare), but one found on disk by another Store of the same root (the
// server restarted) is checked, and refused when a byte changed.
func TestJournalCheckedAfterRestart(t *testing.T) {
	old := bytes.Repeat([]byte("o"), 200<<10)
	ops := backend.EncodeWrite(nil, 70_000, bytes.Repeat([]byte("n"), 5000))
	h := backend.JournalHead{From: 0, Meta: backend.Meta{Fid: 5, Layout: "replica:2", Size: int64(len(old)), Path: "/j", Version: 1}}
	a := journalStore(t, old)
	if err := a.Prepare(5, h, bytes.NewReader(ops)); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.prepared.Load(uint64(5)); !ok {
		t.Fatal("a streamed journal the store wrote is not known to it")
	}
	f, err := os.OpenFile(journalPath(a.root, 5), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("X"), 72_000-70_000+13); err != nil {
		t.Fatal(err)
	}
	f.Close()
	restarted := New(a.root, a.opts)
	if err := restarted.Apply(5); !kerr.Is(err, kerr.IO) {
		t.Fatalf("Apply after a restart of a journal damaged on disk: %v, want kerr.IO (damaged)", err)
	}
	if !bytes.Equal(readStripe(t, restarted, len(old)), old) {
		t.Fatal("a refused journal changed the stripe")
	}
	if err := a.Prepare(5, h, bytes.NewReader(ops)); err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(5); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.prepared.Load(uint64(5)); ok {
		t.Fatal("an applied journal is still known")
	}
	want := bytes.Clone(old)
	copy(want[70_000:], bytes.Repeat([]byte("n"), 5000))
	if !bytes.Equal(readStripe(t, a, len(want)), want) {
		t.Fatal("the journal applied to other bytes than the update wrote")
	}
}

// Package backendtest is the shared suite every backend.Store must pass
// (as kvtest is for kv engines).
package backendtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Hooks reach behind a store, where the suite cannot go through the
// interface.
type Hooks struct {
	// Open returns a fresh, uninitialized store in an empty place.
	Open func(t *testing.T) backend.Store
	// Litter puts something that is not a stripe where the store lives (a
	// file in its directory), before Initialize.
	Litter func(t *testing.T, s backend.Store)
	// LoseMarker removes the identity marker, as a mount that went away
	// leaves a bare mountpoint.
	LoseMarker func(t *testing.T, s backend.Store)
	// Corrupt flips the byte at data offset off of the stripe of fid
	// behind the store's back, as rot on a disk does; nil for a store
	// whose blocks the suite cannot reach (RADOS: BlueStore's).
	Corrupt func(t *testing.T, s backend.Store, fid uint64, off int64)
	// Legacy makes the stripe of fid what a store wrote before block
	// sums existed; nil for a store that keeps none of its own.
	Legacy func(t *testing.T, s backend.Store, fid uint64)
	// CrashApply runs Updater.Apply of fid and stops it at step, leaving
	// the stripe as a crash of the process there would (what it wrote is
	// in place, nothing after); ApplySteps are the steps, in order. Nil
	// for a store whose Apply changes a stripe all at once (memstore).
	CrashApply func(t *testing.T, s backend.Store, fid uint64, step string)
	ApplySteps []string
}

// Sizes are the stripe sizes every store must write and read back
// byte-exact (around the 4 KiB alignment of direct I/O and past 1 MiB).
var Sizes = []int{0, 1, 4095, 4096, 4097, 1<<20 + 17}

var id = backend.Identity{FsID: 3, UUID: "instance-a"}

// initialized opens a store and initializes it as fs 3.
func initialized(t *testing.T, h Hooks) backend.Store {
	t.Helper()
	s := h.Open(t)
	if err := s.Initialize(id); err != nil {
		t.Fatalf("Initialize on an empty place: %v", err)
	}
	return s
}

func meta(fid uint64, size int) backend.Meta {
	return backend.Meta{Fid: fid, Stripe: int(fid % 7), Layout: "ec:4+2:65536", Size: int64(size) * 4,
		Checksums: map[string]string{"adler32": fmt.Sprintf("%08x", fid), "md5": "d41d8cd98f00b204e9800998ecf8427e"},
		Path:      fmt.Sprintf("/dir with space/f,=;%d", fid)}
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// put writes a finished stripe in uneven chunks.
func put(t *testing.T, s backend.Store, fid uint64, data []byte, overlap bool) {
	t.Helper()
	w, err := s.Create(fid, backend.CreateOptions{Overlap: overlap})
	if err != nil {
		t.Fatalf("Create %d: %v", fid, err)
	}
	for rest, i := data, 0; len(rest) > 0; i++ {
		n := min(len(rest), 1+(i*4093)%(300<<10))
		if m, err := w.Write(rest[:n]); err != nil || m != n {
			t.Fatalf("Write %d: %d %v", fid, m, err)
		}
		rest = rest[n:]
	}
	m := meta(fid, len(data))
	m.Fid = fid + 1 // the stripe's own fid wins
	if err := w.Finish(m); err != nil {
		t.Fatalf("Finish %d: %v", fid, err)
	}
}

func mustRead(t *testing.T, s backend.Store, fid uint64, want []byte) {
	t.Helper()
	r, err := s.Open(fid)
	if err != nil {
		t.Fatalf("Open %d: %v", fid, err)
	}
	defer r.Close()
	if r.Size() != int64(len(want)) {
		t.Fatalf("stripe %d: Size %d, wrote %d", fid, r.Size(), len(want))
	}
	got := make([]byte, len(want))
	if n, err := r.ReadAt(got, 0); n != len(want) || (err != nil && err != io.EOF) || !bytes.Equal(got, want) {
		t.Fatalf("stripe %d: read back %d of %d bytes, equal %v, err %v", fid, n, len(want), bytes.Equal(got, want), err)
	}
	if len(want) > 2 {
		mid := make([]byte, 2)
		if n, err := r.ReadAt(mid, int64(len(want)-2)); n != 2 || (err != nil && err != io.EOF) || !bytes.Equal(mid, want[len(want)-2:]) {
			t.Fatalf("stripe %d: ReadAt of the last 2 bytes: %d %v", fid, n, err)
		}
		if n, err := r.ReadAt(make([]byte, 4), int64(len(want)-2)); n != 2 || err != io.EOF {
			t.Fatalf("stripe %d: ReadAt past the end: %d %v, want 2 io.EOF", fid, n, err)
		}
	}
}

func wantKind(t *testing.T, what string, err error, k kerr.Kind) {
	t.Helper()
	if !kerr.Is(err, k) {
		t.Fatalf("%s: %v, want %s", what, err, k)
	}
	var ke *kerr.Error
	if errors.As(err, &ke) && ke.Path == "" {
		t.Fatalf("%s: error names no filesystem or stripe: %v", what, err)
	}
}

func listing(t *testing.T, s backend.Store) map[uint64]backend.Meta {
	t.Helper()
	out := map[uint64]backend.Meta{}
	err := s.Walk(func(fid uint64, m backend.Meta, err error) error {
		if _, dup := out[fid]; dup {
			t.Errorf("Walk lists stripe %d twice", fid)
		}
		if err != nil {
			m.Fid = 0 // marks "listed without metadata"
		}
		out[fid] = m
		return nil
	})
	if err != nil {
		t.Fatalf("Walk: %v", err)
	}
	return out
}

func sameMeta(a, b backend.Meta) bool {
	return a.Fid == b.Fid && a.Stripe == b.Stripe && a.Layout == b.Layout && a.Size == b.Size &&
		a.Path == b.Path && maps.Equal(a.Checksums, b.Checksums)
}

// readAll reads the whole stripe of fid in one ReadAt.
func readAll(t *testing.T, s backend.Store, fid uint64) ([]byte, error) {
	t.Helper()
	r, err := s.Open(fid)
	if err != nil {
		t.Fatalf("Open %d: %v", fid, err)
	}
	defer r.Close()
	p := make([]byte, r.Size())
	n, err := r.ReadAt(p, 0)
	if err == io.EOF && n == len(p) {
		err = nil
	}
	return p[:n], err
}

// wantBadBlock checks that reading the stripe of fid stops at the block
// holding byte at, with kerr.IO naming the stripe, after returning
// exactly the good bytes before it; it returns the block.
func wantBadBlock(t *testing.T, s backend.Store, fid uint64, data []byte, at int64) *checksum.BlockError {
	t.Helper()
	got, err := readAll(t, s, fid)
	be, ok := checksum.AsBlockError(err)
	if !ok || be.Off > at || be.Off+be.Len <= at {
		t.Fatalf("read of stripe %d with byte %d rotten: %v, want a *checksum.BlockError for its block", fid, at, err)
	}
	wantKind(t, "read of a rotten block", err, kerr.IO)
	if int64(len(got)) != be.Off || !bytes.Equal(got, data[:be.Off]) {
		t.Fatalf("read of stripe %d returned %d bytes (equal to the data: %v), want the %d before the rotten block",
			fid, len(got), bytes.Equal(got, data[:len(got)]), be.Off)
	}
	return be
}

// Run runs the suite.
func Run(t *testing.T, h Hooks) {
	t.Run("Journal", func(t *testing.T) { runJournal(t, h) })
	t.Run("WriteReadBack", func(t *testing.T) {
		s := initialized(t, h)
		for i, size := range Sizes {
			fid := uint64(100 + i)
			data := randBytes(fid, size)
			put(t, s, fid, data, i%2 == 0)
			mustRead(t, s, fid, data)
		}
	})
	t.Run("MetadataRoundTrip", func(t *testing.T) {
		s := initialized(t, h)
		for _, fid := range []uint64{1, 9999, 10000, 1<<40 + 5} {
			put(t, s, fid, []byte("x"), false)
			m, err := s.ReadMeta(fid)
			if want := meta(fid, 1); err != nil || !sameMeta(m, want) {
				t.Fatalf("ReadMeta %d = %+v, %v; want %+v", fid, m, err, want)
			}
		}
		_, err := s.ReadMeta(77)
		wantKind(t, "ReadMeta of a missing stripe", err, kerr.NotFound)
	})
	t.Run("CreateNeverOverwrites", func(t *testing.T) {
		s := initialized(t, h)
		data := randBytes(1, 5000)
		put(t, s, 42, data, true)
		_, err := s.Create(42, backend.CreateOptions{Overlap: true})
		wantKind(t, "Create over a finished stripe", err, kerr.Exists)
		mustRead(t, s, 42, data)
		if m, err := s.ReadMeta(42); err != nil || !sameMeta(m, meta(42, len(data))) {
			t.Fatalf("metadata changed by a refused Create: %+v %v", m, err)
		}
		// A stripe being written is taken too.
		w, err := s.Create(43, backend.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Create(43, backend.CreateOptions{})
		wantKind(t, "Create over a stripe being written", err, kerr.Exists)
		w.Write([]byte("first"))
		if err := w.Finish(meta(43, 5)); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 43, []byte("first"))
	})
	t.Run("AbortLeavesNothing", func(t *testing.T) {
		s := initialized(t, h)
		w, err := s.Create(5, backend.CreateOptions{Overlap: true})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(randBytes(5, 3<<20))
		w.Abort()
		w.Abort() // twice is harmless
		_, err = s.Open(5)
		wantKind(t, "Open of an aborted stripe", err, kerr.NotFound)
		if l := listing(t, s); len(l) != 0 {
			t.Fatalf("Walk after Abort: %v", l)
		}
		if u, err := s.Usage(); err != nil || u.Files != 0 {
			t.Fatalf("Usage after Abort: %+v %v", u, err)
		}
		put(t, s, 5, []byte("again"), false) // the fid is free again
		mustRead(t, s, 5, []byte("again"))
		// Abort after a successful Finish keeps the stripe.
		w, _ = s.Create(6, backend.CreateOptions{})
		w.Write([]byte("kept"))
		if err := w.Finish(meta(6, 4)); err != nil {
			t.Fatal(err)
		}
		w.Abort()
		mustRead(t, s, 6, []byte("kept"))
	})
	t.Run("Remove", func(t *testing.T) {
		s := initialized(t, h)
		put(t, s, 7, []byte("seven"), false)
		put(t, s, 8, []byte("eight"), false)
		if err := s.Remove(7); err != nil {
			t.Fatal(err)
		}
		_, err := s.Open(7)
		wantKind(t, "Open of a removed stripe", err, kerr.NotFound)
		wantKind(t, "Remove of a removed stripe", s.Remove(7), kerr.NotFound)
		wantKind(t, "Remove of a stripe never written", s.Remove(1234567), kerr.NotFound)
		mustRead(t, s, 8, []byte("eight"))
		put(t, s, 7, []byte("new seven"), true)
		mustRead(t, s, 7, []byte("new seven"))
	})
	t.Run("WalkAndUsage", func(t *testing.T) {
		s := initialized(t, h)
		if u, err := s.Usage(); err != nil || u.Files != 0 || u.Capacity == 0 {
			t.Fatalf("Usage of an empty store: %+v %v", u, err)
		}
		fids := []uint64{1, 2, 10001, 20000, 1 << 33}
		for _, fid := range fids {
			put(t, s, fid, randBytes(fid, int(fid%5000)), false)
		}
		if err := s.Remove(2); err != nil {
			t.Fatal(err)
		}
		w, err := s.Create(99, backend.CreateOptions{}) // being written
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		got := listing(t, s)
		want := []uint64{1, 10001, 20000, 1 << 33, 99}
		if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, slices.Sorted(slices.Values(want))) {
			t.Fatalf("Walk lists %v, want %v", keys, want)
		}
		for _, fid := range want[:4] {
			if !sameMeta(got[fid], meta(fid, int(fid%5000))) {
				t.Fatalf("Walk metadata of %d: %+v", fid, got[fid])
			}
		}
		if got[99].Fid != 0 {
			t.Fatalf("stripe being written listed with metadata %+v", got[99])
		}
		if u, err := s.Usage(); err != nil || u.Files != 5 || u.Capacity == 0 {
			t.Fatalf("Usage with 4 stripes and 1 being written: %+v %v", u, err)
		}
		stop := errors.New("stop")
		n := 0
		if err := s.Walk(func(uint64, backend.Meta, error) error { n++; return stop }); err != stop || n != 1 {
			t.Fatalf("Walk stopped by fn: %v after %d", err, n)
		}
	})
	t.Run("ConcurrentCreates", func(t *testing.T) {
		s := initialized(t, h)
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				fid := uint64(500 + i*9999) // spread over buckets
				w, err := s.Create(fid, backend.CreateOptions{Overlap: i%2 == 0})
				if err != nil {
					errs <- err
					return
				}
				if _, err := w.Write(randBytes(fid, 70000+i)); err != nil {
					errs <- err
				}
				if err := w.Finish(meta(fid, 70000+i)); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for i := range 16 {
			fid := uint64(500 + i*9999)
			mustRead(t, s, fid, randBytes(fid, 70000+i))
		}
		if u, _ := s.Usage(); u.Files != 16 {
			t.Fatalf("Usage after 16 concurrent creates: %+v", u)
		}
	})
	t.Run("Identity", func(t *testing.T) {
		s := h.Open(t)
		_, err := s.Identity()
		wantKind(t, "Identity before Initialize", err, kerr.NotFound)
		if why := s.CheckIdentity(id); why == "" {
			t.Fatal("CheckIdentity of a store never initialized found it fine")
		}
		_, err = s.Create(1, backend.CreateOptions{})
		wantKind(t, "Create before Initialize", err, kerr.Unavailable)
		if err := s.Initialize(id); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Identity(); err != nil || got != id {
			t.Fatalf("Identity after Initialize: %+v %v", got, err)
		}
		if why := s.CheckIdentity(id); why != "" {
			t.Fatalf("CheckIdentity of its own identity: %q", why)
		}
		put(t, s, 1, []byte("one"), false)
		// Initialized once: never again, whatever it holds.
		wantKind(t, "second Initialize", s.Initialize(backend.Identity{FsID: 4, UUID: "instance-a"}), kerr.NotEmpty)
		if got, _ := s.Identity(); got != id {
			t.Fatalf("Identity after a refused Initialize: %+v", got)
		}
	})
	t.Run("IdentityRefusesNonEmpty", func(t *testing.T) {
		s := h.Open(t)
		h.Litter(t, s)
		wantKind(t, "Initialize over foreign data", s.Initialize(id), kerr.NotEmpty)
		if _, err := s.Identity(); !kerr.Is(err, kerr.NotFound) {
			t.Fatalf("refused Initialize wrote a marker: %v", err)
		}
	})
	t.Run("IdentityOffline", func(t *testing.T) {
		// Another filesystem's disk.
		s := h.Open(t)
		if err := s.Initialize(backend.Identity{FsID: 9, UUID: "instance-a"}); err != nil {
			t.Fatal(err)
		}
		if why := s.CheckIdentity(id); !strings.Contains(why, "fs 9") {
			t.Fatalf("CheckIdentity of fs 9 as fs 3: %q, want a reason naming fs 9", why)
		}
		_, err := s.Create(1, backend.CreateOptions{})
		wantKind(t, "Create on another filesystem's disk", err, kerr.Unavailable)
		// Another instance's fs 3.
		s = initialized(t, h)
		other := backend.Identity{FsID: 3, UUID: "instance-b"}
		if why := s.CheckIdentity(other); !strings.Contains(why, "instance-a") {
			t.Fatalf("CheckIdentity of another instance's fs 3: %q, want a reason naming its uuid", why)
		}
		_, err = s.Create(1, backend.CreateOptions{})
		wantKind(t, "Create on another instance's disk", err, kerr.Unavailable)
		// The marker goes away (the mount did) and comes back.
		s = initialized(t, h)
		put(t, s, 1, []byte("one"), false)
		h.LoseMarker(t, s)
		if why := s.CheckIdentity(id); !strings.Contains(why, "missing") {
			t.Fatalf("CheckIdentity after the marker vanished: %q", why)
		}
		_, err = s.Create(2, backend.CreateOptions{})
		wantKind(t, "Create with the marker gone", err, kerr.Unavailable)
		if _, err := s.Identity(); !kerr.Is(err, kerr.NotFound) {
			t.Fatalf("Identity after the marker vanished: %v", err)
		}
	})
	t.Run("SettingsAndInfo", func(t *testing.T) {
		s := initialized(t, h)
		wantKind(t, "Configure io=sideways", s.Configure(backend.Settings{IO: "sideways"}), kerr.Invalid)
		for _, mode := range []string{"", backend.IOAuto, backend.IOBuffered, backend.IODirect} {
			if err := s.Configure(backend.Settings{IO: mode}); err != nil {
				t.Fatalf("Configure io=%q: %v", mode, err)
			}
			data := randBytes(uint64(len(mode)), 70000)
			fid := uint64(1000 + len(mode))
			put(t, s, fid, data, true)
			mustRead(t, s, fid, data)
		}
		in := s.Info()
		if in.Kind == "" || in.Backend == "" {
			t.Fatalf("Info names no kind or backend: %+v", in)
		}
	})
	t.Run("Framed", func(t *testing.T) {
		s := initialized(t, h)
		data := randBytes(11, 300<<10)
		w, err := s.Create(11, backend.CreateOptions{Framed: true})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		if err := w.Finish(meta(11, len(data))); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 11, data)
	})
	t.Run("BlockSums", func(t *testing.T) {
		if h.Corrupt == nil {
			t.Skip("the store's blocks are out of the suite's reach")
		}
		s := initialized(t, h)
		data := randBytes(12, 1<<20+4097)
		put(t, s, 12, data, true)
		if r, _ := s.Open(12); !r.BlockSums() || r.Close() != nil {
			t.Fatal("a new stripe has no block sums")
		}
		mid, last := int64(500_000), int64(len(data)-1)
		h.Corrupt(t, s, 12, mid)
		h.Corrupt(t, s, 12, last)
		be := wantBadBlock(t, s, 12, data, mid)
		// Other ranges read; a range touching the block fails.
		r, err := s.Open(12)
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 1000)
		if n, err := r.ReadAt(p, be.Off-1000); n != 1000 || err != nil || !bytes.Equal(p, data[be.Off-1000:be.Off]) {
			t.Fatalf("read of the bytes before the rotten block: %d %v", n, err)
		}
		if _, err := r.ReadAt(p, mid-10); err == nil {
			t.Fatal("a read around the rotten byte succeeded")
		}
		r.Close()
		// A partial rewrite of the damaged block is refused; a rewrite of
		// the whole block (a repair from a good copy) mends it.
		wantKind(t, "rewrite of part of a rotten block", s.Rewrite(12, mid+1, []byte("x")), kerr.IO)
		if err := s.Rewrite(12, be.Off, data[be.Off:be.Off+be.Len]); err != nil {
			t.Fatalf("Rewrite of the rotten block: %v", err)
		}
		be = wantBadBlock(t, s, 12, data, last)
		if err := s.Rewrite(12, be.Off, data[be.Off:be.Off+be.Len]); err != nil {
			t.Fatalf("Rewrite of the rotten last block: %v", err)
		}
		mustRead(t, s, 12, data)
		// An update of a range across blocks recomputes their sums.
		upd := randBytes(13, 200_000)
		if err := s.Rewrite(12, 123_456, upd); err != nil {
			t.Fatalf("Rewrite of a range: %v", err)
		}
		copy(data[123_456:], upd)
		mustRead(t, s, 12, data)
		wantKind(t, "rewrite past the end", s.Rewrite(12, int64(len(data))-1, []byte("ab")), kerr.Invalid)
		wantKind(t, "rewrite of a missing stripe", s.Rewrite(77, 0, []byte("ab")), kerr.NotFound)
		if m, err := s.ReadMeta(12); err != nil || !sameMeta(m, meta(12, 1<<20+4097)) {
			t.Fatalf("metadata after rewrites: %+v %v", m, err)
		}
	})
	t.Run("Damaged", func(t *testing.T) {
		s := initialized(t, h)
		put(t, s, 14, []byte("fourteen"), false)
		if err := s.MarkDamaged(14, "block 0 fails its crc32c; no other copy"); err != nil {
			t.Fatal(err)
		}
		r, err := s.Open(14)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Damaged(); got != "block 0 fails its crc32c; no other copy" {
			t.Fatalf("Damaged after MarkDamaged: %q", got)
		}
		r.Close()
		if err := s.Rewrite(14, 0, []byte("FOURTEEN")); err != nil {
			t.Fatal(err)
		}
		if r, _ := s.Open(14); r.Damaged() != "" || r.Close() != nil {
			t.Fatal("a rewrite left the damage mark")
		}
		mustRead(t, s, 14, []byte("FOURTEEN"))
		s.MarkDamaged(14, "again")
		if err := s.MarkDamaged(14, ""); err != nil {
			t.Fatal(err)
		}
		if r, _ := s.Open(14); r.Damaged() != "" || r.Close() != nil {
			t.Fatal("MarkDamaged(\"\") left the mark")
		}
		wantKind(t, "MarkDamaged of a missing stripe", s.MarkDamaged(77, "x"), kerr.NotFound)
	})
	t.Run("LegacyGetsBlockSums", func(t *testing.T) {
		if h.Legacy == nil || h.Corrupt == nil {
			t.Skip("the store keeps no block sums of its own")
		}
		s := initialized(t, h)
		data := randBytes(15, 200_000)
		put(t, s, 15, data, false)
		h.Legacy(t, s, 15)
		if r, _ := s.Open(15); r.BlockSums() || r.Close() != nil {
			t.Fatal("a legacy stripe claims block sums")
		}
		mustRead(t, s, 15, data)
		sums := checksum.NewBlockSummer(checksum.BlockSize)
		sums.Write(data)
		wantKind(t, "AddBlockSums for another length", s.AddBlockSums(15, checksum.BlockSize, sums.Sums(), int64(len(data))+1), kerr.Invalid)
		if r, _ := s.Open(15); r.BlockSums() || r.Close() != nil {
			t.Fatal("block sums added for the wrong length")
		}
		if err := s.AddBlockSums(15, checksum.BlockSize, sums.Sums(), int64(len(data))); err != nil {
			t.Fatalf("AddBlockSums: %v", err)
		}
		if r, _ := s.Open(15); !r.BlockSums() || r.Close() != nil {
			t.Fatal("no block sums after AddBlockSums")
		}
		mustRead(t, s, 15, data)
		if err := s.AddBlockSums(15, checksum.BlockSize, nil, 0); err != nil {
			t.Fatalf("AddBlockSums of a stripe that has them: %v", err)
		}
		h.Corrupt(t, s, 15, 150_000)
		wantBadBlock(t, s, 15, data, 150_000)
	})
	t.Run("IdentityWithoutUUID", func(t *testing.T) {
		// Markers written before uuids existed adopt the instance's.
		s := h.Open(t)
		if err := s.Initialize(backend.Identity{FsID: 3}); err != nil {
			t.Fatal(err)
		}
		if why := s.CheckIdentity(id); why != "" {
			t.Fatalf("CheckIdentity of a marker without uuid: %q", why)
		}
		if got, err := s.Identity(); err != nil || got != id {
			t.Fatalf("marker not upgraded: %+v %v", got, err)
		}
	})
}

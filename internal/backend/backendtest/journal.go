package backendtest

import (
	"bytes"
	"testing"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Model is what a store's content must be after the operations applied
// to it (the tests' model of acknowledged writes).
type Model = backend.Buffer

// runJournal is the suite of stores that change stripes in place
// (backend.Updater): a prepared update leaves the stripe as it was, is
// applied whole (content, metadata with the new version) or discarded, and
// never applies to a stripe at another version (a stale one).
func runJournal(t *testing.T, h Hooks) {
	if _, ok := h.Open(t).(backend.Updater); !ok {
		t.Skip("the store does not change stripes in place")
	}
	ops := func(m *Model) []byte {
		var b []byte
		b = backend.EncodeWrite(b, 10, []byte("hello"))
		b = backend.EncodeTruncate(b, 7000)
		b = backend.EncodeWrite(b, 9000, randBytes(9, 5000)) // past the end: a hole
		b = backend.EncodeTruncate(b, 12000)
		b = backend.EncodeWrite(b, 4090, randBytes(10, 20))
		if m != nil {
			if err := backend.ReplayOps(bytes.NewReader(b), m); err != nil {
				t.Fatal(err)
			}
		}
		return b
	}
	head := func(fid uint64, from, to uint64, size int) backend.JournalHead {
		m := meta(fid, size)
		m.Version, m.Checksums = to, nil
		return backend.JournalHead{From: from, Meta: m}
	}
	t.Run("PrepareApply", func(t *testing.T) {
		s := initialized(t, h)
		u := s.(backend.Updater)
		old := randBytes(1, 10000)
		put(t, s, 7, old, false)
		want := &Model{B: bytes.Clone(old)}
		h7 := head(7, 0, 1, 12000)
		if err := u.Prepare(7, h7, bytes.NewReader(ops(want))); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 7, old) // prepared, not applied
		if got, err := u.Prepared(7); err != nil || got.From != 0 || got.Meta.Version != 1 {
			t.Fatalf("Prepared = %+v, %v", got, err)
		}
		if err := u.Apply(7); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 7, want.B)
		m, err := s.ReadMeta(7)
		if err != nil || m.Version != 1 || m.Size != h7.Meta.Size || len(m.Checksums) != 0 {
			t.Fatalf("metadata after the update: %+v %v", m, err)
		}
		_, err = u.Prepared(7)
		wantKind(t, "Prepared after Apply", err, kerr.NotFound)
		wantKind(t, "Apply again", u.Apply(7), kerr.NotFound)
	})
	t.Run("Discard", func(t *testing.T) {
		s := initialized(t, h)
		u := s.(backend.Updater)
		old := randBytes(2, 5000)
		put(t, s, 8, old, false)
		if err := u.Prepare(8, head(8, 0, 1, 1), bytes.NewReader(ops(nil))); err != nil {
			t.Fatal(err)
		}
		if err := u.Discard(8); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 8, old)
		if m, _ := s.ReadMeta(8); m.Version != 0 {
			t.Fatalf("a discarded update changed the version: %+v", m)
		}
		if err := u.Discard(8); err != nil {
			t.Fatalf("Discard without a journal: %v", err)
		}
	})
	t.Run("StaleStripeUntouched", func(t *testing.T) {
		s := initialized(t, h)
		u := s.(backend.Updater)
		old := randBytes(3, 5000)
		put(t, s, 9, old, false)
		// An update from version 4 finds the stripe at 0: it missed three.
		if err := u.Prepare(9, head(9, 4, 5, 1), bytes.NewReader(ops(nil))); err != nil {
			t.Fatal(err)
		}
		wantKind(t, "Apply to a stale stripe", u.Apply(9), kerr.IO)
		mustRead(t, s, 9, old)
		if m, _ := s.ReadMeta(9); m.Version != 0 {
			t.Fatalf("a stale stripe's version changed: %+v", m)
		}
	})
	t.Run("SecondPrepareReplacesFirst", func(t *testing.T) {
		s := initialized(t, h)
		u := s.(backend.Updater)
		put(t, s, 11, []byte("0123456789"), false)
		u.Prepare(11, head(11, 0, 1, 10), bytes.NewReader(backend.EncodeWrite(nil, 0, []byte("AAAA"))))
		if err := u.Prepare(11, head(11, 0, 1, 10), bytes.NewReader(backend.EncodeWrite(nil, 2, []byte("BB")))); err != nil {
			t.Fatal(err)
		}
		if err := u.Apply(11); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 11, []byte("01BB456789"))
	})
	runJournalSums(t, h, head)
	t.Run("PrepareOfMissingStripe", func(t *testing.T) {
		s := initialized(t, h)
		err := s.(backend.Updater).Prepare(12, head(12, 0, 1, 1), bytes.NewReader(nil))
		wantKind(t, "Prepare without a stripe", err, kerr.NotFound)
	})
}

// Block sums through updates (backend/journal.go): every block of an
// updated stripe verifies, a block the update wrote rots and is found, a
// block that rotted before is never summed again as good, and a crash at
// any step of an apply replays to the same stripe.

// bigOld is the stripe the block sum tests update: several 64 KiB
// blocks (a posix stripe's) and many 4 KiB ones (memstore's).
const bigOld = 300_000

// bigOps are operations over blocks of both sizes: a write inside a
// block, one of a whole 64 KiB block, a cut at a block boundary, a write
// past the end (a hole of several blocks), a cut inside it, a write at
// the start.
func bigOps() []byte {
	var b []byte
	b = backend.EncodeWrite(b, 70_000, randBytes(20, 100))
	b = backend.EncodeWrite(b, 131_072, randBytes(21, 65_536))
	b = backend.EncodeTruncate(b, 262_144)
	b = backend.EncodeWrite(b, 400_000, randBytes(22, 5000))
	b = backend.EncodeTruncate(b, 401_000)
	return backend.EncodeWrite(b, 10, randBytes(23, 20))
}

// appendOps append to the stripe (no truncation: nothing cuts what a
// crash left after the data) and write inside it.
func appendOps() []byte {
	var b []byte
	b = backend.EncodeWrite(b, bigOld-100, randBytes(24, 200_000))
	return backend.EncodeWrite(b, 70_000, randBytes(25, 100))
}

// extendOps extend a stripe of bigOld bytes (JournalHead.Extends): a
// write at its end, one after a hole, then two past the end out of
// order, the second over the first.
func extendOps() []byte {
	var b []byte
	b = backend.EncodeWrite(b, bigOld, randBytes(26, 100_000))
	b = backend.EncodeWrite(b, 450_000, randBytes(27, 30_000))
	b = backend.EncodeWrite(b, 600_000, randBytes(28, 10_000))
	return backend.EncodeWrite(b, 595_000, randBytes(29, 10_000))
}

// bigWant is the stripe bigOps make of old.
func bigWant(t *testing.T, old []byte) []byte { return applied(t, old, bigOps()) }

// applied is the stripe ops make of old.
func applied(t *testing.T, old, ops []byte) []byte {
	m := &Model{B: bytes.Clone(old)}
	if err := backend.ReplayOps(bytes.NewReader(ops), m); err != nil {
		t.Fatal(err)
	}
	return m.B
}

func hasSums(t *testing.T, s backend.Store, fid uint64) bool {
	t.Helper()
	r, err := s.Open(fid)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return r.BlockSums()
}

func runJournalSums(t *testing.T, h Hooks, head func(fid uint64, from, to uint64, size int) backend.JournalHead) {
	prepareOps := func(t *testing.T, s backend.Store, fid uint64, ops []byte) []byte {
		t.Helper()
		old := randBytes(fid, bigOld)
		put(t, s, fid, old, false)
		if err := s.(backend.Updater).Prepare(fid, head(fid, 0, 1, 401_000), bytes.NewReader(ops)); err != nil {
			t.Fatal(err)
		}
		return old
	}
	prepare := func(t *testing.T, s backend.Store, fid uint64) []byte { return prepareOps(t, s, fid, bigOps()) }
	// updated checks that fid holds want at version 1 with block sums
	// that verify, and that rot in a byte the update wrote (70_050) and
	// in the hole it made (300_500) is found, never read.
	updated := func(t *testing.T, s backend.Store, fid uint64, want []byte) {
		t.Helper()
		mustRead(t, s, fid, want)
		if m, err := s.ReadMeta(fid); err != nil || m.Version != 1 {
			t.Fatalf("stripe %d after the update: %+v %v", fid, m, err)
		}
		if h.Corrupt == nil {
			return
		}
		if !hasSums(t, s, fid) {
			t.Fatalf("stripe %d lost its block sums in the update", fid)
		}
		h.Corrupt(t, s, fid, 300_500)
		wantBadBlock(t, s, fid, want, 300_500)
		h.Corrupt(t, s, fid, 70_050)
		wantBadBlock(t, s, fid, want, 70_050)
	}
	t.Run("BlockSumsKeptCurrent", func(t *testing.T) {
		s := initialized(t, h)
		old := prepare(t, s, 30)
		if err := s.(backend.Updater).Apply(30); err != nil {
			t.Fatal(err)
		}
		updated(t, s, 30, bigWant(t, old))
	})
	t.Run("RotBeforeTheUpdateFailsIt", func(t *testing.T) {
		if h.Corrupt == nil {
			t.Skip("the store's blocks are out of the suite's reach")
		}
		s := initialized(t, h)
		old := prepare(t, s, 31)
		// A byte of the block the first write changes in part: its old
		// bytes stay, so they must not be summed again as good.
		h.Corrupt(t, s, 31, 70_500)
		wantKind(t, "Apply over a rotten block", s.(backend.Updater).Apply(31), kerr.IO)
		if m, _ := s.ReadMeta(31); m.Version != 0 {
			t.Fatalf("an update over a rotten block changed the version: %+v", m)
		}
		_, err := s.(backend.Updater).Prepared(31)
		wantKind(t, "Prepared after a failed apply", err, kerr.NotFound)
		wantBadBlock(t, s, 31, old, 70_500)
	})
	t.Run("WritesWithoutTruncation", func(t *testing.T) {
		// Writes inside full blocks and an append (no truncation: a
		// store may sum the blocks written in part from the bytes they
		// replace, backend.Touched.Delta).
		s := initialized(t, h)
		old := prepareOps(t, s, 35, appendOps())
		if err := s.(backend.Updater).Apply(35); err != nil {
			t.Fatal(err)
		}
		updated(t, s, 35, applied(t, old, appendOps()))
	})
	t.Run("RotBesideAWriteIsNeverBlessed", func(t *testing.T) {
		if h.Corrupt == nil {
			t.Skip("the store's blocks are out of the suite's reach")
		}
		s := initialized(t, h)
		ops := appendOps()
		old := prepareOps(t, s, 36, ops)
		// A byte of the block the write at 70_000 changes in part, one
		// the write leaves: the apply fails, or its block's sum still
		// does not match it.
		h.Corrupt(t, s, 36, 100_000)
		err := s.(backend.Updater).Apply(36)
		if err != nil {
			wantKind(t, "Apply over a rotten block", err, kerr.IO)
			if m, _ := s.ReadMeta(36); m.Version != 0 {
				t.Fatalf("a failed update over a rotten block changed the version: %+v", m)
			}
			wantBadBlock(t, s, 36, old, 100_000)
			return
		}
		if m, _ := s.ReadMeta(36); m.Version != 1 {
			t.Fatalf("stripe after the update: %+v", m)
		}
		wantBadBlock(t, s, 36, applied(t, old, ops), 100_000)
	})
	t.Run("WithoutBlockSums", func(t *testing.T) {
		if h.Legacy == nil {
			t.Skip("the store keeps no block sums of its own")
		}
		s := initialized(t, h)
		old := randBytes(32, bigOld)
		put(t, s, 32, old, false)
		h.Legacy(t, s, 32)
		u := s.(backend.Updater)
		if err := u.Prepare(32, head(32, 0, 1, 401_000), bytes.NewReader(bigOps())); err != nil {
			t.Fatal(err)
		}
		if err := u.Apply(32); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 32, bigWant(t, old))
		if hasSums(t, s, 32) {
			t.Fatal("a stripe without block sums has some after an update")
		}
		// Sums a scrub added between prepare and apply are dropped, not
		// left wrong.
		put(t, s, 33, old, false)
		h.Legacy(t, s, 33)
		if err := u.Prepare(33, head(33, 0, 1, 401_000), bytes.NewReader(bigOps())); err != nil {
			t.Fatal(err)
		}
		sums := checksum.NewBlockSummer(checksum.BlockSize)
		sums.Write(old)
		if err := s.AddBlockSums(33, checksum.BlockSize, sums.Sums(), bigOld); err != nil {
			t.Fatal(err)
		}
		if err := u.Apply(33); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 33, bigWant(t, old))
	})
	t.Run("Framed", func(t *testing.T) {
		s := initialized(t, h)
		old := randBytes(34, bigOld)
		w, err := s.Create(34, backend.CreateOptions{Framed: true})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(old)
		if err := w.Finish(meta(34, bigOld)); err != nil {
			t.Fatal(err)
		}
		u := s.(backend.Updater)
		if err := u.Prepare(34, head(34, 0, 1, 401_000), bytes.NewReader(bigOps())); err != nil {
			t.Fatal(err)
		}
		if err := u.Apply(34); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 34, bigWant(t, old))
		if hasSums(t, s, 34) {
			t.Fatal("a framed stripe has block sums after an update")
		}
	})
	t.Run("Extension", func(t *testing.T) {
		// An append (JournalHead.Extends): in order, a hole, then bytes
		// past the end written out of order over each other.
		s := initialized(t, h)
		u := s.(backend.Updater)
		ext := extendOps()
		old := randBytes(37, bigOld)
		put(t, s, 37, old, false)
		eh := head(37, 0, 1, 0)
		eh.Extends = true
		if err := u.Prepare(37, eh, bytes.NewReader(ext)); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 37, old) // prepared: what it wrote is not read
		if err := u.Apply(37); err != nil {
			t.Fatal(err)
		}
		want := applied(t, old, ext)
		updated(t, s, 37, want)
		if h.Corrupt != nil {
			// Repairs of the rot updated put there, from a good copy.
			for _, at := range []int64{300_500, 70_050} {
				blk := at / checksum.BlockSize * checksum.BlockSize
				if err := s.Rewrite(37, blk, want[blk:min(blk+checksum.BlockSize, int64(len(want)))]); err != nil {
					t.Fatal(err)
				}
			}
			mustRead(t, s, 37, want)
		}
		// The extended stripe takes any update after, and appends again.
		next := head(37, 1, 2, 0)
		if err := u.Prepare(37, next, bytes.NewReader(bigOps())); err != nil {
			t.Fatal(err)
		}
		if err := u.Apply(37); err != nil {
			t.Fatal(err)
		}
		want = applied(t, want, bigOps())
		mustRead(t, s, 37, want)
		more := backend.EncodeWrite(nil, int64(len(want)), randBytes(38, 70_000))
		next = head(37, 2, 3, 0)
		next.Extends = true
		if err := u.Prepare(37, next, bytes.NewReader(more)); err != nil {
			t.Fatal(err)
		}
		if err := u.Discard(37); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 37, want) // discarded: as it was
		next = head(37, 2, 3, 0)
		next.Extends = true
		if err := u.Prepare(37, next, bytes.NewReader(more)); err != nil {
			t.Fatal(err)
		}
		if err := u.Apply(37); err != nil {
			t.Fatal(err)
		}
		mustRead(t, s, 37, applied(t, want, more))
		if m, err := s.ReadMeta(37); err != nil || m.Version != 3 {
			t.Fatalf("after three updates: %+v %v", m, err)
		}
	})
	t.Run("CrashReplay", func(t *testing.T) {
		if h.CrashApply == nil {
			t.Skip("the store changes a stripe all at once")
		}
		s := initialized(t, h)
		u := s.(backend.Updater)
		// A crash at each step, then at each later one (a replay that
		// crashes too), then the replay that finishes.
		for k, ops := range [][]byte{bigOps(), appendOps()} {
			for i, step := range h.ApplySteps {
				fid := uint64(40 + 10*k + i)
				old := prepareOps(t, s, fid, ops)
				for _, at := range h.ApplySteps[i:] {
					h.CrashApply(t, s, fid, at)
					if m, err := s.ReadMeta(fid); err != nil || m.Version != 0 {
						t.Fatalf("crash at %s: the stripe is at version %d (%v) before the apply finished", at, m.Version, err)
					}
				}
				if err := u.Apply(fid); err != nil {
					t.Fatalf("replay after a crash at %s: %v", step, err)
				}
				updated(t, s, fid, applied(t, old, ops))
			}
		}
	})
}

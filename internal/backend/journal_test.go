package backend

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kaon-storage/kaon/internal/checksum"
)

// TestReplayAfterPartialApply: a journal replayed whole over a stripe a
// crash left partly updated (any prefix of its operations applied) ends
// exactly as one replay over the untouched stripe does, so rolling a
// journal forward again after a crash is always right.
func TestReplayAfterPartialApply(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		base := make([]byte, r.IntN(3000))
		for i := range base {
			base[i] = byte(r.Uint32())
		}
		var ops [][]byte
		for n := r.IntN(12); len(ops) < n; {
			if r.IntN(4) == 0 {
				ops = append(ops, EncodeTruncate(nil, int64(r.IntN(4000))))
				continue
			}
			p := make([]byte, 1+r.IntN(500))
			for i := range p {
				p[i] = byte(r.Uint32())
			}
			ops = append(ops, EncodeWrite(nil, int64(r.IntN(4000)), p))
		}
		all := bytes.Join(ops, nil)
		want := &Buffer{B: bytes.Clone(base)}
		if err := ReplayOps(bytes.NewReader(all), want); err != nil {
			t.Fatal(err)
		}
		for k := 0; k <= len(ops); k++ {
			got := &Buffer{B: bytes.Clone(base)}
			if err := ReplayOps(bytes.NewReader(bytes.Join(ops[:k], nil)), got); err != nil {
				t.Fatal(err)
			}
			if err := ReplayOps(bytes.NewReader(all), got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.B, want.B) {
				t.Fatalf("round %d: %d operations applied, then all: %d bytes, one replay %d", round, k, len(got.B), len(want.B))
			}
		}
	}
}

// TestReplayRefusesDamage: a journal cut off inside an operation or with
// an unknown one is an error, never a shorter update.
func TestReplayRefusesDamage(t *testing.T) {
	ops := EncodeWrite(nil, 5, []byte("hello"))
	for _, bad := range [][]byte{ops[:len(ops)-1], ops[:5], append(bytes.Clone(ops), 'X'), EncodeTruncate(nil, 9)[:4]} {
		if err := ReplayOps(bytes.NewReader(bad), &Buffer{}); err == nil {
			t.Errorf("replay of %q succeeded", bad)
		}
	}
}

// TestTouchedBlocks: for random operations over random stripes, the sums
// Touched gives (the untouched blocks' kept, the touched ones' summed
// again) are those of the new bytes summed whole, and Verify reads every
// block whose old bytes partly stay: a block it skips has no old byte
// left in the new stripe.
func TestTouchedBlocks(t *testing.T) {
	const bs = 4096
	r := rand.New(rand.NewPCG(5, 6))
	sumsOf := func(b []byte) []uint32 {
		s := checksum.NewBlockSummer(bs)
		s.Write(b)
		return s.Sums()
	}
	for round := range 500 {
		old := make([]byte, r.IntN(10*bs))
		for i := range old {
			old[i] = byte(r.Uint32())
		}
		var ops []byte
		size := len(old)
		for range 1 + r.IntN(5) {
			if r.IntN(4) == 0 {
				size = r.IntN(12 * bs)
				ops = EncodeTruncate(ops, int64(size))
				continue
			}
			p := make([]byte, 1+r.IntN(3*bs))
			if r.IntN(40) == 0 {
				p = make([]byte, 1+r.IntN(1<<20)) // past TouchedBlocks' 64 KiB window
			}
			for i := range p {
				p[i] = byte(r.Uint32()) | 1 // never 0: a write is told from a hole
			}
			ops = EncodeWrite(ops, int64(r.IntN(size+2*bs)), p)
		}
		m := &Buffer{B: bytes.Clone(old)}
		if err := ReplayOps(bytes.NewReader(ops), m); err != nil {
			t.Fatal(err)
		}
		tb, err := TouchedBlocks(bytes.NewReader(ops), int64(len(ops)), int64(len(old)), bs)
		if err != nil {
			t.Fatal(err)
		}
		if tb.NewLen != int64(len(m.B)) {
			t.Fatalf("round %d: NewLen %d, the stripe has %d", round, tb.NewLen, len(m.B))
		}
		oldSums := sumsOf(old)
		table := func(s []uint32) checksum.SumsFunc {
			return func(first, n int64) ([]uint32, error) { return s[first : first+n], nil }
		}
		read := func(b []byte) func(p []byte, off int64) error {
			return func(p []byte, off int64) error { copy(p, b[off:]); return nil }
		}
		got, err := tb.Sums(table(oldSums), read(m.B))
		if err != nil {
			t.Fatal(err)
		}
		if want := sumsOf(m.B); !slices.Equal(got, want) {
			t.Fatalf("round %d: sums after the update differ from the new bytes' (%d and %d blocks)", round, len(got), len(want))
		}
		// Which old blocks Verify reads: a block it skips must keep no
		// old byte (every byte of it in the new stripe is written data or
		// beyond the old block's end).
		verified := map[int64]bool{}
		if err := tb.Verify(func(p []byte, off int64) error { verified[off/bs] = true; copy(p, old[off:]); return nil }, table(oldSums)); err != nil {
			t.Fatalf("round %d: Verify of intact blocks: %v", round, err)
		}
		for b := int64(0); b < checksum.Blocks(int64(len(old)), bs); b++ {
			if verified[b] || !within(tb.blocks, b) {
				continue
			}
			for i := b * bs; i < min((b+1)*bs, int64(len(old)), int64(len(m.B))); i++ {
				if m.B[i] == old[i] && m.B[i] != 0 && !writtenAt(t, ops, i) {
					t.Fatalf("round %d: block %d keeps old byte %d but Verify skipped it", round, b, i)
				}
			}
		}
	}
}

// writtenAt reports whether the last operation touching byte i of ops is
// a write of it (so its value is the write's, not the old stripe's).
func writtenAt(t *testing.T, ops []byte, i int64) bool {
	t.Helper()
	written := false
	for off := 0; off < len(ops); {
		switch ops[off] {
		case opWrite:
			at := int64(binary.BigEndian.Uint64(ops[off+1:]))
			n := int64(binary.BigEndian.Uint32(ops[off+9:]))
			if at <= i && i < at+n {
				written = true
			}
			off += 13 + int(n)
		case opTruncate:
			if int64(binary.BigEndian.Uint64(ops[off+1:])) <= i {
				written = false
			}
			off += 9
		}
	}
	return written
}

// deltaTarget applies writes to m, telling tb of each before (Overwrite).
type deltaTarget struct {
	m  *Buffer
	tb *Touched
}

func (d deltaTarget) WriteAt(p []byte, off int64) (int, error) {
	readOld := func(q []byte, o int64) error { copy(q, d.m.B[o:]); return nil }
	readNew := func(q []byte, o int64) error { copy(q, p[o:]); return nil }
	if err := d.tb.Overwrite(off, int64(len(p)), readOld, readNew); err != nil {
		return 0, err
	}
	return d.m.WriteAt(p, off)
}

func (d deltaTarget) Truncate(size int64) error { return d.m.Truncate(size) }

// TestTouchedDelta: with Delta, the sums of full blocks written in part
// come from the old sums and the replaced bytes (crc32c's linearity):
// they equal the new bytes' sums, Verify reads none of those blocks and
// Sums reads none of them, and a byte that rotted before the update in
// such a block leaves its sum not matching (never blessed).
func TestTouchedDelta(t *testing.T) {
	const bs = 4096
	r := rand.New(rand.NewPCG(7, 8))
	sumsOf := func(b []byte) []uint32 {
		s := checksum.NewBlockSummer(bs)
		s.Write(b)
		return s.Sums()
	}
	table := func(s []uint32) checksum.SumsFunc {
		return func(first, n int64) ([]uint32, error) { return s[first : first+n], nil }
	}
	deltaRounds := 0
	for round := range 500 {
		old := make([]byte, bs+r.IntN(10*bs))
		for i := range old {
			old[i] = byte(r.Uint32())
		}
		var ops []byte
		truncates := r.IntN(8) == 0
		if truncates {
			ops = EncodeTruncate(ops, int64(len(old)+r.IntN(bs)))
		}
		for range 1 + r.IntN(6) {
			p := make([]byte, 1+r.IntN(bs+bs/2))
			for i := range p {
				p[i] = byte(r.Uint32())
			}
			ops = EncodeWrite(ops, int64(r.IntN(len(old)+bs)), p)
		}
		// Rot a byte of the old stripe (its sums are of the good bytes).
		oldSums := sumsOf(old)
		rot := int64(r.IntN(len(old)))
		rotten := bytes.Clone(old)
		rotten[rot] ^= 0x40
		tb, err := TouchedBlocks(bytes.NewReader(ops), int64(len(ops)), int64(len(old)), bs)
		if err != nil {
			t.Fatal(err)
		}
		tb.Delta()
		if tb.delta == nil != truncates {
			t.Fatalf("round %d: Delta with a truncation %v, on %v", round, truncates, tb.delta != nil)
		}
		m := &Buffer{B: bytes.Clone(old)}
		if err := ReplayOps(bytes.NewReader(ops), deltaTarget{m, tb}); err != nil {
			t.Fatal(err)
		}
		read := func(p []byte, off int64) error {
			if tb.deltaBlock(off / bs) {
				t.Fatalf("round %d: Sums read block %d, which Delta sums", round, off/bs)
			}
			copy(p, m.B[off:])
			return nil
		}
		got, err := tb.Sums(table(oldSums), read)
		if err != nil {
			t.Fatal(err)
		}
		if want := sumsOf(m.B); !slices.Equal(got, want) {
			t.Fatalf("round %d: sums after the update differ from the new bytes' (%d and %d blocks)", round, len(got), len(want))
		}
		if err := tb.Verify(func(p []byte, off int64) error {
			if tb.deltaBlock(off / bs) {
				t.Fatalf("round %d: Verify read block %d, which Delta sums", round, off/bs)
			}
			copy(p, old[off:])
			return nil
		}, table(oldSums)); err != nil {
			t.Fatal(err)
		}
		if len(tb.delta) > 0 {
			deltaRounds++
		}

		// The same update over the rotten stripe.
		tb, err = TouchedBlocks(bytes.NewReader(ops), int64(len(ops)), int64(len(old)), bs)
		if err != nil {
			t.Fatal(err)
		}
		tb.Delta()
		m = &Buffer{B: bytes.Clone(rotten)}
		if err := ReplayOps(bytes.NewReader(ops), deltaTarget{m, tb}); err != nil {
			t.Fatal(err)
		}
		got, err = tb.Sums(table(oldSums), func(p []byte, off int64) error { copy(p, m.B[off:]); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if b := rot / bs; tb.deltaBlock(b) && got[b] == sumsOf(m.B)[b] {
			t.Fatalf("round %d: block %d rotted at byte %d before the update, and its new sum matches its bytes", round, b, rot)
		}
	}
	if deltaRounds < 100 {
		t.Fatalf("only %d of 500 rounds summed a block by Delta", deltaRounds)
	}
}

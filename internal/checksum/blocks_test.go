package checksum

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/kaon-storage/kaon/internal/bench/cputime"
)

func randData(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// summed returns the block sums of data, summed by one Write per piece.
func summed(data []byte, bs, piece int) []uint32 {
	s := NewBlockSummer(bs)
	for off := 0; off < len(data); off += piece {
		s.Write(data[off:min(off+piece, len(data))])
	}
	return s.Sums()
}

func TestBlockSummer(t *testing.T) {
	const bs = 4096
	for _, n := range []int{0, 1, bs - 1, bs, bs + 1, 5*bs + 17} {
		data := randData(uint64(n), n)
		want := make([]uint32, 0)
		for off := 0; off < n; off += bs {
			want = append(want, CRC32CSum(data[off:min(off+bs, n)]))
		}
		for _, piece := range []int{1, 7, bs, 3 * bs} {
			if got := summed(data, bs, piece); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%d bytes in pieces of %d: sums %x, want %x", n, piece, got, want)
			}
		}
	}
}

// memSums is a table in memory as a SumsFunc.
func memSums(sums []uint32) SumsFunc {
	return func(first, n int64) ([]uint32, error) {
		if first < 0 || first+n > int64(len(sums)) {
			return nil, fmt.Errorf("blocks %d+%d out of the table's %d", first, n, len(sums))
		}
		return sums[first : first+n], nil
	}
}

func TestBlockReaderReadsEveryRange(t *testing.T) {
	const bs = 4096
	data := randData(1, 9*bs+123)
	r := &BlockReader{R: bytes.NewReader(data), Len: int64(len(data)), Size: bs, Sums: memSums(summed(data, bs, 1000))}
	rng := rand.New(rand.NewPCG(2, 2))
	for range 2000 {
		off := rng.Int64N(int64(len(data)) + 10)
		p := make([]byte, rng.IntN(4*bs))
		n, err := r.ReadAt(p, off)
		want := max(0, min(int64(len(p)), int64(len(data))-off))
		if int64(n) != want {
			t.Fatalf("ReadAt(%d bytes, %d) = %d, want %d (%v)", len(p), off, n, want, err)
		}
		if err != nil && !(err == io.EOF && int64(n) < int64(len(p))) {
			t.Fatalf("ReadAt(%d bytes, %d): %v", len(p), off, err)
		}
		if err == nil && n < len(p) {
			t.Fatalf("ReadAt(%d bytes, %d) short without io.EOF", len(p), off)
		}
		if !bytes.Equal(p[:n], data[off:off+int64(n)]) {
			t.Fatalf("ReadAt(%d bytes, %d): wrong bytes", len(p), off)
		}
	}
}

// TestBlockReaderRefusesBadBlocks damages one byte of block 3 and of
// the short last block: every read touching them fails naming the
// block, returns only the verified bytes before it, and leaves no
// damaged byte in the caller's buffer.
func TestBlockReaderRefusesBadBlocks(t *testing.T) {
	const bs = 4096
	data := randData(3, 7*bs+100)
	sums := summed(data, bs, bs)
	disk := bytes.Clone(data)
	disk[3*bs+2000] ^= 0x40
	disk[7*bs+50] ^= 0x01
	r := &BlockReader{R: bytes.NewReader(disk), Len: int64(len(disk)), Size: bs, Sums: memSums(sums)}
	for _, tc := range []struct {
		off, n   int64
		good     int64 // bytes that must come back
		badBlock int64
	}{
		{0, int64(len(disk)), 3 * bs, 3},
		{bs, 4 * bs, 2 * bs, 3},
		{3*bs + 2000, 1, 0, 3},
		{2*bs + 10, bs + 100, bs - 10, 3},
		{3*bs - 1, 2, 1, 3},
		{4 * bs, 4 * bs, 3 * bs, 7},
		{7 * bs, 100, 0, 7},
		{7*bs + 99, 1, 0, 7},
	} {
		p := bytes.Repeat([]byte{0xee}, int(tc.n))
		n, err := r.ReadAt(p, tc.off)
		be, ok := AsBlockError(err)
		if !ok || be.Block != tc.badBlock || be.Off != tc.badBlock*bs {
			t.Errorf("ReadAt(%d, %d): %v, want block %d failing", tc.n, tc.off, err, tc.badBlock)
			continue
		}
		if int64(n) != tc.good || !bytes.Equal(p[:n], data[tc.off:tc.off+int64(n)]) {
			t.Errorf("ReadAt(%d, %d): %d bytes before the bad block, want %d good ones", tc.n, tc.off, n, tc.good)
		}
		for i := n; i < len(p); i++ {
			if p[i] != 0 && p[i] == disk[tc.off+int64(i)] && disk[tc.off+int64(i)] != data[tc.off+int64(i)] {
				t.Fatalf("ReadAt(%d, %d): a damaged byte at %d is in the caller's buffer", tc.n, tc.off, tc.off+int64(i))
			}
		}
	}
	// A stripe shorter than its sums say is an error, not an end.
	short := &BlockReader{R: bytes.NewReader(data[:5*bs]), Len: int64(len(data)), Size: bs, Sums: memSums(sums)}
	if _, err := short.ReadAt(make([]byte, 2*bs), 4*bs); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read past a truncated stripe: %v", err)
	}
}

func TestRewriteSums(t *testing.T) {
	const bs = 4096
	data := randData(4, 6*bs+700)
	sums := summed(data, bs, bs)
	read := func(disk []byte) func(b []byte, off int64) error {
		return func(b []byte, off int64) error { copy(b, disk[off:]); return nil }
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for range 300 {
		off := rng.Int64N(int64(len(data)))
		p := randData(rng.Uint64(), int(rng.Int64N(int64(len(data))-off)+1))
		first, got, err := RewriteSums(bs, int64(len(data)), off, p, read(data), memSums(sums))
		if err != nil {
			t.Fatalf("rewrite %d bytes at %d: %v", len(p), off, err)
		}
		after := bytes.Clone(data)
		copy(after[off:], p)
		want := summed(after, bs, bs)
		if first != off/bs || fmt.Sprint(got) != fmt.Sprint(want[first:first+int64(len(got))]) || first+int64(len(got)) != (off+int64(len(p))-1)/bs+1 {
			t.Fatalf("rewrite %d bytes at %d: blocks from %d: %x, want from %d: %x", len(p), off, first, got, off/bs, want[off/bs:])
		}
	}
	// Writing part of a damaged block is refused; writing all of it is a
	// repair.
	disk := bytes.Clone(data)
	disk[2*bs+5] ^= 1
	if _, _, err := RewriteSums(bs, int64(len(data)), 2*bs+100, []byte("x"), read(disk), memSums(sums)); err == nil {
		t.Error("a partial rewrite of a damaged block was accepted")
	} else if be, ok := AsBlockError(err); !ok || be.Block != 2 {
		t.Errorf("partial rewrite of a damaged block: %v", err)
	}
	first, got, err := RewriteSums(bs, int64(len(data)), 2*bs, data[2*bs:3*bs], read(disk), memSums(sums))
	if err != nil || first != 2 || len(got) != 1 || got[0] != sums[2] {
		t.Errorf("rewriting a damaged block whole: %d %x %v, want block 2 = %08x", first, got, err, sums[2])
	}
	if _, _, err := RewriteSums(bs, int64(len(data)), int64(len(data))-1, []byte("ab"), read(data), memSums(sums)); err == nil {
		t.Error("a rewrite past the end was accepted")
	}
}

// BenchmarkBlockSums measures summing and verified reading per block
// size (the choice of BlockSize, docs/DESIGN-NOTES.md).
func BenchmarkBlockSums(b *testing.B) {
	data := randData(9, 16<<20)
	for _, bs := range []int{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("sum/%dk", bs>>10), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			cpu := cputime.Start()
			for b.Loop() {
				s := NewBlockSummer(bs)
				for off := 0; off < len(data); off += 1 << 20 {
					s.Write(data[off : off+1<<20])
				}
			}
			cpu.Report(b, int64(len(data)))
		})
		sums := summed(data, bs, 1<<20)
		r := &BlockReader{R: bytes.NewReader(data), Len: int64(len(data)), Size: bs, Sums: memSums(sums)}
		for _, read := range []int{4 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("read%dk/%dk", read>>10, bs>>10), func(b *testing.B) {
				p := make([]byte, read)
				rng := rand.New(rand.NewPCG(1, 1))
				b.SetBytes(int64(read))
				for b.Loop() {
					off := rng.Int64N(int64(len(data)-read)) &^ 4095
					if _, err := r.ReadAt(p, off); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

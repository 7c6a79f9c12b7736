package checksum

import (
	"math/rand/v2"
	"testing"
)

// TestCRC32CCombine: the combination of the parts' crc32c is the crc32c
// of the concatenation, for empty parts, parts of one byte, around
// powers of two and of a stripe unit, chained over many parts.
func TestCRC32CCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	buf := make([]byte, 3<<20)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, a := range []int{0, 1, 3, 4096, 1 << 20} {
		for _, b := range []int{0, 1, 2, 63, 4096, 4100, 1<<20 + 4, 2<<20 - 1} {
			got := CRC32CCombine(CRC32CSum(buf[:a]), CRC32CSum(buf[a:a+b]), CRC32CShift(int64(b)))
			if want := CRC32CSum(buf[:a+b]); got != want {
				t.Fatalf("a=%d b=%d: %08x want %08x", a, b, got, want)
			}
		}
	}
	var crc uint32
	off := 0
	for off < len(buf) {
		n := min(len(buf)-off, rng.IntN(70000))
		crc = CRC32CCombine(crc, CRC32CSum(buf[off:off+n]), CRC32CShift(int64(n)))
		off += n
	}
	if want := CRC32CSum(buf); crc != want {
		t.Fatalf("chained: %08x want %08x", crc, want)
	}
}

// TestBlockSummerCRC32C: the crc32c a BlockSummer folds from its blocks
// is that of the stream, at and between block boundaries.
func TestBlockSummerCRC32C(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	buf := make([]byte, 5*MinBlockSize+77)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	s := NewBlockSummer(MinBlockSize)
	if s.CRC32C() != 0 {
		t.Fatal("empty stream: crc32c not 0")
	}
	for off := 0; off < len(buf); {
		n := min(len(buf)-off, 1+rng.IntN(2*MinBlockSize))
		if rng.IntN(3) == 0 {
			n = min(len(buf)-off, MinBlockSize-off%MinBlockSize)
		}
		s.Write(buf[off : off+n])
		off += n
		if got, want := s.CRC32C(), CRC32CSum(buf[:off]); got != want {
			t.Fatalf("after %d bytes: %08x want %08x", off, got, want)
		}
	}
}

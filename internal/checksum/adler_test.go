package checksum

import (
	stdadler "hash/adler32"
	"math/rand/v2"
	"testing"

	"github.com/kaon-storage/kaon/internal/bench/cputime"
)

func TestAdlerMatchesStdlib(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 5552, 32767, 32768, 32769, 100000, 1 << 20} {
		for _, fill := range []string{"rand", "ff"} {
			b := make([]byte, n)
			for i := range b {
				if fill == "ff" {
					b[i] = 0xff
				} else {
					b[i] = byte(rng.Uint32())
				}
			}
			d := newAdler32()
			d.Write(b)
			if got, want := d.Sum32(), stdadler.Checksum(b); got != want {
				t.Fatalf("n=%d fill=%s: got %08x want %08x", n, fill, got, want)
			}
		}
	}
}

// TestAdlerVectorMatchesStdlib covers the lengths and alignments where the
// vector path (adlerUpdate on amd64 with AVX2) hands over to the generic
// one: around multiples of 64 bytes, around its 1 MiB block, at every
// offset of a 64-byte line, streamed in uneven pieces, and with all-0xff
// bytes (the largest lane sums). The generic version is checked too.
func TestAdlerVectorMatchesStdlib(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 3<<20+200)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	ff := make([]byte, len(buf))
	for i := range ff {
		ff[i] = 0xff
	}
	lengths := []int{63, 64, 65, 127, 128, 129, 191, 4096, 4097, 1<<20 - 1, 1 << 20, 1<<20 + 1, 1<<20 + 64, 3 << 20}
	for _, src := range [][]byte{buf, ff} {
		for _, n := range lengths {
			for _, off := range []int{0, 1, 31, 33, 63} {
				b := src[off : off+n]
				want := stdadler.Checksum(b)
				s1, s2 := adlerUpdate(1, 0, b)
				if got := s2<<16 | s1; got != want {
					t.Fatalf("adlerUpdate n=%d off=%d ff=%v: got %08x want %08x", n, off, src[0] == 0xff, got, want)
				}
				g1, g2 := adlerGeneric(1, 0, b)
				if got := g2<<16 | g1; got != want {
					t.Fatalf("adlerGeneric n=%d off=%d: got %08x want %08x", n, off, got, want)
				}
			}
		}
		// Streamed in pieces of uneven sizes, the state carried over.
		d := newAdler32()
		for p, step := src[:2<<20+77], 1; len(p) > 0; step = step*7 + 13 {
			c := min(len(p), step%300000)
			d.Write(p[:c])
			p = p[c:]
		}
		if got, want := d.Sum32(), stdadler.Checksum(src[:2<<20+77]); got != want {
			t.Fatalf("streamed: got %08x want %08x", got, want)
		}
	}
}

func FuzzAdler(f *testing.F) {
	f.Add([]byte("hello world\n"), uint16(3))
	f.Add(make([]byte, 70000), uint16(9))
	f.Fuzz(func(t *testing.T, b []byte, split uint16) {
		// Split the input to exercise the streaming state as well.
		s := int(split) % (len(b) + 1)
		d := newAdler32()
		d.Write(b[:s])
		d.Write(b[s:])
		if got, want := d.Sum32(), stdadler.Checksum(b); got != want {
			t.Fatalf("len=%d split=%d: got %08x want %08x", len(b), s, got, want)
		}
	})
}

func BenchmarkAdler32(b *testing.B) {
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	b.Run("kaon", func(b *testing.B) {
		d := newAdler32()
		b.SetBytes(int64(len(buf)))
		cpu := cputime.Start()
		for b.Loop() {
			d.Write(buf)
		}
		cpu.Report(b, int64(int64(len(buf))))
	})
	b.Run("generic", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		cpu := cputime.Start()
		var s1, s2 uint32 = 1, 0
		for b.Loop() {
			s1, s2 = adlerGeneric(s1, s2, buf)
		}
		cpu.Report(b, int64(int64(len(buf))))
	})
	b.Run("stdlib", func(b *testing.B) {
		d := stdadler.New()
		b.SetBytes(int64(len(buf)))
		cpu := cputime.Start()
		for b.Loop() {
			d.Write(buf)
		}
		cpu.Report(b, int64(int64(len(buf))))
	})
}

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

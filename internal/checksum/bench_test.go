package checksum

import (
	"testing"

	"github.com/kaon-storage/kaon/internal/bench/cputime"
)

const benchBlock = 1 << 20 // typical network/disk block on the data path

func benchBuf() []byte {
	b := make([]byte, benchBlock)
	for i := range b {
		b[i] = byte(i*131 + i>>9)
	}
	return b
}

func BenchmarkSum(b *testing.B) {
	buf := benchBuf()
	for _, typ := range Types {
		b.Run(typ, func(b *testing.B) {
			h, _ := New(typ)
			b.SetBytes(benchBlock)
			cpu := cputime.Start()
			for b.Loop() {
				h.Write(buf)
			}
			cpu.Report(b, int64(benchBlock))
		})
	}
}

// BenchmarkMulti is one stream through the default set.
func BenchmarkMulti(b *testing.B) {
	buf := benchBuf()
	m, _ := NewMulti()
	b.SetBytes(benchBlock)
	cpu := cputime.Start()
	for b.Loop() {
		m.Write(buf)
	}
	cpu.Report(b, int64(benchBlock))
}

// BenchmarkMultiParallel runs one stream per GOMAXPROCS (a loaded
// server) with and without Multi's two-goroutine split, and one stream
// with and without it.
func BenchmarkMultiParallel(b *testing.B) {
	for _, par := range []bool{false, true} {
		name := map[bool]string{false: "sequential", true: "split"}[par]
		b.Run(name+"/loaded", func(b *testing.B) {
			b.SetBytes(benchBlock)
			cpu := cputime.Start()
			defer cpu.Report(b, benchBlock)
			b.RunParallel(func(pb *testing.PB) {
				buf := benchBuf()
				m, _ := NewMulti()
				m.SetParallel(par)
				for pb.Next() {
					m.Write(buf)
				}
			})
		})
		b.Run(name+"/single", func(b *testing.B) {
			buf := benchBuf()
			m, _ := NewMulti()
			m.SetParallel(par)
			b.SetBytes(benchBlock)
			cpu := cputime.Start()
			for b.Loop() {
				m.Write(buf)
			}
			cpu.Report(b, int64(benchBlock))
		})
	}
}

package erasure

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/checksum"

	"github.com/kaon-storage/kaon/internal/bench/cputime"
)

var benchLayouts = []Layout{{4, 2, DefaultUnit}, {8, 2, DefaultUnit}, {16, 2, DefaultUnit}}

// BenchmarkEncode streams rows through a Writer into io.Discard shards in
// 1 MiB writes; MB/s counts logical (file) bytes.
func BenchmarkEncode(b *testing.B) {
	for _, l := range benchLayouts {
		b.Run(l.String(), func(b *testing.B) {
			chunk := randBytes(1, 1<<20)
			ws := make([]io.Writer, l.Shards())
			for i := range ws {
				ws[i] = io.Discard
			}
			w, err := NewWriter(l, ws)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(l.RowSize())
			cpu := cputime.Start()
			for b.Loop() {
				for range l.K {
					w.Write(chunk)
				}
			}
			cpu.Report(b, int64(l.RowSize()))
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkDecode streams a 4-row file from in-memory shards with
// WriteRange, healthy and with M data shards missing (reconstruction on
// every row).
func BenchmarkDecode(b *testing.B) {
	for _, l := range benchLayouts {
		size := 4 * l.RowSize()
		shards := encode(b, l, randBytes(2, size))
		for _, missing := range []int{0, l.M} {
			b.Run(fmt.Sprintf("%v/missing=%d", l, missing), func(b *testing.B) {
				rs := make([]ShardReader, l.Shards())
				for i := range rs {
					if i >= missing {
						rs[i] = bytes.NewReader(shards[i])
					}
				}
				r, err := NewReader(l, size, rs)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(size)
				cpu := cputime.Start()
				for b.Loop() {
					if n, err := r.WriteRange(io.Discard, 0, size); err != nil || n != size {
						b.Fatal(n, err)
					}
				}
				cpu.Report(b, int64(size))
			})
		}
	}
}

// BenchmarkReadAtSequential reads a file in 128 KiB ReadAt calls (FUSE
// style), which the row cache and read-ahead serve.
func BenchmarkReadAtSequential(b *testing.B) {
	l := Layout{4, 2, DefaultUnit}
	size := 4 * l.RowSize()
	shards := encode(b, l, randBytes(3, size))
	r, _ := NewReader(l, size, readers(l, shards, nil))
	p := make([]byte, 128<<10)
	b.SetBytes(size)
	cpu := cputime.Start()
	for b.Loop() {
		for off := int64(0); off < size; off += int64(len(p)) {
			if _, err := r.ReadAt(p, off); err != nil {
				b.Fatal(err)
			}
		}
	}
	cpu.Report(b, int64(size))
}

// inlineEncode is the single-goroutine baseline the pipelined Writer is
// measured against: copy a row, encode, crc, write each frame in turn.
func inlineEncode(l Layout, shards []io.Writer, data []byte) error {
	enc, _ := encoderFor(l)
	frames := make([][]byte, l.Shards())
	views := make([][]byte, l.Shards())
	for i := range frames {
		frames[i] = make([]byte, l.FrameSize())
		views[i] = frames[i][:l.Unit]
	}
	for len(data) > 0 {
		for j := range l.K {
			c := copy(views[j], data)
			clear(views[j][c:])
			data = data[c:]
		}
		if err := enc.Encode(views); err != nil {
			return err
		}
		for i, f := range frames {
			binary.LittleEndian.PutUint32(f[l.Unit:], checksum.CRC32CSum(views[i]))
			if _, err := shards[i].Write(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// slowShard models a remote shard: each frame write costs a round trip.
type slowShard struct{ d time.Duration }

func (s slowShard) Write(p []byte) (int, error) { time.Sleep(s.d); return len(p), nil }

// BenchmarkEncodePipeline compares the Writer with the inline baseline,
// on io.Discard shards and on shards with 1 ms per frame write.
func BenchmarkEncodePipeline(b *testing.B) {
	l := Layout{4, 2, DefaultUnit}
	data := randBytes(4, 4*l.RowSize())
	for _, delay := range []time.Duration{0, time.Millisecond} {
		ws := make([]io.Writer, l.Shards())
		for i := range ws {
			ws[i] = io.Discard
			if delay > 0 {
				ws[i] = slowShard{delay}
			}
		}
		b.Run(fmt.Sprintf("writer/delay=%v", delay), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			cpu := cputime.Start()
			for b.Loop() {
				w, _ := NewWriter(l, ws)
				for off := 0; off < len(data); off += 1 << 20 {
					w.Write(data[off : off+1<<20])
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
			cpu.Report(b, int64(len(data)))
		})
		b.Run(fmt.Sprintf("inline/delay=%v", delay), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			cpu := cputime.Start()
			for b.Loop() {
				if err := inlineEncode(l, ws, data); err != nil {
					b.Fatal(err)
				}
			}
			cpu.Report(b, int64(len(data)))
		})
	}
}

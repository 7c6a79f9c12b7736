package erasure

import (
	"bytes"
	"fmt"
	"io"
	"testing"
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
			for b.Loop() {
				for range l.K {
					w.Write(chunk)
				}
			}
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
				for b.Loop() {
					if n, err := r.WriteRange(io.Discard, 0, size); err != nil || n != size {
						b.Fatal(n, err)
					}
				}
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
	for b.Loop() {
		for off := int64(0); off < size; off += int64(len(p)) {
			if _, err := r.ReadAt(p, off); err != nil {
				b.Fatal(err)
			}
		}
	}
}

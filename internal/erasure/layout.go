// Package erasure stripes a file Reed-Solomon (K data + M parity shards)
// over several filesystems and reads it back, reconstructing lost or
// corrupt pieces. It is a thin layer over klauspost/reedsolomon.
//
// # Shard file format
//
// The logical file is cut into rows of K*Unit bytes. Row r's bytes
// [j*Unit, (j+1)*Unit) go to data shard j (0 <= j < K); shards K..K+M-1
// hold the Reed-Solomon parity of the row. Every shard is a plain sequence
// of frames, one per row:
//
//	frame := data[Unit] crc32c(data) as 4 bytes little-endian
//
// so row r lives at byte offset r*(Unit+4) in every shard. The last row is
// zero-padded to K*Unit before encoding. A file of logical size S has
// ceil(S / (K*Unit)) rows (none for an empty file) and every shard is
// rows*(Unit+4) bytes long. The logical size is not stored in the shards:
// the caller keeps it (namespace, xattr) and passes it to the Reader.
//
// The per-frame CRC turns silent corruption into an erasure the code can
// repair, and lets a scrubber name the broken shard without decoding.
package erasure

import (
	"fmt"
	"github.com/kaon-storage/kaon/internal/bufmem"
	"sync"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/klauspost/reedsolomon"
)

// Limits of a Layout (package layout's, checked again for callers that
// build one by hand).
const (
	DefaultUnit = layout.DefaultUnit
	MinUnit     = layout.MinUnit
	MaxUnit     = layout.MaxUnit
	MaxShards   = layout.MaxStripes
	crcSize     = 4 // bytes of crc32c after each frame
)

// Layout describes an ec:K+M stripe.
type Layout struct {
	K, M int // data and parity shards
	Unit int // stripe unit in bytes (data bytes per frame)
}

// FromLayout is the geometry of an erasure-coded layout (package layout
// owns the grammar; this package only codes).
func FromLayout(l layout.Layout) Layout { return Layout{K: l.K, M: l.M, Unit: l.Unit} }

// StripeSize is the length one stripe of a file of logical size size
// has on disk in layout l: the file itself for plain and replica
// layouts, the frames of its rows for an erasure-coded stripe.
func StripeSize(l layout.Layout, size int64) int64 {
	if l.Kind == layout.EC {
		return FromLayout(l).ShardSize(size)
	}
	return size
}

func (l Layout) check() error {
	switch {
	case l.K < 1:
		return fmt.Errorf("data shards (K) must be at least 1")
	case l.M < 1:
		return fmt.Errorf("parity shards (M) must be at least 1")
	case l.K+l.M > MaxShards:
		return fmt.Errorf("K+M must be at most %d", MaxShards)
	case l.Unit < MinUnit || l.Unit > MaxUnit:
		return fmt.Errorf("stripe unit must be between %d and %d bytes", MinUnit, MaxUnit)
	case l.Unit%64 != 0:
		return fmt.Errorf("stripe unit must be a multiple of 64 bytes")
	}
	return nil
}

// Validate reports whether l is usable, as a kerr.Invalid error.
func (l Layout) Validate() error {
	if err := l.check(); err != nil {
		return kerr.New(kerr.Invalid, "layout", l.String(), err.Error())
	}
	return nil
}

// String is the layout in package layout's grammar, for messages.
func (l Layout) String() string {
	return layout.Layout{Kind: layout.EC, K: l.K, M: l.M, Unit: l.Unit}.String()
}

// Shards is K+M.
func (l Layout) Shards() int { return l.K + l.M }

// RowSize is the number of logical bytes per row (K*Unit).
func (l Layout) RowSize() int64 { return int64(l.K) * int64(l.Unit) }

// FrameSize is the number of shard bytes per row (Unit+4).
func (l Layout) FrameSize() int64 { return int64(l.Unit) + crcSize }

// Rows is the number of rows a file of logical size size occupies.
func (l Layout) Rows(size int64) int64 {
	if size <= 0 {
		return 0
	}
	return (size + l.RowSize() - 1) / l.RowSize()
}

// ShardSize is the length of every shard file for a logical size.
func (l Layout) ShardSize(size int64) int64 { return l.Rows(size) * l.FrameSize() }

// encoders caches one Reed-Solomon codec per (K, M); codecs are safe for
// concurrent use and keep a cache of inverted matrices worth sharing.
var encoders sync.Map // [2]int -> reedsolomon.Encoder

func encoderFor(l Layout) (reedsolomon.Encoder, error) {
	key := [2]int{l.K, l.M}
	if e, ok := encoders.Load(key); ok {
		return e.(reedsolomon.Encoder), nil
	}
	e, err := reedsolomon.New(l.K, l.M)
	if err != nil {
		return nil, kerr.Wrap(kerr.Invalid, "layout", l.String(), err)
	}
	actual, _ := encoders.LoadOrStore(key, e)
	return actual.(reedsolomon.Encoder), nil
}

// Frame buffers (Unit+4 bytes) are recycled per unit size, so that
// opening many files does not churn tens of MiB of garbage each; bufmem
// counts them against the stream budget.
func getFrame(unit int) []byte { return bufmem.Sized(unit + crcSize).Get() }

func putFrame(unit int, b []byte) { bufmem.Sized(unit + crcSize).Put(b) }

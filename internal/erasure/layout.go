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
	"strconv"
	"strings"
	"sync"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/klauspost/reedsolomon"
)

// Limits of a Layout.
const (
	DefaultUnit = 1 << 20  // stripe unit when a layout names none
	MinUnit     = 4 << 10  // smallest stripe unit
	MaxUnit     = 64 << 20 // largest stripe unit
	MaxShards   = 32       // K+M upper bound: wider stripes only add fan-out
	crcSize     = 4        // bytes of crc32c after each frame
)

// Layout describes an ec:K+M stripe.
type Layout struct {
	K, M int // data and parity shards
	Unit int // stripe unit in bytes (data bytes per frame)
}

// ParseLayout parses "ec:K+M" or "ec:K+M:UNIT" where UNIT is a byte count
// with an optional binary suffix (k, K, KiB, m, M, MiB): "ec:4+2",
// "ec:8+2:1M", "ec:4+2:65536".
func ParseLayout(s string) (Layout, error) {
	bad := func(msg string) (Layout, error) {
		return Layout{}, kerr.New(kerr.Invalid, "parse layout", s, msg)
	}
	rest, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(s)), "ec:")
	if !ok {
		return bad("want ec:K+M[:unit]")
	}
	km, unit, hasUnit := strings.Cut(rest, ":")
	ks, ms, ok := strings.Cut(km, "+")
	if !ok {
		return bad("want ec:K+M[:unit]")
	}
	k, err1 := strconv.Atoi(ks)
	m, err2 := strconv.Atoi(ms)
	if err1 != nil || err2 != nil {
		return bad("K and M must be integers")
	}
	l := Layout{K: k, M: m, Unit: DefaultUnit}
	if hasUnit {
		u, err := parseSize(unit)
		if err != nil {
			return bad("bad stripe unit " + strconv.Quote(unit))
		}
		l.Unit = u
	}
	if err := l.check(); err != nil {
		return bad(err.Error())
	}
	return l, nil
}

func parseSize(s string) (int, error) {
	mult := 1
	for _, suf := range []struct {
		s string
		m int
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"k", 1 << 10}, {"m", 1 << 20}} {
		if t, ok := strings.CutSuffix(s, suf.s); ok {
			s, mult = t, suf.m
			break
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > MaxUnit/mult+1 {
		return 0, fmt.Errorf("bad size")
	}
	return n * mult, nil
}

func (l Layout) check() error {
	switch {
	case l.K < 1:
		return fmt.Errorf("K must be at least 1")
	case l.M < 1:
		return fmt.Errorf("M must be at least 1")
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

// String renders l so that ParseLayout(l.String()) == l; the unit is
// omitted when it is DefaultUnit.
func (l Layout) String() string {
	s := fmt.Sprintf("ec:%d+%d", l.K, l.M)
	switch {
	case l.Unit == DefaultUnit:
		return s
	case l.Unit > 0 && l.Unit%(1<<20) == 0:
		return fmt.Sprintf("%s:%dM", s, l.Unit>>20)
	case l.Unit > 0 && l.Unit%(1<<10) == 0:
		return fmt.Sprintf("%s:%dK", s, l.Unit>>10)
	}
	return fmt.Sprintf("%s:%d", s, l.Unit)
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

// framePools recycle frame buffers (Unit+4 bytes) per unit size, so that
// opening many files does not churn tens of MiB of garbage each.
var framePools sync.Map // int -> *sync.Pool

func getFrame(unit int) []byte {
	p, _ := framePools.LoadOrStore(unit, &sync.Pool{})
	if b, ok := p.(*sync.Pool).Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, unit+crcSize)
}

func putFrame(unit int, b []byte) {
	if cap(b) < unit+crcSize {
		return
	}
	b = b[:unit+crcSize]
	p, _ := framePools.LoadOrStore(unit, &sync.Pool{})
	p.(*sync.Pool).Put(&b)
}

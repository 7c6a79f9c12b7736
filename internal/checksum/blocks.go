package checksum

// Block checksums: the crc32c of every fixed-size block of a stripe, kept
// beside the stripe by its store (backend/posix: a trailer after the
// data, format.go there), so that every read verifies each block it
// returns and a block that rotted on disk is refused and named instead of
// served (as BlueStore's per-block crc32c and MinIO's bitrot protection).
// Erasure-coded stripes need none: each of their frames carries its own
// crc32c (package erasure).
//
// This file is the arithmetic the stores share: summing blocks as bytes
// stream (BlockSummer), verifying blocks read back (VerifyBlocks,
// BlockReader), and recomputing only the blocks a rewrite of a range
// touches (RewriteSums), which is how a block is repaired in place and
// how a stripe can be updated in place.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
)

// BlockSize is the block size new stripes are summed with (64 KiB: see
// docs/DESIGN-NOTES.md for the measurement that chose it). The size is
// recorded with every stripe's sums, so stripes summed with another size
// stay readable.
const BlockSize = 64 << 10

// MinBlockSize and MaxBlockSize bound the block sizes a stored table may
// name (a table naming another is not believed).
const (
	MinBlockSize = 4 << 10
	MaxBlockSize = 16 << 20
)

// Blocks is the number of blocks of size bs that n bytes occupy.
func Blocks(n int64, bs int) int64 {
	if n <= 0 {
		return 0
	}
	return (n + int64(bs) - 1) / int64(bs)
}

// BlockSummer computes the crc32c of every block of a stream.
type BlockSummer struct {
	bs    int
	sums  []uint32
	cur   uint32 // crc of the bytes of the unfinished block
	n     int    // bytes in the unfinished block
	len   int64
	whole uint32 // crc32c of the finished blocks, folded (CRC32C)
	shift uint32 // CRC32CShift(bs)
}

// NewBlockSummer sums blocks of bs bytes.
func NewBlockSummer(bs int) *BlockSummer {
	return &BlockSummer{bs: bs, shift: CRC32CShift(int64(bs))}
}

// CRC32C is the crc32c of the whole stream so far, folded from the
// blocks' (no second pass over the bytes).
func (s *BlockSummer) CRC32C() uint32 {
	if s.n > 0 {
		return CRC32CCombine(s.whole, s.cur, CRC32CShift(int64(s.n)))
	}
	return s.whole
}

// Write adds p to the stream; it never fails.
func (s *BlockSummer) Write(p []byte) (int, error) {
	total := len(p)
	s.len += int64(total)
	for len(p) > 0 {
		take := min(len(p), s.bs-s.n)
		s.cur = crc32Update(s.cur, p[:take])
		s.n += take
		p = p[take:]
		if s.n == s.bs {
			s.sums = append(s.sums, s.cur)
			s.whole = CRC32CCombine(s.whole, s.cur, s.shift)
			s.cur, s.n = 0, 0
		}
	}
	return total, nil
}

// Len is the number of bytes written.
func (s *BlockSummer) Len() int64 { return s.len }

// Sums returns the crc32c of every block so far, the last one short if
// the stream does not end on a block boundary.
func (s *BlockSummer) Sums() []uint32 {
	if s.n > 0 {
		return append(s.sums[:len(s.sums):len(s.sums)], s.cur)
	}
	return s.sums
}

// BlockError is a block that failed verification: its bytes on disk are
// not those it was summed with.
type BlockError struct {
	Block     int64 // index
	Off, Len  int64 // its bytes in the stripe
	Got, Want uint32
}

func (e *BlockError) Error() string {
	return fmt.Sprintf("block %d (bytes %d-%d) fails its crc32c: %08x on disk, %08x recorded", e.Block, e.Off, e.Off+e.Len-1, e.Got, e.Want)
}

// AsBlockError returns the BlockError err wraps, if any.
func AsBlockError(err error) (*BlockError, bool) {
	var be *BlockError
	ok := errors.As(err, &be)
	return be, ok
}

// VerifyBlocks checks p, the bytes of consecutive blocks from block first
// on (p starts at that block's first byte; only its last block may be
// short, and only if it is the stripe's last), against sums (sums[0] is
// block first's). It returns how many bytes of p verified before the
// first bad block, and that block's BlockError.
func VerifyBlocks(p []byte, first int64, bs int, sums []uint32) (int, error) {
	for i, off := 0, 0; off < len(p); i, off = i+1, off+bs {
		end := min(off+bs, len(p))
		if i >= len(sums) {
			return off, fmt.Errorf("no checksum for block %d", first+int64(i))
		}
		if got := CRC32CSum(p[off:end]); got != sums[i] {
			b := first + int64(i)
			return off, &BlockError{Block: b, Off: b * int64(bs), Len: int64(end - off), Got: got, Want: sums[i]}
		}
	}
	return len(p), nil
}

// SumsFunc returns the recorded sums of blocks first to first+n-1.
type SumsFunc func(first, n int64) ([]uint32, error)

// BlockReader reads the data of a stripe, verifying every block it
// returns against the recorded sums: it never returns a byte of a block
// that failed (ReadAt stops before it with a *BlockError). A read that is
// not block-aligned reads its first and last blocks whole. It is safe for
// concurrent use when R and Sums are.
type BlockReader struct {
	R    io.ReaderAt // the stripe's bytes
	Len  int64       // length of the data (the sums cover [0, Len))
	Size int         // block size
	Sums SumsFunc
}

// edgeBufs hold the partial blocks of unaligned reads.
var edgeBufs sync.Pool

func getEdge(n int) *[]byte {
	if b, ok := edgeBufs.Get().(*[]byte); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n)
	return &b
}

func (r *BlockReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= r.Len {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), r.Len)
	bs := int64(r.Size)
	n := 0
	fail := func(err error) (int, error) {
		clear(p[n:])
		return n, err
	}
	for pos := off; pos < end; {
		b := pos / bs
		bstart, bend := b*bs, min((b+1)*bs, r.Len)
		if pos == bstart && bend <= end {
			// Whole blocks straight into p, as many as fit.
			last := (end - bstart) / bs // whole blocks
			stop := bstart + last*bs
			if end == r.Len && stop < end {
				stop = end // the stripe's short last block
			}
			dst := p[n : n+int(stop-pos)]
			if err := r.read(dst, pos); err != nil {
				return fail(err)
			}
			sums, err := r.Sums(b, Blocks(stop-pos, r.Size))
			if err != nil {
				return fail(err)
			}
			m, err := VerifyBlocks(dst, b, r.Size, sums)
			n += m
			if err != nil {
				return fail(err)
			}
			pos = stop
			continue
		}
		// A block p holds only part of: read it whole.
		bp := getEdge(int(bend - bstart))
		blk := *bp
		err := r.read(blk, bstart)
		var sums []uint32
		if err == nil {
			sums, err = r.Sums(b, 1)
		}
		if err == nil {
			_, err = VerifyBlocks(blk, b, r.Size, sums)
		}
		if err != nil {
			edgeBufs.Put(bp)
			return fail(err)
		}
		m := copy(p[n:], blk[pos-bstart:min(bend, end)-bstart])
		edgeBufs.Put(bp)
		n += m
		pos += int64(m)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// read fills p from off; the data ending early is an error (the stripe is
// shorter than its sums say).
func (r *BlockReader) read(p []byte, off int64) error {
	m, err := r.R.ReadAt(p, off)
	if m == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("reading bytes %d-%d: %w", off, off+int64(len(p))-1, err)
}

// RewriteSums computes the sums of the blocks that writing p at off
// changes, in a stripe of dataLen bytes summed in blocks of bs: blocks p
// covers whole are summed from p alone; a block p covers only in part
// is read whole (read(b, off) fills b from the stripe) and verified
// against its recorded sum (old) before p is laid over it, so a block
// damaged outside the range is refused, never summed again with its
// damage. It returns the first block changed and the new sums of that
// block and the following ones; the caller writes p and those sums.
// [off, off+len(p)) must lie within the data.
func RewriteSums(bs int, dataLen, off int64, p []byte, read func(b []byte, off int64) error, old SumsFunc) (int64, []uint32, error) {
	end := off + int64(len(p))
	if off < 0 || end > dataLen {
		return 0, nil, fmt.Errorf("range %d-%d is outside the stripe's %d bytes", off, end-1, dataLen)
	}
	if len(p) == 0 {
		return 0, nil, nil
	}
	b64 := int64(bs)
	first, last := off/b64, (end-1)/b64
	sums := make([]uint32, 0, last-first+1)
	for b := first; b <= last; b++ {
		bstart, bend := b*b64, min((b+1)*b64, dataLen)
		if off <= bstart && end >= bend {
			sums = append(sums, CRC32CSum(p[bstart-off:bend-off]))
			continue
		}
		blk := make([]byte, bend-bstart)
		if err := read(blk, bstart); err != nil {
			return 0, nil, fmt.Errorf("block %d: %w", b, err)
		}
		want, err := old(b, 1)
		if err != nil {
			return 0, nil, err
		}
		if _, err := VerifyBlocks(blk, b, bs, want); err != nil {
			return 0, nil, err
		}
		lo, hi := max(off, bstart), min(end, bend)
		copy(blk[lo-bstart:hi-bstart], p[lo-off:hi-off])
		sums = append(sums, CRC32CSum(blk))
	}
	return first, sums, nil
}

// PutSums encodes sums as the little-endian words tables store.
func PutSums(sums []uint32) []byte {
	b := make([]byte, 4*len(sums))
	for i, s := range sums {
		binary.LittleEndian.PutUint32(b[4*i:], s)
	}
	return b
}

// ParseSums decodes little-endian words.
func ParseSums(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

func crc32Update(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }

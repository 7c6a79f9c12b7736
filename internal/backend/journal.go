package backend

// In-place updates of a stripe (files that change, issue 22).
//
// A committed stripe changes only through a journal: the update's
// operations (writes at offsets, truncations) are first stored durably
// beside the stripe, with the version the stripe must be at and the
// metadata it will have (Prepare), without touching the stripe. Only
// once the namespace recorded the file's new data version does the
// storage server roll the journal forward (Apply: the operations in
// order, then the metadata, then the journal removed); if the namespace
// did not, the journal is dropped (Discard). A crash anywhere leaves
// either the stripe as it was (journal absent, or prepared and not yet
// decided) or a journal that replays to the same end however often it
// runs (operations are absolute writes and truncations in order, so a
// partial apply replayed gives what one full apply gives): each range is
// all-old or all-new, and the stripe's metadata version says which.
//
// Operations (EncodeOps, ReadOps) are a byte stream, so a journal is
// built on disk while an update session runs and sent to peers as a
// request body:
//
//	op := 'W' offset(8) length(4) data[length]   write at offset
//	    | 'T' size(8)                             truncate to size
//
// integers big-endian.
//
// Block sums: a stripe that carries the crc32c of its blocks (backend.go,
// Bitrot) keeps them current through an update. Before an apply changes
// anything, the blocks the operations touch and whose old bytes partly
// stay (TouchedBlocks, Verify) are verified against their sums, so that
// an update never blesses a block that rotted; after it, only the
// touched blocks (those written, and those whose length changed: the old
// and the new last block, a hole's blocks) are summed again from the new
// bytes, the others keep their sums (Touched.Sums). A block that fails
// that verification fails the apply (kerr.IO naming it): the stripe
// keeps its content and version, and the update marks it stale, to be
// rebuilt from a current copy.

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"

	"github.com/kaon-storage/kaon/internal/checksum"
)

// Updater is implemented by stores whose stripes can be changed in place
// (posix, memstore); updating a file with a stripe on another store is
// refused as unsupported.
type Updater interface {
	// Prepare stores an update of stripe fid durably beside it, leaving
	// the stripe as it is: the operations ops delivers (until io.EOF),
	// to be applied when the stripe is at version h.From, after which it
	// has metadata h.Meta. It replaces an update of fid prepared before.
	Prepare(fid uint64, h JournalHead, ops io.Reader) error
	// Prepared is the head of the update of fid prepared here
	// (kerr.NotFound when there is none).
	Prepared(fid uint64) (JournalHead, error)
	// Apply rolls the prepared update of fid forward and removes it. A
	// stripe already at h.Meta.Version only loses the journal; one at
	// neither version keeps its content, loses the journal, and Apply
	// fails with kerr.IO (the stripe is stale). kerr.NotFound: no
	// update is prepared.
	Apply(fid uint64) error
	// Discard drops the prepared update of fid (nil when there is none).
	Discard(fid uint64) error
}

// JournalHead says what a prepared update is.
type JournalHead struct {
	From uint64 // data version the stripe must be at
	Meta Meta   // the stripe's metadata once applied (its Version is the new one)
	// Extends says that the update only extends the stripe: every
	// operation writes at or past the stripe's data length at From (the
	// committed size of a replica) and none truncates — an append. A
	// store may then write the data straight into the stripe past its
	// committed end, where no reader looks, and keep a journal of the
	// new length alone (posix does, refusing operations that break the
	// promise: kerr.Invalid). Other stores apply it as any update.
	Extends bool `json:",omitempty"`
	// Tag names the commit the journal belongs to (the tag the session
	// records with the namespace) and At when it was prepared (Unix
	// nanoseconds, the stripe server's clock): a journal of another
	// commit over the same version is never replaced while it may still
	// be applied (storage's prepare). Zero in journals of older servers.
	Tag uint64 `json:",omitempty"`
	At  int64  `json:",omitempty"`
}

// Buffer is a stripe's bytes in memory, as operations apply to them
// (ReplayOps): memstore's stripes, and tests' models of acknowledged
// writes.
type Buffer struct{ B []byte }

func (m *Buffer) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.B)) {
		m.B = append(m.B, make([]byte, end-int64(len(m.B)))...)
	}
	return copy(m.B[off:], p), nil
}

func (m *Buffer) Truncate(size int64) error {
	if size <= int64(len(m.B)) {
		m.B = m.B[:size]
	} else {
		m.B = append(m.B, make([]byte, size-int64(len(m.B)))...)
	}
	return nil
}

// Op kinds.
const (
	opWrite    = 'W'
	opTruncate = 'T'
)

// castagnoliTable sums blocks (Touched.Overwrite).
var castagnoliTable = crc32.MakeTable(crc32.Castagnoli)

// MaxOpData is the largest write one operation carries.
const MaxOpData = 16 << 20

// EncodeWrite appends a write of p at off to b.
func EncodeWrite(b []byte, off int64, p []byte) []byte {
	return append(EncodeWriteHeader(b, off, len(p)), p...)
}

// EncodeWriteHeader appends the start of a write of n bytes at off to b:
// the n bytes follow it.
func EncodeWriteHeader(b []byte, off int64, n int) []byte {
	b = append(b, opWrite)
	b = binary.BigEndian.AppendUint64(b, uint64(off))
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// EncodeTruncate appends a truncation to size to b.
func EncodeTruncate(b []byte, size int64) []byte {
	b = append(b, opTruncate)
	return binary.BigEndian.AppendUint64(b, uint64(size))
}

// OpTarget is what operations are applied to.
type OpTarget interface {
	WriteAt(p []byte, off int64) (int, error)
	Truncate(size int64) error
}

// ReplayOps applies the operations r delivers to t in order.
func ReplayOps(r io.Reader, t OpTarget) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var hdr [12]byte
	var buf []byte
	for {
		kind, err := br.ReadByte()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch kind {
		case opWrite:
			if _, err := io.ReadFull(br, hdr[:12]); err != nil {
				return fmt.Errorf("journal: cut off write: %w", err)
			}
			off, n := int64(binary.BigEndian.Uint64(hdr[:8])), binary.BigEndian.Uint32(hdr[8:12])
			if n > MaxOpData || off < 0 {
				return fmt.Errorf("journal: bad write of %d bytes at %d", n, off)
			}
			if cap(buf) < int(n) {
				buf = make([]byte, n)
			}
			if _, err := io.ReadFull(br, buf[:n]); err != nil {
				return fmt.Errorf("journal: cut off write: %w", err)
			}
			if _, err := t.WriteAt(buf[:n], off); err != nil {
				return err
			}
		case opTruncate:
			if _, err := io.ReadFull(br, hdr[:8]); err != nil {
				return fmt.Errorf("journal: cut off truncate: %w", err)
			}
			size := int64(binary.BigEndian.Uint64(hdr[:8]))
			if size < 0 {
				return fmt.Errorf("journal: bad truncate to %d", size)
			}
			if err := t.Truncate(size); err != nil {
				return err
			}
		default:
			return fmt.Errorf("journal: unknown operation %q", kind)
		}
	}
}

// Touched is what a journal's operations do to the blocks of a stripe.
type Touched struct {
	bs             int
	OldLen, NewLen int64            // the stripe's data length before and after
	blocks         [][2]int64       // ranges [lo, hi) of blocks whose bytes may change, merged
	covered        [][2]int64       // ranges of blocks one write overwrites whole
	keep           bool             // Verify keeps what it read (Keep)
	kept           map[int64][]byte // whole blocks Verify read, with the writes since (Patch)
	keptBytes      int64
	truncates      bool             // the operations truncate
	delta          map[int64]uint32 // Delta: per block, what its writes change of its sum
	scratch        []byte           // Overwrite's buffer: a block's changed bytes, then zeros
}

// Delta makes the full blocks the writes change in part be summed from
// the bytes the writes replace, not read and verified whole: each
// write's old bytes (Overwrite, before it is applied) are xored with its
// new ones, and crc32c being linear, the block's new sum is its old sum
// xor the raw crc of that difference followed by zeros to the block's
// end. A block's untouched bytes are then neither read nor verified, and
// no rot is blessed: a block whose bytes rotted before the update keeps
// a sum that does not match them (the old sum's mismatch carries through
// the xor), for the next read or scrub to find and repair from a copy.
// Only blocks whose length stays (full blocks below the old length) and
// only for operations without a truncation; Delta has no effect
// otherwise. For a stripe at the version before the update, whose sums
// are those of its bytes: a replay over a partly applied stripe must sum
// from the bytes (no Delta).
func (t *Touched) Delta() {
	if !t.truncates {
		t.delta = map[int64]uint32{}
	}
}

// deltaBlock says whether block b is summed by Delta.
func (t *Touched) deltaBlock(b int64) bool {
	return t.delta != nil && (b+1)*int64(t.bs) <= t.OldLen && !within(t.covered, b)
}

// Overwrite tells a Touched in Delta mode of a write of n bytes at off
// before it is applied: readOld reads the stripe's bytes there now,
// readNew the write's data (p's bytes at offset o of the data). Blocks
// Delta does not sum are left to Verify, Patch and Sums.
func (t *Touched) Overwrite(off, n int64, readOld, readNew func(p []byte, o int64) error) error {
	if t.delta == nil {
		return nil
	}
	b := int64(t.bs)
	for blk := off / b; blk*b < off+n; blk++ {
		if !t.deltaBlock(blk) {
			continue
		}
		from, to := max(off, blk*b), min(off+n, blk*b+b)
		if t.scratch == nil {
			t.scratch = make([]byte, 2*b)
		}
		old, nw := t.scratch[:to-from], t.scratch[b:b+to-from]
		if err := readOld(old, from); err != nil {
			return fmt.Errorf("block %d: %w", blk, err)
		}
		if err := readNew(nw, from-off); err != nil {
			return err
		}
		for i := range old {
			old[i] ^= nw[i]
		}
		// The difference, then zeros to the block's end: raw crc (no
		// pre- or post-inversion), so that sum(new) = sum(old) ^ it.
		tail := t.scratch[to-from : to-from+(blk*b+b-to)]
		clear(tail)
		t.delta[blk] ^= ^crc32.Update(0xffffffff, castagnoliTable, t.scratch[:blk*b+b-from])
	}
	return nil
}

// Keep makes Verify keep the whole blocks it reads (up to maxKept bytes)
// so that Sums sums them without reading them again; the caller must
// then tell each write it applies to Patch, and each truncation to
// Forget.
func (t *Touched) Keep() { t.keep = true }

// maxKept bounds the bytes of verified blocks Touched keeps in memory
// for Sums; blocks beyond it are read again.
const maxKept = 64 << 20

// TouchedBlocks reads the n bytes of operations r holds (ReadOps's
// format; the data of writes is skipped, not read) and says what they do
// to a stripe of oldLen bytes summed in blocks of bs.
func TouchedBlocks(r io.ReaderAt, n, oldLen int64, bs int) (*Touched, error) {
	t := &Touched{bs: bs, OldLen: oldLen}
	b := int64(bs)
	cur := oldLen
	touch := func(from, to int64) { // bytes [from, to) change
		if to > from {
			t.blocks = append(t.blocks, [2]int64{from / b, (to + b - 1) / b})
		}
	}
	var hdr [13]byte
	r = &window{r: r, n: n}
	for off := int64(0); off < n; {
		if _, err := r.ReadAt(hdr[:1], off); err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		switch hdr[0] {
		case opWrite:
			if _, err := r.ReadAt(hdr[1:13], off+1); err != nil {
				return nil, fmt.Errorf("journal: cut off write: %w", err)
			}
			at, size := int64(binary.BigEndian.Uint64(hdr[1:9])), int64(binary.BigEndian.Uint32(hdr[9:13]))
			if size > MaxOpData || at < 0 || off+13+size > n {
				return nil, fmt.Errorf("journal: bad write of %d bytes at %d", size, at)
			}
			end := at + size
			touch(at, end)
			if end > cur {
				touch(cur, end) // the old last block grows; a hole is zeros
				cur = end
			}
			// Blocks of the old stripe this write replaces whole.
			if lo, hi := (at+b-1)/b, min(end/b, (oldLen+b-1)/b); lo < hi {
				t.covered = append(t.covered, [2]int64{lo, hi})
			}
			if end >= oldLen && oldLen%b != 0 && at <= oldLen/b*b {
				t.covered = append(t.covered, [2]int64{oldLen / b, oldLen/b + 1}) // the short last block
			}
			off += 13 + size
		case opTruncate:
			if _, err := r.ReadAt(hdr[1:9], off+1); err != nil {
				return nil, fmt.Errorf("journal: cut off truncate: %w", err)
			}
			size := int64(binary.BigEndian.Uint64(hdr[1:9]))
			if size < 0 {
				return nil, fmt.Errorf("journal: bad truncate to %d", size)
			}
			t.truncates = true
			if size < cur {
				touch(size, min(size+1, cur)) // the new last block, if short
			} else {
				touch(cur, size)
			}
			cur = size
			off += 9
		default:
			return nil, fmt.Errorf("journal: unknown operation %q", hdr[0])
		}
	}
	t.NewLen = cur
	t.blocks = merge(t.blocks)
	t.covered = merge(t.covered)
	return t, nil
}

// window reads the first n bytes of r through a 64 KiB window, so that
// the headers of many small operations cost one read, not two each (and
// the header of a large one reads little of its data).
type window struct {
	r   io.ReaderAt
	n   int64
	buf []byte
	off int64 // of buf's first byte
}

func (w *window) ReadAt(p []byte, off int64) (int, error) {
	if off < w.off || off+int64(len(p)) > w.off+int64(len(w.buf)) {
		if w.buf == nil {
			w.buf = make([]byte, min(w.n, 64<<10))
		}
		w.buf = w.buf[:min(int64(cap(w.buf)), w.n-off)]
		if int64(len(p)) > int64(len(w.buf)) {
			return w.r.ReadAt(p, off)
		}
		if m, err := w.r.ReadAt(w.buf, off); err != nil && !(errors.Is(err, io.EOF) && m == len(w.buf)) {
			w.buf = w.buf[:0]
			return 0, err
		}
		w.off = off
	}
	return copy(p, w.buf[off-w.off:]), nil
}

// merge sorts ranges and joins those that overlap or touch.
func merge(rs [][2]int64) [][2]int64 {
	slices.SortFunc(rs, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var out [][2]int64
	for _, r := range rs {
		if n := len(out); n > 0 && r[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

func within(rs [][2]int64, b int64) bool {
	i, _ := slices.BinarySearchFunc(rs, b, func(r [2]int64, b int64) int {
		switch {
		case r[1] <= b:
			return -1
		case r[0] > b:
			return 1
		}
		return 0
	})
	return i < len(rs) && rs[i][0] <= b && b < rs[i][1]
}

// Verify checks, against the sums old (a SumsFunc of the stripe before
// the update), the blocks of the stripe the operations touch but do not
// overwrite whole: bytes of theirs stay, and are summed again after the
// apply. read reads the stripe's data before the update.
func (t *Touched) Verify(read func(p []byte, off int64) error, old checksum.SumsFunc) error {
	oldN := checksum.Blocks(t.OldLen, t.bs)
	for _, r := range t.blocks {
		for b := r[0]; b < min(r[1], oldN); b++ {
			if within(t.covered, b) || t.deltaBlock(b) {
				continue
			}
			p := make([]byte, min(int64(t.bs), t.OldLen-b*int64(t.bs)))
			if err := read(p, b*int64(t.bs)); err != nil {
				return fmt.Errorf("block %d: %w", b, err)
			}
			want, err := old(b, 1)
			if err != nil {
				return err
			}
			if _, err := checksum.VerifyBlocks(p, b, t.bs, want); err != nil {
				return err
			}
			if t.keep && len(p) == t.bs && t.keptBytes+int64(t.bs) <= maxKept {
				if t.kept == nil {
					t.kept = map[int64][]byte{}
				}
				t.kept[b], t.keptBytes = p, t.keptBytes+int64(t.bs)
			}
		}
	}
	return nil
}

// Patch brings the blocks Verify kept up to date with a write of n
// bytes at off, whose data read gives (read(p, o): p's bytes at offset o
// of the write's data). A truncation forgets them (Forget).
func (t *Touched) Patch(off, n int64, read func(p []byte, o int64) error) error {
	b := int64(t.bs)
	for blk := off / b; len(t.kept) > 0 && blk*b < off+n; blk++ {
		p, ok := t.kept[blk]
		if !ok {
			continue
		}
		from, to := max(off, blk*b), min(off+n, blk*b+b)
		if err := read(p[from-blk*b:to-blk*b], from-off); err != nil {
			return err
		}
	}
	return nil
}

// Forget drops the blocks Verify kept: Sums reads them again.
func (t *Touched) Forget() { t.kept, t.keptBytes = nil, 0 }

// Sums returns the block sums of the stripe after the update: old's
// (the sums before, of OldLen bytes) for the blocks it did not touch,
// and those of the new bytes read gives for the others.
func (t *Touched) Sums(old checksum.SumsFunc, read func(p []byte, off int64) error) ([]uint32, error) {
	n, oldN := checksum.Blocks(t.NewLen, t.bs), checksum.Blocks(t.OldLen, t.bs)
	sums := make([]uint32, n)
	if keep := min(n, oldN); keep > 0 {
		prev, err := old(0, keep)
		if err != nil {
			return nil, err
		}
		copy(sums, prev)
	}
	p := make([]byte, t.bs)
	for b := range n {
		if b < oldN && !within(t.blocks, b) {
			continue
		}
		if t.deltaBlock(b) {
			sums[b] ^= t.delta[b] // the old sum, with what the writes changed
			continue
		}
		q := p[:min(int64(t.bs), t.NewLen-b*int64(t.bs))]
		if k, ok := t.kept[b]; ok && len(k) == len(q) {
			sums[b] = checksum.CRC32CSum(k) // verified before, patched with the writes since
			continue
		}
		if err := read(q, b*int64(t.bs)); err != nil {
			return nil, fmt.Errorf("block %d: %w", b, err)
		}
		sums[b] = checksum.CRC32CSum(q)
	}
	return sums, nil
}

// SpooledOps is operations held in the first N bytes of a local file,
// with the crc32c (Castagnoli) of those bytes computed as they were
// written. A store on the same machine (posix) copies them into its
// journal in the kernel (copy_file_range) and continues the journal's
// checksum from CRC instead of reading them through user space; any
// other reader reads them as a stream.
type SpooledOps struct {
	F   *os.File
	N   int64
	CRC uint32
	r   *io.SectionReader
}

func (o *SpooledOps) Read(p []byte) (int, error) {
	if o.r == nil {
		o.r = io.NewSectionReader(o.F, 0, o.N)
	}
	return o.r.Read(p)
}

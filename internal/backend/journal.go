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

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
}

// Op kinds.
const (
	opWrite    = 'W'
	opTruncate = 'T'
)

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

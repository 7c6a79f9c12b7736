package posix

// Extensions (appends) written straight into the stripe, committed by
// its length.
//
// An update that only extends a stripe (backend.JournalHead.Extends:
// every write at or past the stripe's data length L, no truncation)
// does not journal its data. The stripe keeps its block sums in its
// sums file (version 3, format.go), so its file is its data alone and
// its length is the sums file's L: bytes past L are a tail no reader
// looks at. Prepare (prepareTail):
//
//  1. drops a journal left from before, durably (a journal never
//     outlives the tail it describes), and cuts a tail left by a crash;
//     a version 2 stripe is converted first: its table and footer are
//     written to its sums file (synced, renamed, the directory synced),
//     then cut from its file;
//  2. verifies the old short last block against its sum (its bytes stay
//     and are summed again with the new ones);
//  3. writes the operations' data into the stripe file at their offsets,
//     past L, summing the new blocks as they pass (bytes written out of
//     order are summed from the file after), and syncs it;
//  4. writes a journal holding no operations: the new length and the
//     sums of the blocks from L's block on.
//
// Apply (applyTail) writes the new sums file (the old sums of the blocks
// below L's, the journal's after; synced, renamed over the old one, the
// directory synced): from then on the stripe is NewLen bytes long; then
// the metadata with the new version, synced; the journal is removed.
//
// A crash before 4 leaves the stripe as it was plus a tail, which the
// next Prepare, Discard or Apply of another journal cuts (commit by
// length); a crash after 4 leaves the journal, which rolls forward or is
// discarded as any other (a Discard cuts the tail). An Apply that finds
// the tail shorter than the journal says (the file was cut) or the sums
// file at another length fails with kerr.IO, the stripe unchanged: its
// update marks it stale. So the bytes of an append are written once per
// replica, not to a journal and then the stripe. Stripes without block
// sums (version 1, framed, a filesystem with blocksums=off) take the
// journal path: their file is their data, with no length of its own.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// prepareTail prepares the extension jh of fid (the steps above); done
// is false, with nothing read of ops, for a stripe without block sums
// (the journal path takes it).
func (s *Store) prepareTail(fid uint64, jh backend.JournalHead, ops io.Reader) (done bool, err error) {
	defer s.lockFid(fid)()
	p := PhysPath(s.root, fid)
	if err := s.drop(fid, true); err != nil {
		return true, err
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return true, s.fail("prepare update", fid, err)
	}
	defer f.Close()
	x, err := sumsOf(f, p, false)
	if err != nil {
		return true, s.fail("prepare update", fid, err)
	}
	defer func() { x.close() }()
	if !x.summed {
		return false, nil
	}
	if x.side == nil {
		if x, err = convert(f, p, x); err != nil {
			return true, s.fail("prepare update", fid, fmt.Errorf("moving the block sums to their own file: %w", err))
		}
	}
	h := journalHead{JournalHead: jh, Block: x.t.block, Len: x.t.len, Side: true, Tail: true}
	// A local session's spool is checked against the sum taken as it was
	// written, as a journal copied from it is (journal.go): bytes that
	// changed on its disk since must not be summed here as good.
	so, spooled := ops.(*backend.SpooledOps)
	crc := crc32.New(castagnoli)
	if spooled {
		ops = io.TeeReader(ops, crc)
	}
	sums, newLen, err := writeTail(f, x, ops)
	if err == nil && spooled && crc.Sum32() != so.CRC {
		err = kerr.New(kerr.IO, "prepare update", p, "the update's spool does not match its checksum (changed after it was written)")
	}
	if err == nil {
		err = unix.Fdatasync(int(f.Fd()))
	}
	if err == nil {
		err = s.crashed("tail")
	}
	if err != nil {
		var be *checksum.BlockError
		if errors.As(err, &be) {
			return true, kerr.Wrap(kerr.IO, "prepare update", p, err)
		}
		if kerr.Is(err, kerr.Invalid) {
			return true, err
		}
		return true, s.fail("prepare update", fid, err)
	}
	h.NewLen = newLen
	return true, s.writeJournal(fid, h, nil, checksum.PutSums(sums))
}

// convert moves the block sums of the version 2 stripe file f at p (x:
// its trailer) to its sums file and cuts them from f: a version 3
// stripe. A crash between leaves the sums file and the old trailer, a
// tail past the data like any other.
func convert(f *os.File, p string, x stripeSums) (stripeSums, error) {
	table := make([]byte, 4*checksum.Blocks(x.t.len, x.t.block))
	if _, err := f.ReadAt(table, x.t.table()); err != nil {
		return x, err
	}
	if err := writeSums(p, x.t, table, func(string) error { return nil }); err != nil {
		return x, err
	}
	side, err := os.Open(p + ".sums")
	if err != nil {
		return x, err
	}
	x.side = side
	return x, nil
}

// writeTail cuts what lies past the data of the version 3 stripe file f
// (x), writes the extension ops into it and returns the sums of its
// blocks from x.t.len's on and its new data length.
func writeTail(f *os.File, x stripeSums, ops io.Reader) ([]uint32, int64, error) {
	L, bs := x.t.len, int64(x.t.block)
	if x.size != L {
		if err := f.Truncate(L); err != nil {
			return nil, 0, err
		}
	}
	first := L / bs
	sum := checksum.NewBlockSummer(int(bs))
	if part := L - first*bs; part > 0 {
		// The old short last block: its bytes stay, verified first.
		old := make([]byte, part)
		if _, err := f.ReadAt(old, first*bs); err != nil {
			return nil, 0, err
		}
		want := make([]byte, 4)
		if _, err := x.side.ReadAt(want, 4*first); err != nil {
			return nil, 0, err
		}
		if _, err := checksum.VerifyBlocks(old, first, int(bs), checksum.ParseSums(want)); err != nil {
			return nil, 0, err
		}
		sum.Write(old)
	}
	pos, end, inOrder := L, L, true // pos: bytes summed up to
	br := bufio.NewReaderSize(ops, 1<<20)
	buf := make([]byte, 1<<20)
	var hdr [12]byte
	for {
		kind, err := br.ReadByte()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		if kind != 'W' {
			return nil, 0, kerr.New(kerr.Invalid, "prepare update", f.Name(), fmt.Sprintf("operation %q in an extension", kind))
		}
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return nil, 0, fmt.Errorf("journal: cut off write: %w", err)
		}
		at, n := int64(binary.BigEndian.Uint64(hdr[:8])), int64(binary.BigEndian.Uint32(hdr[8:]))
		if n > backend.MaxOpData || at < L {
			return nil, 0, kerr.New(kerr.Invalid, "prepare update", f.Name(),
				fmt.Sprintf("a write of %d bytes at %d in an extension of a stripe of %d bytes", n, at, L))
		}
		if inOrder && at < pos {
			inOrder = false // rewrites bytes summed already: summed from the file below
		}
		for inOrder && pos < at { // a hole: zeros
			z := buf[:min(int64(len(buf)), at-pos)]
			clear(z)
			sum.Write(z)
			pos += int64(len(z))
		}
		for done := int64(0); done < n; {
			q := buf[:min(int64(len(buf)), n-done)]
			if _, err := io.ReadFull(br, q); err != nil {
				return nil, 0, fmt.Errorf("journal: cut off write: %w", err)
			}
			if _, err := f.WriteAt(q, at+done); err != nil {
				return nil, 0, err
			}
			if inOrder {
				sum.Write(q)
				pos += int64(len(q))
			}
			done += int64(len(q))
		}
		end = max(end, at+n)
	}
	if !inOrder {
		// Sum the new blocks from what the file holds now.
		sum = checksum.NewBlockSummer(int(bs))
		for off := first * bs; off < end; {
			q := buf[:min(int64(len(buf)), end-off)]
			if _, err := f.ReadAt(q, off); err != nil {
				return nil, 0, err
			}
			sum.Write(q)
			off += int64(len(q))
		}
	}
	return sum.Sums(), end, nil
}

// applyTail rolls the extension journal j of head h forward on the
// stripe file f at p: its sums file, then its metadata.
func (s *Store) applyTail(f *os.File, p string, j *os.File, h journalHead) error {
	x, err := sumsOf(f, p, false)
	if err != nil {
		return err
	}
	defer x.close()
	switch {
	case x.side == nil:
		return kerr.New(kerr.IO, "update", p, "the stripe has no block sums file; its extension cannot apply")
	case x.t.block != h.Block || x.t.len != h.Len && x.t.len != h.NewLen:
		return kerr.New(kerr.IO, "update", p, fmt.Sprintf("the stripe's sums are of %d bytes in blocks of %d; the extension is from %d bytes in blocks of %d",
			x.t.len, x.t.block, h.Len, h.Block))
	case x.size < h.NewLen:
		return kerr.New(kerr.IO, "update", p, fmt.Sprintf("the stripe holds %d bytes; its extension needs %d (the appended bytes were lost)", x.size, h.NewLen))
	}
	first := h.Len / int64(h.Block)
	table := make([]byte, 4*first+h.sumsLen())
	if _, err := x.side.ReadAt(table[:4*first], 0); err != nil {
		return err
	}
	if _, err := j.ReadAt(table[4*first:], 0); err != nil {
		return fmt.Errorf("reading the journal's sums: %w", err)
	}
	nt := sumsInfo{block: h.Block, len: h.NewLen}
	if err := writeSums(p, nt, table, s.crashed); err != nil {
		return err
	}
	if x.size > h.NewLen {
		if err := f.Truncate(h.NewLen); err != nil {
			return err
		}
	}
	if err := writeMeta(f, h.Meta); err != nil {
		return err
	}
	return f.Sync()
}

// cutTail cuts the bytes past the data of the version 3 stripe of fid
// (left by an extension that did not commit); the caller holds lockFid.
// Reads never see them, so a failure here is left for the next Prepare.
func (s *Store) cutTail(fid uint64) {
	p := PhysPath(s.root, fid)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer f.Close()
	x, err := sumsOf(f, p, false)
	if err != nil {
		return
	}
	defer x.close()
	if x.side != nil && x.size > x.t.len {
		_ = f.Truncate(x.t.len)
	}
}

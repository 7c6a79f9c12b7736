package posix

// Prepared in-place updates of stripes (backend.Updater). A journal is
// the update's operations, the stripe's block sums as they were when it
// was prepared, and a trailer:
//
//	ops... sums[4*N] head(JSON: journalHead) len(head)(4) crc32c(all before)(4) "KAONJRN1"
//
// written to <stripe>.journal.tmp, synced, and renamed to
// <stripe>.journal: a journal that exists under its name is whole and
// durable (a .tmp one is a prepare that did not finish, ignored and
// replaced). The head says where the sums end (Block, Len: those of the
// stripe's footer, format.go; Block 0: the stripe had none, it is framed
// or written before block sums).
//
// An extension (backend.JournalHead.Extends) of a stripe with block
// sums is not journalled this way: its data goes straight into the
// stripe and its journal holds the new length and sums (tail.go).
//
// Apply of a stripe with block sums (format.go) keeps them current (a
// version 3 stripe's sums are in its sums file: step 2's cut is the
// file's removal, steps 4-5 write a new one, synced, renamed in place,
// after the data is synced):
//
//  1. the blocks the operations touch and partly keep are verified
//     against the stripe's sums (a rotted one fails the apply, before
//     anything changed);
//  2. the trailer (sums and footer) is cut off: the file is the data
//     alone, Len bytes (synced);
//  3. the operations are written into it;
//  4. the new sums table follows the new data (the untouched blocks'
//     sums as they were, the touched ones' summed from the new bytes);
//     synced;
//  5. the footer and the metadata with the new version; synced; the
//     journal removed.
//
// A crash at any point leaves a state Apply finishes: before 2 the
// stripe is as it was; between 2 and 5 it has no valid footer (it reads
// as a stripe without sums, and it is at the old version, so no reader
// at the new one reads it), and Apply cuts it to Len again and replays
// the operations (they are absolute, so a replay over a partial apply
// gives what one full apply gives), taking the untouched blocks' sums
// from the journal; after 5's footer its data and sums agree and the
// replay rewrites the same bytes and sums. The blocks step 1 verified
// are not verified again on a replay after step 2 (their old bytes are
// gone from the sums on disk), which is why 1 comes before any change.
// Apply writes through the page cache. The bytes move in the kernel
// where they can (copy.go): a journal prepared from a local update's
// spool (backend.SpooledOps) is copied from it with copy_file_range and
// its checksum continued from the spool's, summed as the spool was
// written; the writes are copied from the journal into the stripe the
// same way; the blocks step 1 verified stay in memory, patched with the
// writes, and are summed from there in step 4 (each touched block read
// and summed once). The journal's removal after an apply is not synced:
// one that comes back after a crash finds the stripe at its new version
// and is dropped again. A journal is read whole to check its checksum
// before it applies, unless this Store wrote and synced it itself and it
// is still the same file (inode, size, modification time: journalID)
// and summed its bytes as it wrote them (streamed, as a peer's journal
// comes): the check is then for a journal that lay on disk across a
// crash, and a commit's apply follows its prepare within moments (an
// append's journal would otherwise be read once more). A journal copied
// from a spool is always checked: its sum is the spool's, and the check
// is what finds a spool whose bytes changed after they were summed.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
)

var _ backend.Updater = (*Store)(nil)

const journalMagic = "KAONJRN1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func journalPath(root string, fid uint64) string { return PhysPath(root, fid) + ".journal" }

// journalHead is the head of a journal: the update's, and the block sums
// the stripe had when it was prepared (their table precedes the head).
type journalHead struct {
	backend.JournalHead
	Block int   `json:",omitempty"` // block size; 0: the stripe had no sums
	Len   int64 `json:",omitempty"` // its data bytes then
	// Side: the stripe keeps its sums in its sums file (version 3).
	Side bool `json:",omitempty"`
	// Tail: an extension (tail.go). The data from Len to NewLen is in
	// the stripe file already; the journal holds no operations, and its
	// table the sums of the blocks from Len/Block on, not the old ones.
	Tail   bool  `json:",omitempty"`
	NewLen int64 `json:",omitempty"`
}

// sumsLen is the length of the sums table the journal holds.
func (h journalHead) sumsLen() int64 {
	switch {
	case h.Block == 0:
		return 0
	case h.Tail:
		return 4 * (checksum.Blocks(h.NewLen, h.Block) - h.Len/int64(h.Block))
	}
	return 4 * checksum.Blocks(h.Len, h.Block)
}

func (s *Store) Prepare(fid uint64, jh backend.JournalHead, ops io.Reader) error {
	if jh.Extends {
		if done, err := s.prepareTail(fid, jh, ops); done {
			return err
		}
	}
	h := journalHead{JournalHead: jh}
	var sums []byte
	if err := func() error {
		defer s.lockFid(fid)() // a repair's sums are not read half written
		p := PhysPath(s.root, fid)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		x, err := sumsOf(f, p, false)
		if err != nil || !x.summed {
			return err
		}
		defer x.close()
		h.Block, h.Len, h.Side = x.t.block, x.t.len, x.side != nil
		sums = make([]byte, h.sumsLen())
		tf, tab := x.table(f)
		_, err = tf.ReadAt(sums, tab)
		return err
	}(); err != nil {
		return s.fail("prepare update", fid, err)
	}
	return s.writeJournal(fid, h, ops, sums)
}

// writeJournal writes the journal of fid: ops, then the table sums and
// the head h (the format at the top of this file), durably.
func (s *Store) writeJournal(fid uint64, h journalHead, ops io.Reader, sums []byte) error {
	final := journalPath(s.root, fid)
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return s.fail("prepare update", fid, err)
	}
	head, _ := json.Marshal(h)
	var sum uint32
	var n int64
	so, spooled := ops.(*backend.SpooledOps)
	switch {
	case ops == nil:
	case spooled:
		// The spool's bytes and their sum, taken as they were spooled:
		// copied in the kernel, not read here.
		sum, n, err = so.CRC, so.N, copyRange(f, 0, so.F, 0, so.N)
	default:
		crc := crc32.New(castagnoli)
		n, err = io.CopyBuffer(io.MultiWriter(f, crc), ops, make([]byte, copyBufSize))
		sum = crc.Sum32()
	}
	rest := slices.Concat(sums, head, binary.BigEndian.AppendUint32(nil, uint32(len(head))))
	sum = crc32.Update(sum, castagnoli, rest)
	if err == nil {
		_, err = f.WriteAt(append(binary.BigEndian.AppendUint32(rest, sum), journalMagic...), n)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err == nil {
		err = syncDir(filepath.Dir(final))
	}
	if err != nil {
		os.Remove(tmp)
		return s.fail("prepare update", fid, err)
	}
	if st, err := os.Stat(final); err == nil && !spooled {
		s.prepared.Store(fid, idOf(st))
	}
	return nil
}

// journalID tells a journal file this Store wrote from any other.
type journalID struct {
	ino, size int64
	mtime     int64
}

func idOf(st os.FileInfo) journalID {
	id := journalID{size: st.Size(), mtime: st.ModTime().UnixNano()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		id.ino = int64(sys.Ino)
	}
	return id
}

// readJournal opens the journal of fid and returns it with its head and
// the length of its operations (the sums table follows them).
func (s *Store) readJournal(fid uint64) (*os.File, journalHead, int64, error) {
	var h journalHead
	f, err := os.Open(journalPath(s.root, fid))
	if errors.Is(err, os.ErrNotExist) {
		return nil, h, 0, kerr.New(kerr.NotFound, "update", PhysPath(s.root, fid), "no prepared update")
	}
	if err != nil {
		return nil, h, 0, s.fail("update", fid, err)
	}
	fail := func(why string) (*os.File, journalHead, int64, error) {
		f.Close()
		return nil, h, 0, kerr.New(kerr.IO, "update", journalPath(s.root, fid), "damaged journal: "+why)
	}
	st, err := f.Stat()
	if err != nil {
		return fail(err.Error())
	}
	size := st.Size()
	var tail [12]byte
	if size < 16 {
		return fail("too short")
	}
	if _, err := f.ReadAt(tail[:], size-12); err != nil || string(tail[4:]) != journalMagic {
		return fail("no trailer")
	}
	if id, ok := s.prepared.Load(fid); !ok || id != idOf(st) {
		crc := crc32.New(castagnoli)
		if _, err := io.CopyBuffer(crc, io.NewSectionReader(f, 0, size-12), make([]byte, copyBufSize)); err != nil {
			return fail(err.Error())
		}
		if crc.Sum32() != binary.BigEndian.Uint32(tail[:4]) {
			return fail("checksum mismatch")
		}
	}
	var lb [4]byte
	if _, err := f.ReadAt(lb[:], size-16); err != nil {
		return fail(err.Error())
	}
	hl := int64(binary.BigEndian.Uint32(lb[:]))
	if size-16-hl < 0 {
		return fail("bad head length")
	}
	head := make([]byte, hl)
	if _, err := f.ReadAt(head, size-16-hl); err != nil {
		return fail(err.Error())
	}
	if err := json.NewDecoder(bytes.NewReader(head)).Decode(&h); err != nil {
		return fail(err.Error())
	}
	if h.Block != 0 && (h.Block < checksum.MinBlockSize || h.Block > checksum.MaxBlockSize || h.Len < 0) {
		return fail(fmt.Sprintf("bad block sums (%d bytes in blocks of %d)", h.Len, h.Block))
	}
	opsLen := size - 16 - hl - h.sumsLen()
	if opsLen < 0 || h.Tail && (opsLen != 0 || h.Block == 0 || h.NewLen < h.Len) {
		return fail("bad head length")
	}
	return f, h, opsLen, nil
}

func (s *Store) Prepared(fid uint64) (backend.JournalHead, error) {
	f, h, _, err := s.readJournal(fid)
	if err != nil {
		return h.JournalHead, err
	}
	f.Close()
	return h.JournalHead, nil
}

// errCrash is what Apply returns at the step a test crashes it (crashAt).
var errCrash = errors.New("crashed here (test)")

func (s *Store) Apply(fid uint64) error {
	defer s.lockFid(fid)()
	j, h, opsLen, err := s.readJournal(fid)
	if err != nil {
		return err
	}
	defer j.Close()
	p := PhysPath(s.root, fid)
	m, err := readMeta(p)
	if err != nil {
		return s.fail("update", fid, err)
	}
	switch m.Version {
	case h.Meta.Version:
		return s.drop(fid, false) // applied before a crash; only the journal was left
	case h.From:
	default:
		_ = s.discard(fid)
		return kerr.New(kerr.IO, "update", p, "stripe is at data version "+strconv.FormatUint(m.Version, 10)+", the update is from "+strconv.FormatUint(h.From, 10)+" (stale stripe)")
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return s.fail("update", fid, err)
	}
	defer f.Close()
	h.Meta.Fid = fid
	if h.Tail {
		err = s.applyTail(f, p, j, h)
	} else {
		err = s.apply(f, p, j, h, opsLen)
	}
	if err != nil {
		var be *checksum.BlockError
		if errors.As(err, &be) {
			_ = s.discard(fid) // the stripe is as it was; the update marks it stale
			return kerr.Wrap(kerr.IO, "update", p, err)
		}
		return s.fail("update", fid, err)
	}
	return s.drop(fid, false)
}

// apply rolls the journal j of head h forward on the stripe file f at p
// (the steps are at the top of this file).
func (s *Store) apply(f *os.File, p string, j *os.File, h journalHead, opsLen int64) error {
	x, err := sumsOf(f, p, false)
	if err == nil && h.Side && x.side == nil {
		x.summed = false // its sums file or none: a trailer would be data's bytes
	}
	if err != nil {
		return err
	}
	defer x.close()
	size, t, summed := x.size, x.t, x.summed
	// cut takes the stripe's sums away: after it, a replay knows the
	// bytes are being changed and takes the old sums from the journal.
	cut := func() error {
		if x.side != nil {
			if err := os.Remove(p + ".sums"); err != nil {
				return err
			}
			return syncDir(filepath.Dir(p))
		}
		return nil
	}
	ops := io.NewSectionReader(j, 0, opsLen)
	readData := func(p []byte, off int64) error { _, err := f.ReadAt(p, off); return err }
	var touched *backend.Touched
	var old checksum.SumsFunc
	switch {
	case h.Block == 0:
		// No sums wanted: a framed stripe or one without sums when the
		// update was prepared (a footer AddBlockSums added since is cut
		// off: the scrub adds sums again).
		if summed {
			err = f.Truncate(t.len)
			if err == nil {
				err = cut()
			}
		}
	case summed:
		// As it was (or applied up to the footer): verify what stays.
		touched, err = backend.TouchedBlocks(ops, opsLen, t.len, t.block)
		if err == nil {
			touched.Keep()  // replay patches them: each block read and summed once
			touched.Delta() // a write inside a full block reads only the bytes it replaces
			tf, tab := x.table(f)
			old, err = tableOf(tf, tab, t)
		}
		if err == nil {
			err = touched.Verify(readData, old)
		}
		if err == nil {
			err = f.Truncate(t.len) // the trailer, or a tail a crash left
		}
		if err == nil && x.side == nil {
			err = f.Sync() // the cut (a tail's cut need not last: a replay cuts to h.Len)
		}
		if err == nil {
			err = cut()
		}
	default:
		// No footer, no sums file: a crash between the cut and the new
		// sums.
		t = sumsInfo{block: h.Block, len: h.Len}
		touched, err = backend.TouchedBlocks(ops, opsLen, h.Len, h.Block)
		if err == nil {
			old, err = tableOf(j, opsLen, t)
		}
		if err == nil && size != h.Len {
			err = f.Truncate(h.Len)
		}
	}
	if err == nil {
		err = s.crashed("cut")
	}
	if err == nil {
		err = replay(j, opsLen, f, touched)
	}
	if err == nil {
		err = s.crashed("data")
	}
	var nt sumsInfo
	var sums []byte
	if err == nil && touched != nil {
		var ns []uint32
		ns, err = touched.Sums(old, readData)
		nt = sumsInfo{block: t.block, len: touched.NewLen}
		sums = checksum.PutSums(ns)
	}
	if err == nil && touched != nil && h.Side {
		// The data first: sums that name bytes a crash lost would read
		// as rot.
		err = f.Sync()
		if err == nil {
			err = writeSums(p, nt, sums, s.crashed)
		}
	} else {
		if err == nil && touched != nil {
			_, err = f.WriteAt(sums, nt.table())
		}
		if err == nil {
			err = f.Sync()
		}
		if err == nil {
			err = s.crashed("sums")
		}
		if err == nil && touched != nil {
			_, err = f.WriteAt(encodeFooter(nt), nt.fileSize()-footerSize)
		}
		if err == nil {
			err = s.crashed("footer")
		}
	}
	if err == nil {
		err = writeMeta(f, h.Meta)
	}
	if err == nil {
		err = f.Sync()
	}
	return err
}

// replay applies the opsLen bytes of operations at the start of the
// journal j to the stripe file f (backend.ReplayOps's format); the
// blocks touched kept (Verify) are patched with them. The journal is
// read in 64 KiB pieces, and the data of small writes written from
// there (a commit of scattered 4 KiB writes is thousands of them: one
// pwrite each, not a read of each header and a copy); the data of large
// writes is copied in the kernel.
func replay(j *os.File, opsLen int64, f *os.File, touched *backend.Touched) error {
	// A small buffer: after a large write's header it has read ahead
	// into data the kernel copies.
	br := bufio.NewReaderSize(io.NewSectionReader(j, 0, opsLen), smallWrite)
	var hdr [13]byte
	var small []byte
	for off := int64(0); off < opsLen; {
		if _, err := io.ReadFull(br, hdr[:1]); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		switch hdr[0] {
		case 'W':
			if _, err := io.ReadFull(br, hdr[1:13]); err != nil {
				return fmt.Errorf("journal: cut off write: %w", err)
			}
			at, n := int64(binary.BigEndian.Uint64(hdr[1:9])), int64(binary.BigEndian.Uint32(hdr[9:13]))
			if n > backend.MaxOpData || at < 0 || off+13+n > opsLen {
				return fmt.Errorf("journal: bad write of %d bytes at %d", n, at)
			}
			data := off + 13
			var readNew func(p []byte, o int64) error
			if n <= smallWrite {
				small = slices.Grow(small[:0], int(n))[:n]
				if _, err := io.ReadFull(br, small); err != nil {
					return fmt.Errorf("journal: cut off write: %w", err)
				}
				readNew = func(p []byte, o int64) error { copy(p, small[o:]); return nil }
			} else {
				readNew = func(p []byte, o int64) error { _, err := j.ReadAt(p, data+o); return err }
			}
			if touched != nil {
				readOld := func(p []byte, o int64) error { _, err := f.ReadAt(p, o); return err }
				if err := touched.Overwrite(at, n, readOld, readNew); err != nil {
					return err
				}
			}
			if n <= smallWrite {
				if _, err := f.WriteAt(small, at); err != nil {
					return err
				}
			} else {
				if err := copyRange(f, at, j, data, n); err != nil {
					return err
				}
				br.Reset(io.NewSectionReader(j, data+n, opsLen-data-n))
			}
			if touched != nil {
				if err := touched.Patch(at, n, readNew); err != nil {
					return err
				}
			}
			off = data + n
		case 'T':
			if _, err := io.ReadFull(br, hdr[1:9]); err != nil {
				return fmt.Errorf("journal: cut off truncate: %w", err)
			}
			size := int64(binary.BigEndian.Uint64(hdr[1:9]))
			if size < 0 {
				return fmt.Errorf("journal: bad truncate to %d", size)
			}
			if err := f.Truncate(size); err != nil {
				return err
			}
			if touched != nil {
				touched.Forget()
			}
			off += 9
		default:
			return fmt.Errorf("journal: unknown operation %q", hdr[0])
		}
	}
	return nil
}

// smallWrite is the largest write replay writes from its read buffer
// rather than copying it in the kernel.
const smallWrite = 64 << 10

// tableOf reads the block sums of a stripe of t's shape from r at off.
func tableOf(r io.ReaderAt, off int64, t sumsInfo) (checksum.SumsFunc, error) {
	b := make([]byte, 4*checksum.Blocks(t.len, t.block))
	if _, err := r.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("reading the block sums: %w", err)
	}
	sums := checksum.ParseSums(b)
	return func(first, n int64) ([]uint32, error) {
		if first < 0 || first+n > int64(len(sums)) {
			return nil, fmt.Errorf("blocks %d-%d are beyond the stripe's %d", first, first+n-1, len(sums))
		}
		return sums[first : first+n], nil
	}, nil
}

// crashed fails Apply at step if a test asked it to (crashAt).
func (s *Store) crashed(step string) error {
	if s.crashAt == step {
		return errCrash
	}
	return nil
}

func (s *Store) Discard(fid uint64) error {
	defer s.lockFid(fid)()
	return s.discard(fid)
}

// discard drops the journal of fid durably and then the tail of an
// extension it may have described (tail.go); the caller holds lockFid.
func (s *Store) discard(fid uint64) error {
	if err := s.drop(fid, true); err != nil {
		return err
	}
	s.cutTail(fid)
	return nil
}

// drop removes the journal of fid; durably (the directory synced) when
// durable. A journal Apply rolled forward need not go durably: the
// stripe's new version is synced before, and a journal that comes back
// after a crash takes the stripe to the version it has, which Apply,
// storage's open check and fsck take as applied and drop, and the next
// Prepare replaces. A discarded one must: it never applied.
func (s *Store) drop(fid uint64, durable bool) error {
	s.prepared.Delete(fid)
	p := journalPath(s.root, fid)
	err := os.Remove(p)
	os.Remove(p + ".tmp")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return s.fail("discard update", fid, err)
	}
	if err == nil && durable {
		return syncDir(filepath.Dir(p))
	}
	return nil
}

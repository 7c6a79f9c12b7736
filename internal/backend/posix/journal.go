package posix

// Prepared in-place updates of stripes (backend.Updater). A journal is
// the update's operations followed by a trailer:
//
//	ops... head(JSON: backend.JournalHead) len(head)(4) crc32c(all before)(4) "KAONJRN1"
//
// written to <stripe>.journal.tmp, synced, and renamed to
// <stripe>.journal: a journal that exists under its name is whole and
// durable (a .tmp one is a prepare that did not finish, ignored and
// replaced). Apply writes through the page cache and syncs the stripe
// before it sets the metadata and removes the journal.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/kerr"
)

var _ backend.Updater = (*Store)(nil)

const journalMagic = "KAONJRN1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func journalPath(root string, fid uint64) string { return PhysPath(root, fid) + ".journal" }

func (s *Store) Prepare(fid uint64, h backend.JournalHead, ops io.Reader) error {
	if _, err := os.Stat(PhysPath(s.root, fid)); err != nil {
		return s.fail("prepare update", fid, err)
	}
	final := journalPath(s.root, fid)
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return s.fail("prepare update", fid, err)
	}
	crc := crc32.New(castagnoli)
	w := io.MultiWriter(f, crc)
	head, _ := json.Marshal(h)
	_, err = io.Copy(w, ops)
	if err == nil {
		_, err = w.Write(head)
	}
	if err == nil {
		_, err = w.Write(binary.BigEndian.AppendUint32(nil, uint32(len(head))))
	}
	if err == nil {
		_, err = f.Write(append(binary.BigEndian.AppendUint32(nil, crc.Sum32()), journalMagic...))
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
	return nil
}

// readJournal opens the journal of fid and returns it with its head and
// the length of its operations.
func (s *Store) readJournal(fid uint64) (*os.File, backend.JournalHead, int64, error) {
	var h backend.JournalHead
	f, err := os.Open(journalPath(s.root, fid))
	if errors.Is(err, os.ErrNotExist) {
		return nil, h, 0, kerr.New(kerr.NotFound, "update", PhysPath(s.root, fid), "no prepared update")
	}
	if err != nil {
		return nil, h, 0, s.fail("update", fid, err)
	}
	fail := func(why string) (*os.File, backend.JournalHead, int64, error) {
		f.Close()
		return nil, h, 0, kerr.New(kerr.IO, "update", journalPath(s.root, fid), "damaged journal: "+why)
	}
	st, err := f.Stat()
	if err != nil {
		return fail(err.Error())
	}
	size := st.Size()
	var tail [12]byte
	if size < 12 {
		return fail("too short")
	}
	if _, err := f.ReadAt(tail[:], size-12); err != nil || string(tail[4:]) != journalMagic {
		return fail("no trailer")
	}
	crc := crc32.New(castagnoli)
	if _, err := io.Copy(crc, io.NewSectionReader(f, 0, size-12)); err != nil {
		return fail(err.Error())
	}
	if crc.Sum32() != binary.BigEndian.Uint32(tail[:4]) {
		return fail("checksum mismatch")
	}
	var lb [4]byte
	if _, err := f.ReadAt(lb[:], size-16); err != nil {
		return fail(err.Error())
	}
	hl := int64(binary.BigEndian.Uint32(lb[:]))
	opsLen := size - 16 - hl
	if opsLen < 0 {
		return fail("bad head length")
	}
	head := make([]byte, hl)
	if _, err := f.ReadAt(head, opsLen); err != nil {
		return fail(err.Error())
	}
	if err := json.NewDecoder(bytes.NewReader(head)).Decode(&h); err != nil {
		return fail(err.Error())
	}
	return f, h, opsLen, nil
}

func (s *Store) Prepared(fid uint64) (backend.JournalHead, error) {
	f, h, _, err := s.readJournal(fid)
	if err != nil {
		return h, err
	}
	f.Close()
	return h, nil
}

func (s *Store) Apply(fid uint64) error {
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
		return s.Discard(fid) // applied before a crash; only the journal was left
	case h.From:
	default:
		_ = s.Discard(fid)
		return kerr.New(kerr.IO, "update", p, "stripe is at data version "+strconv.FormatUint(m.Version, 10)+", the update is from "+strconv.FormatUint(h.From, 10)+" (stale stripe)")
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return s.fail("update", fid, err)
	}
	defer f.Close()
	err = backend.ReplayOps(io.NewSectionReader(j, 0, opsLen), f)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		h.Meta.Fid = fid
		err = writeMeta(f, h.Meta)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return s.fail("update", fid, err)
	}
	return s.Discard(fid)
}

func (s *Store) Discard(fid uint64) error {
	p := journalPath(s.root, fid)
	err := os.Remove(p)
	os.Remove(p + ".tmp")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return s.fail("discard update", fid, err)
	}
	if err == nil {
		return syncDir(filepath.Dir(p))
	}
	return nil
}

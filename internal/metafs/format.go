// Package metafs builds, loads, verifies and serves a bulk metadata index of
// a read-only directory tree, so that thousands of processes walking a
// software tree hit memory instead of the metadata server below.
//
// It serves an index in two ways: Mount (FUSE; fuse.go, a raw file system
// whose node IDs are index positions) and MountKernel (no FUSE; kernel.go,
// a tmpfs skeleton filled on first open). Both are run by the daemon life
// every Kaon mount shares (fusecore.Daemon: SIGHUP reloads the index,
// SIGUSR1 prints statistics, SIGTERM unmounts) and count in fusecore.Stats.
//
// # File data checked against the index
//
// Metadata is answered from the index alone, file data comes from the tree
// below; so that the two agree, an open that is to serve data first checks
// the lower file against the index (checkOpen: one fstat of the open lower
// file): it must still be a regular file of the indexed size, mtime and
// ctime. Otherwise the open fails with EIO and the daemon logs one line
// naming the path and the size and times found and indexed; rebuilding the index
// (and sending the daemon SIGHUP) cures it. The FUSE mode checks every
// open it is asked for, also when it reuses a lower file kept open since
// an earlier open; the kernel mode checks the first open, the one that
// copies the data into its skeleton.
//
// The check is made at open, not on every read. A file that changes below
// after it was opened:
//
//   - kernel mode: the change is not seen; the copy taken at the first open
//     is served (it matches the index) for the life of that index.
//   - FUSE mode: opens already made keep reading the lower file as it is
//     now. With kernel passthrough a reader gets the new bytes, including
//     bytes past the indexed size that stat does not show; with
//     --no-passthrough reads stop at the indexed size and return new bytes
//     or pages the kernel cached before the change. The next open fails
//     with EIO.
//
// The ctime catches an edit that keeps the size and sets the mtime back; it
// also moves with chmod, chown, xattr and link changes, which change what
// the index answers too. Not detected: in FUSE mode, a file replaced by
// renaming another over it while its old one is still kept open: that old
// file (which matches the index) is served until it leaves the open-file
// cache.
//
// # Index file format (version 1)
//
// All integers are little-endian. The file is:
//
//	header   fixed part (headerFixed = 152 bytes) + root path bytes
//	payload  zstd frame holding the body (flag bit 0 set), or the raw body
//	trailer  u64 xxhash64 of every byte before the trailer
//
// Header:
//
//	0   [8]  magic "KAONMFS\x00"
//	8   u32  format version (1)
//	12  u32  flags (bit 0: payload is zstd-compressed)
//	16  u32  number of entries N (entry 0 is the root directory)
//	20  u32  root path length R
//	24  u64  body length (uncompressed)
//	32  u64  payload length (as stored)
//	40  u64  source st_dev
//	48  u64  source st_ino of the root
//	56  i64  source root mtime (ns since epoch)
//	64  i64  source root ctime (ns)
//	72  u64  fingerprint: xxhash64 over (path, mtime, ctime, size, mode) of
//	         every directory, in index order (see Fingerprint)
//	80  i64  build time (ns)
//	88  u32  number of directories
//	92  u32  statfs f_bsize
//	96  u64  statfs f_blocks
//	104 u64  statfs f_bfree
//	112 u64  statfs f_bavail
//	120 u64  statfs f_files
//	128 u64  statfs f_ffree
//	136 u32  statfs f_namelen
//	140 u32  statfs f_frsize
//	144 u64  reserved (0)
//	152 [R]  root path the index was built from (informational)
//
// Body (the in-memory form; the loader keeps it as one []byte and decodes
// fields on access, so there is no Go object per entry):
//
//	entries  N records of recSize (88) bytes, breadth-first: every
//	         directory's children are contiguous and in the order the
//	         directory listing returned them (getdents order)
//	sorted   N u32: for a directory d with children [first, first+count),
//	         sorted[first:first+count] holds the same child indices sorted
//	         by name bytes, for binary-search lookups; sorted[0] = 0
//	arena    bytes: names, symlink targets, xattr blobs
//
// Entry record:
//
//	0  u32 parent index (root: 0)
//	4  u32 name offset in arena
//	8  u32 st_mode (type and permission bits)
//	12 u32 uid
//	16 u32 gid
//	20 u32 nlink
//	24 u64 size
//	32 u64 blocks (512-byte units)
//	40 u64 st_ino on the source filesystem
//	48 i64 mtime (ns since epoch)
//	56 i64 ctime (ns)
//	64 i64 atime (ns)
//	72 u32 aux0: directory: first child index; symlink: target offset;
//	       device: rdev low 32 bits
//	76 u32 aux1: directory: child count; symlink: target length;
//	       device: rdev high 32 bits
//	80 u32 xattr blob offset in arena, or noXattr
//	84 u16 name length
//	86 u16 reserved
//
// An xattr blob is: u32 count, then count times
// (u16 name length, name, u32 value length, value), in listxattr order.
//
// Integrity: the loader reads the whole file with one sequential read,
// checks the trailer checksum before touching the payload, and then checks
// every offset it will later follow, so a corrupted or truncated file is
// refused with a clear error instead of misbehaving while mounted.
package metafs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"

	"github.com/kaon-storage/kaon/internal/kerr"
)

const (
	magic       = "KAONMFS\x00"
	Version     = 1
	headerFixed = 152
	recSize     = 88
	noXattr     = ^uint32(0)
	flagZstd    = 1
	maxEntries  = 1<<32 - 2
)

// Source identifies the tree an index was built from; it is what the
// staleness check compares against the live tree.
type Source struct {
	Root        string
	Dev, Ino    uint64 // Dev is informative only (it changes with every mount)
	Mtime       int64  // ns
	Ctime       int64  // ns
	Fingerprint uint64
	Dirs        uint32
	BuiltAt     time.Time
}

// StatFS is the lower filesystem's statfs at build time, served from memory.
type StatFS struct {
	Bsize, Namelen, Frsize              uint32
	Blocks, Bfree, Bavail, Files, Ffree uint64
}

// Index is a loaded, immutable metadata index. Entries are addressed by
// their index (0 = root). All accessors are safe for concurrent use.
type Index struct {
	Source   Source
	StatFS   StatFS
	FileSize int64 // bytes of the index file (0 when built in memory)
	n        int
	ents     []byte
	sorted   []byte
	arena    []byte
}

// Attr is the decoded metadata of one entry.
type Attr struct {
	Mode, Uid, Gid, Nlink uint32
	Size, Blocks, Ino     uint64
	Rdev                  uint64
	Mtime, Ctime, Atime   int64 // ns since epoch
}

// Len returns the number of entries (including the root).
func (x *Index) Len() int { return x.n }

func (x *Index) rec(i int) []byte { return x.ents[i*recSize : (i+1)*recSize : (i+1)*recSize] }

func le32(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }
func le64(b []byte, off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }

// Parent returns the parent index of entry i (the root is its own parent).
func (x *Index) Parent(i int) int { return int(le32(x.rec(i), 0)) }

// Mode returns st_mode of entry i.
func (x *Index) Mode(i int) uint32 { return le32(x.rec(i), 8) }

// IsDir reports whether entry i is a directory.
func (x *Index) IsDir(i int) bool { return x.Mode(i)&0o170000 == 0o040000 }

// Name returns the entry's name; the string aliases the immutable arena.
func (x *Index) Name(i int) string {
	r := x.rec(i)
	off, n := le32(r, 4), int(binary.LittleEndian.Uint16(r[84:]))
	if n == 0 {
		return ""
	}
	return unsafe.String(&x.arena[off], n)
}

// Attr decodes entry i's attributes.
func (x *Index) Attr(i int) Attr {
	r := x.rec(i)
	a := Attr{
		Mode: le32(r, 8), Uid: le32(r, 12), Gid: le32(r, 16), Nlink: le32(r, 20),
		Size: le64(r, 24), Blocks: le64(r, 32), Ino: le64(r, 40),
		Mtime: int64(le64(r, 48)), Ctime: int64(le64(r, 56)), Atime: int64(le64(r, 64)),
	}
	if t := a.Mode & 0o170000; t == 0o020000 || t == 0o060000 {
		a.Rdev = uint64(le32(r, 72)) | uint64(le32(r, 76))<<32
	}
	return a
}

// Children returns the [first, first+count) child range of directory i.
func (x *Index) Children(i int) (first, count int) {
	if !x.IsDir(i) {
		return 0, 0
	}
	r := x.rec(i)
	return int(le32(r, 72)), int(le32(r, 76))
}

// Lookup finds name in directory dir; ok is false when it does not exist.
func (x *Index) Lookup(dir int, name string) (int, bool) {
	first, count := x.Children(dir)
	lo, hi := first, first+count
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		c := int(le32(x.sorted, 4*m))
		if x.Name(c) < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < first+count {
		if c := int(le32(x.sorted, 4*lo)); x.Name(c) == name {
			return c, true
		}
	}
	return 0, false
}

// Resolve walks a slash-separated path relative to the root without
// following symlinks. "" and "." are the root.
func (x *Index) Resolve(p string) (int, bool) {
	cur := 0
	for len(p) > 0 {
		var comp string
		if j := indexByte(p, '/'); j >= 0 {
			comp, p = p[:j], p[j+1:]
		} else {
			comp, p = p, ""
		}
		if comp == "" || comp == "." {
			continue
		}
		if comp == ".." {
			cur = x.Parent(cur)
			continue
		}
		c, ok := x.Lookup(cur, comp)
		if !ok {
			return 0, false
		}
		cur = c
	}
	return cur, true
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// Readlink returns the symlink target of entry i (nil if not a symlink).
func (x *Index) Readlink(i int) []byte {
	if x.Mode(i)&0o170000 != 0o120000 {
		return nil
	}
	r := x.rec(i)
	off, n := le32(r, 72), le32(r, 76)
	return x.arena[off : off+n : off+n]
}

// Xattrs calls fn for each extended attribute of entry i in listxattr order
// until fn returns false.
func (x *Index) Xattrs(i int, fn func(name string, value []byte) bool) {
	off := le32(x.rec(i), 80)
	if off == noXattr {
		return
	}
	b := x.arena[off:]
	cnt := int(le32(b, 0))
	p := 4
	for k := 0; k < cnt; k++ {
		nl := int(binary.LittleEndian.Uint16(b[p:]))
		name := unsafe.String(&b[p+2], nl)
		p += 2 + nl
		vl := int(le32(b, p))
		val := b[p+4 : p+4+vl : p+4+vl]
		p += 4 + vl
		if !fn(name, val) {
			return
		}
	}
}

// Path returns the slash-separated path of entry i relative to the root
// ("" for the root).
func (x *Index) Path(i int) string {
	if i == 0 {
		return ""
	}
	var parts []string
	for i != 0 {
		parts = append(parts, x.Name(i))
		i = x.Parent(i)
	}
	n := len(parts) - 1
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for k := len(parts) - 1; k >= 0; k-- {
		b = append(b, parts[k]...)
		if k > 0 {
			b = append(b, '/')
		}
	}
	return string(b)
}

// MemBytes is the in-memory footprint of the loaded tables.
func (x *Index) MemBytes() int { return len(x.ents) + len(x.sorted) + len(x.arena) }

// ---- encoding ----

func putHeader(src Source, st StatFS, n uint32, bodyLen, payloadLen uint64, flags uint32) []byte {
	h := make([]byte, headerFixed+len(src.Root))
	copy(h, magic)
	le := binary.LittleEndian
	le.PutUint32(h[8:], Version)
	le.PutUint32(h[12:], flags)
	le.PutUint32(h[16:], n)
	le.PutUint32(h[20:], uint32(len(src.Root)))
	le.PutUint64(h[24:], bodyLen)
	le.PutUint64(h[32:], payloadLen)
	le.PutUint64(h[40:], src.Dev)
	le.PutUint64(h[48:], src.Ino)
	le.PutUint64(h[56:], uint64(src.Mtime))
	le.PutUint64(h[64:], uint64(src.Ctime))
	le.PutUint64(h[72:], src.Fingerprint)
	le.PutUint64(h[80:], uint64(src.BuiltAt.UnixNano()))
	le.PutUint32(h[88:], src.Dirs)
	le.PutUint32(h[92:], st.Bsize)
	le.PutUint64(h[96:], st.Blocks)
	le.PutUint64(h[104:], st.Bfree)
	le.PutUint64(h[112:], st.Bavail)
	le.PutUint64(h[120:], st.Files)
	le.PutUint64(h[128:], st.Ffree)
	le.PutUint32(h[136:], st.Namelen)
	le.PutUint32(h[140:], st.Frsize)
	copy(h[headerFixed:], src.Root)
	return h
}

// Encode serializes the index (compressed, checksummed) to w and returns
// the number of bytes written.
func (x *Index) Encode(w io.Writer) (int64, error) {
	body := make([]byte, 0, len(x.ents)+len(x.sorted)+len(x.arena))
	body = append(body, x.ents...)
	body = append(body, x.sorted...)
	body = append(body, x.arena...)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(2))
	if err != nil {
		return 0, err
	}
	payload := enc.EncodeAll(body, make([]byte, 0, len(body)/3))
	enc.Close()
	h := putHeader(x.Source, x.StatFS, uint32(x.n), uint64(len(body)), uint64(len(payload)), flagZstd)
	d := xxhash.New()
	d.Write(h)
	d.Write(payload)
	var tr [8]byte
	binary.LittleEndian.PutUint64(tr[:], d.Sum64())
	var total int64
	for _, b := range [][]byte{h, payload, tr[:]} {
		n, err := w.Write(b)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// WriteFile writes the index atomically (temp file + rename), so a mount
// reloading on SIGHUP never sees a half-written index.
func (x *Index) WriteFile(path string) (int64, error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, kerr.Wrap(kerr.KindOf(err), "metafs index", path, err)
	}
	n, err := x.Encode(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return n, kerr.Wrap(kerr.IO, "metafs index", path, err)
	}
	return n, nil
}

// ---- decoding ----

// ErrCorrupt is wrapped by every load error caused by a damaged file.
var ErrCorrupt = errors.New("index corrupted")

func corrupt(path, why string) error {
	return &marked{&kerr.Error{Kind: kerr.IO, Op: "metafs load", Path: path, Msg: "index corrupted: " + why}, ErrCorrupt}
}

// marked is a *kerr.Error that also matches a sentinel with errors.Is,
// without repeating the sentinel's text in the message.
type marked struct {
	ke   *kerr.Error
	mark error
}

func (e *marked) Error() string   { return e.ke.Error() }
func (e *marked) Unwrap() []error { return []error{e.ke, e.mark} }

// Load reads an index file with one sequential read, verifies its checksum
// and structure, and returns it ready to serve.
func Load(path string) (*Index, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, kerr.Wrap(kerr.KindOf(err), "metafs load", path, err)
	}
	defer f.Close()
	var size int64
	if fi, err := f.Stat(); err == nil {
		size = fi.Size()
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+512))
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, kerr.Wrap(kerr.IO, "metafs load", path, err)
	}
	x, err := Decode(buf.Bytes(), path)
	if err != nil {
		return nil, err
	}
	x.FileSize = int64(buf.Len())
	return x, nil
}

// Decode parses an index held in memory; name is used in error messages.
func Decode(data []byte, name string) (*Index, error) {
	if len(data) < headerFixed+8 || string(data[:8]) != magic {
		return nil, corrupt(name, "not a kaon metafs index (bad magic or too short)")
	}
	le := binary.LittleEndian
	sum := le.Uint64(data[len(data)-8:])
	if got := xxhash.Sum64(data[:len(data)-8]); got != sum {
		return nil, corrupt(name, fmt.Sprintf("checksum mismatch (stored %016x, computed %016x)", sum, got))
	}
	if v := le.Uint32(data[8:]); v != Version {
		return nil, &kerr.Error{Kind: kerr.Unsupported, Op: "metafs load", Path: name,
			Msg: fmt.Sprintf("index format version %d not supported (want %d); rebuild with `kaon metafs index`", v, Version)}
	}
	flags := le.Uint32(data[12:])
	n := le.Uint32(data[16:])
	rl := le.Uint32(data[20:])
	bodyLen := le.Uint64(data[24:])
	payLen := le.Uint64(data[32:])
	hl := uint64(headerFixed) + uint64(rl)
	if hl+payLen+8 != uint64(len(data)) || n == 0 || uint64(n) > maxEntries {
		return nil, corrupt(name, "inconsistent header lengths")
	}
	x := &Index{n: int(n)}
	x.Source = Source{
		Root: string(data[headerFixed:hl]),
		Dev:  le.Uint64(data[40:]), Ino: le.Uint64(data[48:]),
		Mtime: int64(le.Uint64(data[56:])), Ctime: int64(le.Uint64(data[64:])),
		Fingerprint: le.Uint64(data[72:]),
		BuiltAt:     time.Unix(0, int64(le.Uint64(data[80:]))),
		Dirs:        le.Uint32(data[88:]),
	}
	x.StatFS = StatFS{Bsize: le.Uint32(data[92:]), Blocks: le.Uint64(data[96:]), Bfree: le.Uint64(data[104:]),
		Bavail: le.Uint64(data[112:]), Files: le.Uint64(data[120:]), Ffree: le.Uint64(data[128:]),
		Namelen: le.Uint32(data[136:]), Frsize: le.Uint32(data[140:])}
	payload := data[hl : hl+payLen]
	var body []byte
	if flags&flagZstd != 0 {
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<34))
		if err != nil {
			return nil, err
		}
		body, err = dec.DecodeAll(payload, make([]byte, 0, bodyLen))
		dec.Close()
		if err != nil {
			return nil, corrupt(name, "payload does not decompress: "+err.Error())
		}
	} else {
		body = payload
	}
	need := uint64(n) * (recSize + 4)
	if uint64(len(body)) != bodyLen || bodyLen < need {
		return nil, corrupt(name, "body length mismatch")
	}
	x.ents = body[:uint64(n)*recSize]
	x.sorted = body[uint64(n)*recSize : need]
	x.arena = body[need:]
	if err := x.check(); err != nil {
		return nil, corrupt(name, err.Error())
	}
	return x, nil
}

// check validates every offset the accessors will follow, so accessors can
// index without bounds worries after a successful load.
func (x *Index) check() error {
	al := uint64(len(x.arena))
	if !x.IsDir(0) {
		return errors.New("root is not a directory")
	}
	for i := 0; i < x.n; i++ {
		r := x.rec(i)
		if p := le32(r, 0); int(p) >= x.n || (i > 0 && int(p) >= i) {
			return fmt.Errorf("entry %d: bad parent %d", i, p)
		}
		if off, l := uint64(le32(r, 4)), uint64(binary.LittleEndian.Uint16(r[84:])); off+l > al || (i > 0 && l == 0) {
			return fmt.Errorf("entry %d: bad name", i)
		}
		a0, a1 := uint64(le32(r, 72)), uint64(le32(r, 76))
		switch le32(r, 8) & 0o170000 {
		case 0o040000:
			if a0+a1 > uint64(x.n) || (a1 > 0 && int(a0) <= i) {
				return fmt.Errorf("entry %d: bad child range", i)
			}
			for k := a0; k < a0+a1; k++ {
				if c := le32(x.sorted, int(4*k)); uint64(c) < a0 || uint64(c) >= a0+a1 || int(le32(x.rec(int(c)), 0)) != i {
					return fmt.Errorf("entry %d: bad sorted child table", i)
				}
			}
		case 0o120000:
			if a0+a1 > al {
				return fmt.Errorf("entry %d: bad symlink target", i)
			}
		}
		if off := le32(r, 80); off != noXattr {
			if err := checkXattrBlob(x.arena, uint64(off)); err != nil {
				return fmt.Errorf("entry %d: %v", i, err)
			}
		}
	}
	return nil
}

func checkXattrBlob(a []byte, off uint64) error {
	al := uint64(len(a))
	if off+4 > al {
		return errors.New("bad xattr blob")
	}
	cnt := uint64(le32(a, int(off)))
	p := off + 4
	for k := uint64(0); k < cnt; k++ {
		if p+2 > al {
			return errors.New("bad xattr blob")
		}
		p += 2 + uint64(binary.LittleEndian.Uint16(a[p:]))
		if p+4 > al {
			return errors.New("bad xattr blob")
		}
		p += 4 + uint64(le32(a, int(p)))
		if p > al {
			return errors.New("bad xattr blob")
		}
	}
	return nil
}

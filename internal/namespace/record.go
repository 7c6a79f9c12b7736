package namespace

// Key schema (version 1). All integers big-endian so keys sort numerically.
//
//	"v"                        -> schema version, decimal text ("1")
//	"S"                        -> id high-water mark (8 bytes): ids below it may be in use
//	"I" id(8)                  -> container: its full record (first byte: its version)
//	                              file: 'f' + parent(8) + name
//	"D" parent(8) name         -> 'd' + cid(8)   for a container
//	                              'f' + record  for a file (one Get serves a stat)
//	"P" fid(8)                 -> pending upload: its record (parent and name inside);
//	                              a conversion's staged copy has xattr sys.kaon.convert-of
//	"X" fsid(4) fid(8) idx(2)  -> physical file to delete on filesystem fsid; empty,
//	                              or not before unix ns(8) (deletion.go)
//	"M" to(4) fid(8) idx(2)    -> stripe idx of fid being copied to filesystem to:
//	                              from fsid(4) started unix ns(8) (move.go)
//	"F" fsid(4)                -> filesystem registration (JSON, filesystems.go)
//	"G" name                   -> scheduling group settings (JSON, groups.go)
//	"N" name                   -> space definition (JSON, spaces.go)
//	"Q" cid(8) kind(1) id(4)   -> quota limit of quota node cid: bytes(8) files(8)
//	                              kind 'u' user, 'g' group, 'p' project (id 0)
//	"U" cid(8) kind(1) id(4)   -> usage counted in quota node cid: bytes(8) files(8)
//
// A file becomes visible only when Commit moves its pending record to "D"
// and "I" in one atomic batch, so a crash never leaves a half-written file
// in the namespace.
//
// Records (Inode.encode), version 2; version 1 records (every field, names
// and hex checksums as text) are still read. A replicated store holds
// every byte three times and etcd's per-key overhead besides, so the
// record is compact: a plain file's directory entry was 100 bytes in
// version 1 and is 47 in version 2 (TestRecordSize, docs/DESIGN-NOTES.md).
//
//	version(1) flags(1)         1 container, 2 name and parent omitted (a
//	                            directory entry's key holds them)
//	id [parent] mode uid gid    uvarints
//	ctime                       varint (unix ns); mtime, btime: varint
//	                            differences from ctime
//	size                        varint
//	containers: treesize treefiles treedirs (varints), treemtime (varint
//	                            difference from ctime)
//	[name] layout               strings (uvarint length, bytes)
//	checksums                   count, then per entry: uvarint type (index+1
//	                            in checksumCodes, or 0 and the name as a
//	                            string), uvarint len<<1|hex and the value
//	                            (hex: its bytes decoded; else as text)
//	xattrs                      count, then name and value strings
//	locations                   count, then uvarint filesystem ids
//	[data]                      with flag 4 (files updated in place): data
//	                            version (uvarint), the tag of the update
//	                            that made it (uvarint), then the stale
//	                            stripes: count, then uvarint stripe indexes
//	[target]                    with flag 8 (a symbolic link): its target
//	                            (string), kept verbatim. A link is stored
//	                            as a file entry without layout, stripes or
//	                            checksums; its size is the target's length

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"sort"
)

// SchemaVersion is written to "v"; Open refuses any other value.
const SchemaVersion = "1"

// Inode is one file, container or symbolic link (a file entry with a
// Target and no data).
type Inode struct {
	ID     uint64
	Parent uint64
	Name   string
	IsDir  bool
	Mode   uint32 // permission bits
	UID    uint32
	GID    uint32
	CTime  int64 // unix ns
	MTime  int64
	BTime  int64
	XAttrs map[string]string

	// files
	Size      int64
	Layout    string
	Checksums map[string]string // type -> lowercase hex
	Locations []uint32          // filesystem ids, index = stripe/replica number
	// DataVersion counts the committed changes of the file's bytes (0 as
	// uploaded; each update session closed, each truncation: one more).
	DataVersion uint64
	// DataTag is the tag the storage server gave the update that made
	// DataVersion (so it can tell, after losing the answer, whether its
	// own commit went through).
	DataTag uint64
	// Stale are the stripes (indexes into Locations) that missed an
	// update: never read, rebuilt by fsck from current ones.
	Stale []int
	// Target is a symbolic link's target ("" for files and containers),
	// as it was given: the namespace never interprets it.
	Target string

	// containers: subtree accounting, including the container's own children
	TreeSize  int64
	TreeFiles int64
	TreeDirs  int64
	TreeMTime int64
}

// clone returns a deep copy so callers never share cached state.
// CurrentChecksums are those of n's checksums that describe its content
// now: an update leaves the types it could not recompute empty until one
// is computed again, and an empty value is never the file's checksum.
func (n *Inode) CurrentChecksums() map[string]string {
	var out map[string]string
	for t, v := range n.Checksums {
		if v != "" {
			if out == nil {
				out = make(map[string]string, len(n.Checksums))
			}
			out[t] = v
		}
	}
	return out
}

// IsLink says whether n is a symbolic link.
func (n *Inode) IsLink() bool { return n.Target != "" }

func (n *Inode) clone() *Inode {
	c := *n
	c.XAttrs = cloneMap(n.XAttrs)
	c.Checksums = cloneMap(n.Checksums)
	c.Locations = append([]uint32(nil), n.Locations...)
	c.Stale = slices.Clone(n.Stale)
	return &c
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

const recordVersion = 2

// Record flags.
const (
	flagDir    = 1
	flagNoName = 2
	flagData   = 4 // data version and stale stripes follow the locations
	flagLink   = 8 // a symbolic link: its target ends the record
)

// checksumCodes numbers checksum types in records; never reorder it.
var checksumCodes = []string{"adler32", "crc32c", "md5", "sha256", "xxhash64"}

// encode is the record with name and parent (container records, pending
// uploads).
func (n *Inode) encode(b []byte) []byte { return n.encodeRecord(b, true) }

// encodeEntry is a file's record as its directory entry holds it: its key
// names the parent and the name.
func (n *Inode) encodeEntry(b []byte) []byte { return n.encodeRecord(b, false) }

func (n *Inode) encodeRecord(b []byte, named bool) []byte {
	flags := byte(0)
	if n.IsDir {
		flags |= flagDir
	}
	if !named {
		flags |= flagNoName
	}
	if n.DataVersion > 0 || len(n.Stale) > 0 {
		flags |= flagData
	}
	if n.IsLink() {
		flags |= flagLink
	}
	b = append(b, recordVersion, flags)
	b = binary.AppendUvarint(b, n.ID)
	if named {
		b = binary.AppendUvarint(b, n.Parent)
	}
	for _, v := range []uint32{n.Mode, n.UID, n.GID} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	b = binary.AppendVarint(b, n.CTime)
	b = binary.AppendVarint(b, n.MTime-n.CTime)
	b = binary.AppendVarint(b, n.BTime-n.CTime)
	b = binary.AppendVarint(b, n.Size)
	if n.IsDir {
		b = binary.AppendVarint(b, n.TreeSize)
		b = binary.AppendVarint(b, n.TreeFiles)
		b = binary.AppendVarint(b, n.TreeDirs)
		b = binary.AppendVarint(b, n.TreeMTime-n.CTime)
	}
	if named {
		b = appendString(b, n.Name)
	}
	b = appendString(b, n.Layout)
	b = appendChecksums(b, n.Checksums)
	b = appendMap(b, n.XAttrs)
	b = binary.AppendUvarint(b, uint64(len(n.Locations)))
	for _, l := range n.Locations {
		b = binary.AppendUvarint(b, uint64(l))
	}
	if flags&flagData != 0 {
		b = binary.AppendUvarint(b, n.DataVersion)
		b = binary.AppendUvarint(b, n.DataTag)
		b = binary.AppendUvarint(b, uint64(len(n.Stale)))
		for _, i := range n.Stale {
			b = binary.AppendUvarint(b, uint64(i))
		}
	}
	if flags&flagLink != 0 {
		b = appendString(b, n.Target)
	}
	return b
}

func appendChecksums(b []byte, m map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	types := make([]string, 0, len(m))
	for t := range m {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range types {
		if i := slices.Index(checksumCodes, t); i >= 0 {
			b = binary.AppendUvarint(b, uint64(i+1))
		} else {
			b = binary.AppendUvarint(b, 0)
			b = appendString(b, t)
		}
		v := m[t]
		if raw, err := hex.DecodeString(v); err == nil && hex.EncodeToString(raw) == v {
			b = binary.AppendUvarint(b, uint64(len(raw))<<1|1)
			b = append(b, raw...)
		} else {
			b = binary.AppendUvarint(b, uint64(len(v))<<1)
			b = append(b, v...)
		}
	}
	return b
}

var errCorrupt = errors.New("namespace: corrupt record")

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err, d.b = errCorrupt, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err, d.b = errCorrupt, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	l := d.uvarint()
	if uint64(len(d.b)) < l {
		d.err, d.b = errCorrupt, nil
		return ""
	}
	s := string(d.b[:l])
	d.b = d.b[l:]
	return s
}

func (d *decoder) strMap() map[string]string {
	n := d.uvarint()
	if n == 0 || n > uint64(len(d.b)) {
		if n > uint64(len(d.b)) {
			d.err = errCorrupt
		}
		return nil
	}
	m := make(map[string]string, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.str()
		m[k] = d.str()
	}
	return m
}

func decodeInode(b []byte) (*Inode, error) {
	if len(b) < 2 {
		return nil, errCorrupt
	}
	switch b[0] {
	case 1:
		return decodeV1(b)
	case recordVersion:
	default:
		return nil, errCorrupt
	}
	flags := b[1]
	n := &Inode{IsDir: flags&flagDir != 0}
	d := &decoder{b: b[2:]}
	n.ID = d.uvarint()
	if flags&flagNoName == 0 {
		n.Parent = d.uvarint()
	}
	n.Mode, n.UID, n.GID = uint32(d.uvarint()), uint32(d.uvarint()), uint32(d.uvarint())
	n.CTime = d.varint()
	n.MTime = n.CTime + d.varint()
	n.BTime = n.CTime + d.varint()
	n.Size = d.varint()
	if n.IsDir {
		n.TreeSize, n.TreeFiles, n.TreeDirs = d.varint(), d.varint(), d.varint()
		n.TreeMTime = n.CTime + d.varint()
	}
	if flags&flagNoName == 0 {
		n.Name = d.str()
	}
	n.Layout = d.str()
	n.Checksums = d.checksums()
	n.XAttrs = d.strMap()
	n.Locations = d.locations()
	if flags&flagData != 0 {
		n.DataVersion = d.uvarint()
		n.DataTag = d.uvarint()
		cnt := d.uvarint()
		if cnt > uint64(len(d.b)) {
			return n, errCorrupt
		}
		for i := uint64(0); i < cnt; i++ {
			n.Stale = append(n.Stale, int(d.uvarint()))
		}
	}
	if flags&flagLink != 0 {
		if n.Target = d.str(); n.Target == "" && d.err == nil {
			return n, errCorrupt
		}
	}
	return n, d.err
}

func (d *decoder) checksums() map[string]string {
	cnt := d.uvarint()
	if cnt == 0 || cnt > uint64(len(d.b)) {
		if cnt > uint64(len(d.b)) {
			d.err = errCorrupt
		}
		return nil
	}
	m := make(map[string]string, cnt)
	for i := uint64(0); i < cnt && d.err == nil; i++ {
		var t string
		switch c := d.uvarint(); {
		case c == 0:
			t = d.str()
		case c <= uint64(len(checksumCodes)):
			t = checksumCodes[c-1]
		default:
			d.err = errCorrupt
			return nil
		}
		l := d.uvarint()
		if uint64(len(d.b)) < l>>1 {
			d.err, d.b = errCorrupt, nil
			return nil
		}
		v := d.b[:l>>1]
		d.b = d.b[l>>1:]
		if l&1 == 1 {
			m[t] = hex.EncodeToString(v)
		} else {
			m[t] = string(v)
		}
	}
	return m
}

func (d *decoder) locations() []uint32 {
	cnt := d.uvarint()
	if cnt == 0 {
		return nil
	}
	if cnt > uint64(len(d.b)) {
		d.err = errCorrupt
		return nil
	}
	locs := make([]uint32, cnt)
	for i := range locs {
		locs[i] = uint32(d.uvarint())
	}
	return locs
}

// decodeV1 reads a version 1 record: every field in order, names and
// checksum values as text.
func decodeV1(b []byte) (*Inode, error) {
	n := &Inode{IsDir: b[1]&1 != 0}
	d := &decoder{b: b[2:]}
	n.ID, n.Parent = d.uvarint(), d.uvarint()
	n.Mode, n.UID, n.GID = uint32(d.uvarint()), uint32(d.uvarint()), uint32(d.uvarint())
	n.CTime, n.MTime, n.BTime = d.varint(), d.varint(), d.varint()
	n.Size, n.TreeSize, n.TreeFiles, n.TreeDirs, n.TreeMTime = d.varint(), d.varint(), d.varint(), d.varint(), d.varint()
	n.Name = d.str()
	n.Layout = d.str()
	n.Checksums = d.strMap()
	n.XAttrs = d.strMap()
	n.Locations = d.locations()
	return n, d.err
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendMap(b []byte, m map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, m[k])
	}
	return b
}

func u64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

func inodeKey(id uint64) []byte { return u64([]byte{'I'}, id) }

func dentryKey(parent uint64, name string) []byte {
	k := make([]byte, 0, 9+len(name))
	k = u64(append(k, 'D'), parent)
	return append(k, name...)
}

func dentryPrefix(parent uint64) []byte { return u64([]byte{'D'}, parent) }

func pendingKey(fid uint64) []byte { return u64([]byte{'P'}, fid) }

func deletionKey(fsid uint32, fid uint64, idx int) []byte {
	k := binary.BigEndian.AppendUint32([]byte{'X'}, fsid)
	k = u64(k, fid)
	return binary.BigEndian.AppendUint16(k, uint16(idx))
}

func fileIndex(parent uint64, name string) []byte { return append(u64([]byte{'f'}, parent), name...) }

// parseFileIndex decodes a fileIndex value; ok is false for a container's
// inode record.
func parseFileIndex(v []byte) (parent uint64, name string, ok bool) {
	if len(v) < 9 || v[0] != 'f' {
		return 0, "", false
	}
	return binary.BigEndian.Uint64(v[1:]), string(v[9:]), true
}

// isLinkEntry says whether directory entry value v (as putFile writes
// it) is a symbolic link's, without decoding the record.
func isLinkEntry(v []byte) bool {
	return len(v) >= 3 && v[0] == 'f' && v[1] == recordVersion && v[2]&flagLink != 0
}

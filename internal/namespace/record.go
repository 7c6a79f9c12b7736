package namespace

// Key schema (version 1). All integers big-endian so keys sort numerically.
//
//	"v"                        -> schema version, decimal text ("1")
//	"S"                        -> id high-water mark (8 bytes): ids below it may be in use
//	"I" id(8)                  -> container: its full record (first byte 1)
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

import (
	"encoding/binary"
	"errors"
	"sort"
)

// SchemaVersion is written to "v"; Open refuses any other value.
const SchemaVersion = "1"

// Inode is one file or container.
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

	// containers: subtree accounting, including the container's own children
	TreeSize  int64
	TreeFiles int64
	TreeDirs  int64
	TreeMTime int64
}

// clone returns a deep copy so callers never share cached state.
func (n *Inode) clone() *Inode {
	c := *n
	c.XAttrs = cloneMap(n.XAttrs)
	c.Checksums = cloneMap(n.Checksums)
	c.Locations = append([]uint32(nil), n.Locations...)
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

const recordVersion = 1

func (n *Inode) encode(b []byte) []byte {
	b = append(b, recordVersion)
	flags := byte(0)
	if n.IsDir {
		flags = 1
	}
	b = append(b, flags)
	for _, v := range []uint64{n.ID, n.Parent, uint64(n.Mode), uint64(n.UID), uint64(n.GID)} {
		b = binary.AppendUvarint(b, v)
	}
	for _, v := range []int64{n.CTime, n.MTime, n.BTime, n.Size, n.TreeSize, n.TreeFiles, n.TreeDirs, n.TreeMTime} {
		b = binary.AppendVarint(b, v)
	}
	b = appendString(b, n.Name)
	b = appendString(b, n.Layout)
	b = appendMap(b, n.Checksums)
	b = appendMap(b, n.XAttrs)
	b = binary.AppendUvarint(b, uint64(len(n.Locations)))
	for _, l := range n.Locations {
		b = binary.AppendUvarint(b, uint64(l))
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
	if len(b) < 2 || b[0] != recordVersion {
		return nil, errCorrupt
	}
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
	if cnt := d.uvarint(); cnt > 0 && cnt <= uint64(len(d.b)) {
		n.Locations = make([]uint32, cnt)
		for i := range n.Locations {
			n.Locations[i] = uint32(d.uvarint())
		}
	} else if cnt > 0 {
		d.err = errCorrupt
	}
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

package namespace

import (
	"encoding/binary"
	"reflect"
	"testing"
	"time"
)

// encodeV1 is the version 1 encoder, kept to check that such records are
// still read.
func encodeV1(n *Inode) []byte {
	b := []byte{1, 0}
	if n.IsDir {
		b[1] = 1
	}
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

func TestRecordRoundTrip(t *testing.T) {
	now := time.Now().UnixNano()
	file := &Inode{ID: 1234567, Parent: 1001, Name: "f00000001", Mode: 0o644, UID: 1000, GID: 100, CTime: now, MTime: now + 5, BTime: now - 7,
		Size: 1 << 20, Layout: "ec:4+2", Locations: []uint32{3, 9, 1, 70000, 5, 6},
		Checksums: map[string]string{"adler32": "00ab0001", "crc32c": "", "md5": "0123456789abcdef0123456789abcdef", "sha256": "NOT-HEX", "whirlpool": "abc"},
		XAttrs:    map[string]string{"user.x": "1"}}
	dir := &Inode{ID: 1001, Parent: 1, Name: "d001", IsDir: true, Mode: 0o755, CTime: now, MTime: now, BTime: now,
		TreeSize: 1 << 40, TreeFiles: 1000, TreeDirs: 3, TreeMTime: now - 1000, XAttrs: map[string]string{"sys.forced.layout": "plain"}}
	for _, n := range []*Inode{file, dir} {
		for _, enc := range [][]byte{n.encode(nil), encodeV1(n)} {
			got, err := decodeInode(enc)
			if err != nil || !reflect.DeepEqual(got, n) {
				t.Fatalf("version %d record of %s: %+v %v, want %+v", enc[0], n.Name, got, err, n)
			}
		}
	}
	got, err := decodeInode(file.encodeEntry(nil))
	got.Parent, got.Name = file.Parent, file.Name // the entry's key holds them
	if err != nil || !reflect.DeepEqual(got, file) {
		t.Fatalf("entry record: %+v %v", got, err)
	}
	for i := 1; i < len(file.encode(nil)); i++ {
		if _, err := decodeInode(file.encode(nil)[:i]); err == nil {
			t.Fatalf("record cut at %d bytes decoded without error", i)
		}
	}
}

// A plain file with the default checksums, as a directory entry holds it:
// what a replicated store keeps per file besides its keys.
func TestRecordSize(t *testing.T) {
	now := time.Now().UnixNano()
	f := &Inode{ID: 12345678, Parent: 1001, Name: "f00000001", Mode: 0o644, CTime: now, MTime: now, BTime: now, Size: 1 << 20,
		Layout: "plain", Locations: []uint32{3}, Checksums: map[string]string{"adler32": "0a0b0c0d", "crc32c": "01020304"}}
	v1, v2 := len(encodeV1(f)), len(f.encodeEntry(nil))
	t.Logf("file record: version 1 %d bytes, version 2 %d bytes", v1, v2)
	if v2 > 48 {
		t.Fatalf("version 2 entry record is %d bytes", v2)
	}
}

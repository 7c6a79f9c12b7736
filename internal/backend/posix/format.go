package posix

// On-disk format of a POSIX filesystem, version 3 (data directories
// written by earlier Kaon versions are read as they are):
//
//	<root>/.kaon-fsid               identity marker, "fsid=N\nuuid=U\n"
//	                                (version 1: a bare "N\n", no uuid)
//	<root>/<%08x fid/10000>/        bucket directory, mode 0700
//	<root>/<bucket>/<%08x fid>      one stripe or replica, mode 0600, with
//	                                the user.kaon.* xattrs below
//	<root>/<bucket>/<%08x fid>.sums         its block sums (version 3)
//	<root>/<bucket>/<%08x fid>.sums.tmp     ones being written
//	<root>/<bucket>/<%08x fid>.journal      a prepared in-place update of it
//	<root>/<bucket>/<%08x fid>.journal.tmp  one being written (journal.go)
//
// The name follows the file id, not the path, so renames never touch data.
// Two stripes of one file never share a filesystem, so the stripe index
// lives in an xattr, not in the name. %08x is a minimum width: fids above
// 2^32 have longer names.
//
// A stripe file (version 2) is its data followed by the block sums of
// the data and a footer:
//
//	stripe  := data[L] sums[4*N] footer[32]          N = ceil(L / B)
//	sums[i] := crc32c(data[i*B : min((i+1)*B, L)])   uint32 little-endian
//	footer  := "KAONSUMS" version:u32 B:u32 L:u64 0:u32 crc32c(footer[0:28]):u32
//
// all integers little-endian, version 1, B the block size (64 KiB for new
// stripes, checksum.BlockSize). The data starts at offset 0, so a stripe
// file's first L bytes are the replica (tools, sendfile of ranges), and
// block i's sum sits at a fixed place, so rewriting blocks rewrites their
// sums in place (Store.Rewrite). A file is version 2 only if its last 32
// bytes are a footer (magic, crc and version right) whose L and B account
// for the file's length exactly; anything else is version 1, data only:
// stripes written before version 2, erasure-coded stripes (their frames
// carry a crc32c each: written with CreateOptions.Framed, no sums), and
// one whose footer rotted, which then reads with the wrong length and is
// found by its size (fsck d_mem_sz_diff). AddBlockSums turns a version 1
// replica into version 2 by appending sums and footer; a footer of a
// version other than 1 is refused (a newer Kaon wrote it). A filesystem
// set to keep no block sums (backend.Settings.NoBlockSums) writes
// version 1 replicas and AddBlockSums leaves them so.
//
// A version 3 stripe keeps its sums beside it, in <fid>.sums:
//
//	sums file := sums[4*N] footer[32]       the footer as above, L and B
//
// valid if its footer is and the file is 4*N+32 bytes long. The stripe
// file is its data, L bytes, then possibly a tail: bytes an append
// wrote past L before its commit (tail.go), never read, cut by the next
// prepare, discard or apply. A stripe with a sums file is version 3
// whatever its own last bytes are (a conversion a crash cut short keeps
// its old trailer as a tail); a sums file that is not valid fails opens
// (the stripe's length is not known). Version 2 stripes become version 3
// at their first append (tail.go: convert); new stripes are written as
// version 2 (one file, one fsync per upload). A Create removes a sums
// file a crash left under its fid (Remove removes the stripe first).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/checksum"
)

// PhysPath is where the stripe of fid lives under root.
func PhysPath(root string, fid uint64) string {
	return filepath.Join(root, fmt.Sprintf("%08x", fid/10000), fmt.Sprintf("%08x", fid))
}

// parseName returns the fid of the stripe at <bucket>/<name>, and false
// for anything that is not a stripe name in its right bucket.
func parseName(bucket, name string) (uint64, bool) {
	if len(name) < 8 {
		return 0, false
	}
	fid, err := strconv.ParseUint(name, 16, 64)
	if err != nil || fmt.Sprintf("%08x", fid) != name || fmt.Sprintf("%08x", fid/10000) != bucket {
		return 0, false
	}
	return fid, true
}

// Extended attributes on every stripe: its backend.Meta. Values are text;
// checksums are "type=hex" pairs joined by commas.
const (
	xaFid       = "user.kaon.fid"    // decimal
	xaStripe    = "user.kaon.stripe" // decimal stripe index
	xaLayout    = "user.kaon.layout"
	xaSize      = "user.kaon.size" // logical file size, decimal
	xaChecksums = "user.kaon.checksums"
	xaPath      = "user.kaon.path"    // path at write time, a hint for fsck only
	xaVersion   = "user.kaon.version" // data version, decimal; absent: 0 (never updated)
	// xaDamaged marks a stripe whose bytes are known damaged (MarkDamaged):
	// why, as text. Set by the storage server when a block fails and no
	// good copy could repair it, and by scrubs; Rewrite removes it.
	xaDamaged = "user.kaon.damaged"
)

// Block sums (version 2 stripes).
const (
	footerSize    = 32
	footerMagic   = "KAONSUMS"
	footerVersion = 1
)

// sumsInfo is what a stripe's footer says.
type sumsInfo struct {
	block int   // block size
	len   int64 // data bytes
}

// table is the offset of the sums of blocks.
func (t sumsInfo) table() int64 { return t.len }

// fileSize is the length of a version 2 stripe of t.len data bytes.
func (t sumsInfo) fileSize() int64 {
	return t.len + 4*checksum.Blocks(t.len, t.block) + footerSize
}

func encodeFooter(t sumsInfo) []byte {
	b := make([]byte, footerSize)
	copy(b, footerMagic)
	binary.LittleEndian.PutUint32(b[8:], footerVersion)
	binary.LittleEndian.PutUint32(b[12:], uint32(t.block))
	binary.LittleEndian.PutUint64(b[16:], uint64(t.len))
	binary.LittleEndian.PutUint32(b[28:], checksum.CRC32CSum(b[:28]))
	return b
}

// errNewerFormat: a footer of a version this Kaon does not know.
var errNewerFormat = errors.New("stripe has block sums of a newer format than this Kaon reads")

// parseFooter reads the footer of the stripe file f of size bytes: ok is
// false for a version 1 stripe (no valid footer).
func parseFooter(f *os.File, size int64) (t sumsInfo, ok bool, err error) {
	return decodeFooter(f, size, func(t sumsInfo) int64 { return t.fileSize() })
}

// decodeFooter reads the footer at the end of f (size bytes), valid if
// the file is as long as want says a file of its sums is.
func decodeFooter(f *os.File, size int64, want func(sumsInfo) int64) (t sumsInfo, ok bool, err error) {
	if size < footerSize {
		return t, false, nil
	}
	b := make([]byte, footerSize)
	if _, err := f.ReadAt(b, size-footerSize); err != nil {
		return t, false, err
	}
	if string(b[:8]) != footerMagic || binary.LittleEndian.Uint32(b[28:]) != checksum.CRC32CSum(b[:28]) {
		return t, false, nil
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != footerVersion {
		return t, false, fmt.Errorf("%w (version %d)", errNewerFormat, v)
	}
	t = sumsInfo{block: int(binary.LittleEndian.Uint32(b[12:])), len: int64(binary.LittleEndian.Uint64(b[16:]))}
	if t.block < checksum.MinBlockSize || t.block > checksum.MaxBlockSize || t.len < 0 || want(t) != size {
		return sumsInfo{}, false, nil
	}
	return t, true, nil
}

// sideSize is the length of the sums file of t.len data bytes.
func (t sumsInfo) sideSize() int64 { return 4*checksum.Blocks(t.len, t.block) + footerSize }

// errBadSums: a sums file that is not one (cut short, or its footer rotted).
var errBadSums = errors.New("the stripe's block sums file is damaged (no valid footer)")

// stripeSums is where the block sums of an open stripe file are: after
// its data (version 2), in its sums file (version 3: side), or nowhere
// (version 1).
type stripeSums struct {
	size   int64 // of the stripe file
	t      sumsInfo
	summed bool
	side   *os.File // version 3: the sums file, its table at offset 0
}

// dataLen is the stripe's data bytes: t.len where it has sums (a
// version 3 stripe file may hold more: a tail no reader looks at), the
// file's length where not.
func (x stripeSums) dataLen() int64 {
	if x.summed {
		return x.t.len
	}
	return x.size
}

// table is the file and offset of the sums table; f is the stripe file.
func (x stripeSums) table(f *os.File) (*os.File, int64) {
	if x.side != nil {
		return x.side, 0
	}
	return f, x.t.table()
}

func (x stripeSums) close() {
	if x.side != nil {
		x.side.Close()
	}
}

// sumsOf finds the block sums of the stripe file f at p: its sums file
// if there is one (opened read-write when rw), else its trailer. A sums
// file that is there but damaged is an error: the stripe's length is
// not known (its file may hold a tail).
func sumsOf(f *os.File, p string, rw bool) (stripeSums, error) {
	var x stripeSums
	st, err := f.Stat()
	if err != nil {
		return x, err
	}
	x.size = st.Size()
	flag := os.O_RDONLY
	if rw {
		flag = os.O_RDWR
	}
	side, err := os.OpenFile(p+".sums", flag, 0)
	switch {
	case err == nil:
		x.side = side
		sst, err := side.Stat()
		if err == nil {
			x.t, x.summed, err = decodeFooter(side, sst.Size(), sumsInfo.sideSize)
		}
		if err == nil && !x.summed {
			err = errBadSums
		}
		if err != nil {
			side.Close()
			return stripeSums{}, err
		}
		return x, nil
	case !errors.Is(err, os.ErrNotExist):
		return x, err
	}
	x.t, x.summed, err = parseFooter(f, x.size)
	return x, err
}

// writeSums replaces the sums file at p (the stripe's path) with the
// table sums of t's shape, durably: written beside, synced, renamed over
// it, the directory synced. crashed is called after the sync and after
// the rename (tests stop there).
func writeSums(p string, t sumsInfo, sums []byte, crashed func(step string) error) error {
	tmp := p + ".sums.tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(sums, encodeFooter(t)...))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = crashed("sums")
	}
	if err == nil {
		err = os.Rename(tmp, p+".sums")
	}
	if err == nil {
		err = syncDir(filepath.Dir(p))
	}
	if err != nil {
		if !errors.Is(err, errCrash) {
			os.Remove(tmp)
		}
		return err
	}
	return crashed("footer")
}

// trailer is what follows the data of a new stripe: its sums and footer.
func trailer(s *checksum.BlockSummer, block int) []byte {
	return append(checksum.PutSums(s.Sums()), encodeFooter(sumsInfo{block: block, len: s.Len()})...)
}

func writeMeta(f *os.File, m backend.Meta) error {
	for k, v := range map[string]string{
		xaFid: strconv.FormatUint(m.Fid, 10), xaStripe: strconv.Itoa(m.Stripe), xaLayout: m.Layout,
		xaSize: strconv.FormatInt(m.Size, 10), xaChecksums: encodeSums(m.Checksums), xaPath: m.Path,
	} {
		if err := unix.Fsetxattr(int(f.Fd()), k, []byte(v), 0); err != nil {
			return fmt.Errorf("set %s: %w", k, err)
		}
	}
	if m.Version > 0 {
		if err := unix.Fsetxattr(int(f.Fd()), xaVersion, []byte(strconv.FormatUint(m.Version, 10)), 0); err != nil {
			return fmt.Errorf("set %s: %w", xaVersion, err)
		}
	}
	return nil
}

// errNoMeta: the file exists but carries no Kaon metadata (being written,
// or damaged).
var errNoMeta = fmt.Errorf("no %s attribute (being written, or damaged)", xaFid)

func readMeta(path string) (backend.Meta, error) {
	var m backend.Meta
	buf := make([]byte, 4096)
	get := func(k string) (string, error) {
		n, err := unix.Getxattr(path, k, buf)
		if err == unix.ERANGE { // a long path hint
			if n, err = unix.Getxattr(path, k, nil); err == nil {
				buf = make([]byte, n)
				n, err = unix.Getxattr(path, k, buf)
			}
		}
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	v, err := get(xaFid)
	if err == unix.ENODATA {
		return m, errNoMeta
	}
	if err != nil {
		return m, err
	}
	if m.Fid, err = strconv.ParseUint(v, 10, 64); err != nil {
		return m, fmt.Errorf("bad %s %q", xaFid, v)
	}
	v, _ = get(xaStripe)
	m.Stripe, _ = strconv.Atoi(v)
	v, _ = get(xaSize)
	m.Size, _ = strconv.ParseInt(v, 10, 64)
	m.Layout, _ = get(xaLayout)
	m.Path, _ = get(xaPath)
	v, _ = get(xaChecksums)
	m.Checksums = decodeSums(v)
	if v, err := get(xaVersion); err == nil {
		if m.Version, err = strconv.ParseUint(v, 10, 64); err != nil {
			return m, fmt.Errorf("bad %s %q", xaVersion, v)
		}
	}
	return m, nil
}

func encodeSums(s map[string]string) string {
	var parts []string
	for k, v := range s {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func decodeSums(s string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// markerName is the identity marker at the root of every filesystem:
// written once, when the namespace registers the filesystem, and checked
// on every heartbeat.
const markerName = ".kaon-fsid"

// ReadIdentity reads the identity marker of the filesystem at root,
// writing nothing (a client that reaches the directory itself checks it
// is the filesystem a capability names: kaon mount's direct path).
func ReadIdentity(root string) (backend.Identity, error) { return readMarker(root) }

func readMarker(root string) (backend.Identity, error) {
	b, err := os.ReadFile(filepath.Join(root, markerName))
	if err != nil {
		return backend.Identity{}, err
	}
	text := strings.TrimSpace(string(b))
	if n, err := strconv.ParseUint(text, 10, 32); err == nil {
		return backend.Identity{FsID: uint32(n)}, nil
	}
	var id backend.Identity
	for _, line := range strings.Split(text, "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "fsid":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return backend.Identity{}, fmt.Errorf("bad fsid in %s", markerName)
			}
			id.FsID = uint32(n)
		case "uuid":
			id.UUID = v
		}
	}
	if id.FsID == 0 {
		return backend.Identity{}, fmt.Errorf("no fsid in %s", markerName)
	}
	return id, nil
}

// writeMarker replaces the marker atomically and durably.
func writeMarker(root string, id backend.Identity) error {
	tmp := filepath.Join(root, "."+markerName+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "fsid=%d\nuuid=%s\n", id.FsID, id.UUID)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(root, markerName))
	}
	if err == nil {
		err = syncDir(root)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

package posix

// On-disk format of a POSIX filesystem (unchanged since version 1; data
// directories written by earlier Kaon versions are read as they are):
//
//	<root>/.kaon-fsid               identity marker, "fsid=N\nuuid=U\n"
//	                                (version 1: a bare "N\n", no uuid)
//	<root>/<%08x fid/10000>/        bucket directory, mode 0700
//	<root>/<bucket>/<%08x fid>      one stripe or replica, mode 0600, with
//	                                the user.kaon.* xattrs below
//	<root>/<bucket>/<%08x fid>.journal      a prepared in-place update of it
//	<root>/<bucket>/<%08x fid>.journal.tmp  one being written (journal.go)
//
// The name follows the file id, not the path, so renames never touch data.
// Two stripes of one file never share a filesystem, so the stripe index
// lives in an xattr, not in the name. %08x is a minimum width: fids above
// 2^32 have longer names.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/backend"
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
)

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

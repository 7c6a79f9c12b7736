package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PhysPath is where stripe/replica data of fid lives on a filesystem:
// <root>/<%08x of fid/10000>/<%08x of fid>. The name follows the inode, not
// the path, so renames never touch data. Two stripes of one file never share
// a filesystem, so the stripe index lives in an xattr, not the name.
func PhysPath(root string, fid uint64) string {
	return filepath.Join(root, fmt.Sprintf("%08x", fid/10000), fmt.Sprintf("%08x", fid))
}

// Extended attributes on every physical file: enough to identify it and
// check it without the namespace.
const (
	xaFid       = "user.kaon.fid"
	xaStripe    = "user.kaon.stripe"
	xaLayout    = "user.kaon.layout"
	xaSize      = "user.kaon.size" // logical file size
	xaChecksums = "user.kaon.checksums"
	xaPath      = "user.kaon.path" // path at write time, a hint for fsck only
)

// StripeMeta is what the xattrs of one physical file say.
type StripeMeta struct {
	Fid       uint64
	Stripe    int
	Layout    string
	Size      int64
	Checksums map[string]string
	Path      string
}

func (m StripeMeta) attrs() map[string]string {
	return map[string]string{
		xaFid: strconv.FormatUint(m.Fid, 10), xaStripe: strconv.Itoa(m.Stripe), xaLayout: m.Layout,
		xaSize: strconv.FormatInt(m.Size, 10), xaChecksums: encodeSums(m.Checksums), xaPath: m.Path,
	}
}

func writeMeta(f *os.File, m StripeMeta) error {
	for k, v := range m.attrs() {
		if err := unix.Fsetxattr(int(f.Fd()), k, []byte(v), 0); err != nil {
			return fmt.Errorf("set %s on %s: %w", k, f.Name(), err)
		}
	}
	return nil
}

// ReadMeta reads the xattrs of a physical file.
func ReadMeta(path string) (StripeMeta, error) {
	get := func(k string) string {
		buf := make([]byte, 4096)
		n, err := unix.Getxattr(path, k, buf)
		if err != nil {
			return ""
		}
		return string(buf[:n])
	}
	var m StripeMeta
	var err error
	if m.Fid, err = strconv.ParseUint(get(xaFid), 10, 64); err != nil {
		return m, fmt.Errorf("%s: no kaon fid attribute", path)
	}
	m.Stripe, _ = strconv.Atoi(get(xaStripe))
	m.Size, _ = strconv.ParseInt(get(xaSize), 10, 64)
	m.Layout, m.Path = get(xaLayout), get(xaPath)
	m.Checksums = decodeSums(get(xaChecksums))
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

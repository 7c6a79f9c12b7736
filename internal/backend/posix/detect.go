package posix

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/backend"
)

// What a filesystem root is, found from statfs, stat and the mount table:
// the kind of store, the backing storage it shares with other roots, and
// whether direct I/O pays there.

// place is what detect found at a root (or, before the root exists, at
// its nearest existing parent: the root will be made on that filesystem).
type place struct {
	magic   int64  // statfs f_type
	dev     uint64 // st_dev
	kind    string // backend.KindPosix or KindCephFS
	fsType  string // "ext4", "fuse.ceph-fuse", ...
	backend string // backend.Info.Backend
	remote  bool   // a network or FUSE filesystem: buffered writes win there
}

// Filesystems whose writes go to a daemon or over the network (and
// tmpfs, where the page cache is the storage): O_DIRECT there costs a
// synchronous round trip per buffer and gains nothing. Measured on
// ceph-fuse: 10-18 MiB/s with O_DIRECT against 80-140 buffered with one
// fsync at the end (docs/CEPH.md).
var remoteMagic = map[int64]string{
	unix.FUSE_SUPER_MAGIC: "fuse", unix.CEPH_SUPER_MAGIC: "ceph", unix.NFS_SUPER_MAGIC: "nfs",
	unix.SMB_SUPER_MAGIC: "smb", unix.SMB2_SUPER_MAGIC: "smb2", unix.CIFS_SUPER_MAGIC: "cifs",
	unix.V9FS_MAGIC: "9p", unix.AFS_SUPER_MAGIC: "afs", unix.CODA_SUPER_MAGIC: "coda",
	unix.NCP_SUPER_MAGIC: "ncp", 0x0bd00bd0: "lustre", 0x47504653: "gpfs",
	unix.TMPFS_MAGIC: "tmpfs", unix.RAMFS_MAGIC: "ramfs",
}

var localMagic = map[int64]string{
	unix.EXT4_SUPER_MAGIC: "ext4", unix.XFS_SUPER_MAGIC: "xfs", unix.BTRFS_SUPER_MAGIC: "btrfs",
	unix.OVERLAYFS_SUPER_MAGIC: "overlay", unix.F2FS_SUPER_MAGIC: "f2fs",
}

// cephFSIDAttr is the virtual xattr CephFS clients (ceph-fuse and the
// kernel's) answer with the cluster's fsid on every file.
const cephFSIDAttr = "ceph.cluster_fsid"

// existing is root or its nearest existing parent.
func existing(root string) string {
	for dir := root; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(dir); err == nil || dir == filepath.Dir(dir) {
			return dir
		}
	}
}

func detect(root string) (place, error) {
	dir := existing(root)
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return place{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return place{}, fmt.Errorf("stat %s: %w", dir, err)
	}
	p := place{magic: sfs.Type, dev: st.Dev, kind: backend.KindPosix}
	name, remote := remoteMagic[sfs.Type]
	if !remote {
		name = localMagic[sfs.Type]
	}
	if t := mountType(st.Dev); t != "" {
		name = t // "fuse.ceph-fuse" says more than "fuse"
	}
	if name == "" {
		name = fmt.Sprintf("statfs type %#x", sfs.Type)
	}
	p.fsType, p.remote = name, remote
	p.backend = fmt.Sprintf("dev:%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	if fsid, err := getxattr(dir, cephFSIDAttr); err == nil && fsid != "" {
		p.kind, p.backend = backend.KindCephFS, "cephfs:"+fsid
	} else if sfs.Type == unix.CEPH_SUPER_MAGIC || strings.Contains(name, "ceph") {
		p.kind = backend.KindCephFS
	}
	return p, nil
}

// mountType is the filesystem type the mount table gives the mount of
// device dev ("" if none is found).
func mountType(dev uint64) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	want := fmt.Sprintf("%d:%d", unix.Major(dev), unix.Minor(dev))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - type source superopts
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[2] != want {
			continue
		}
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) {
				return fields[i+1]
			}
		}
	}
	return ""
}

func getxattr(path, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Getxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 4*len(buf))
			continue
		}
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
}

// CephFS layouts (ceph.dir.layout.*) set on a root apply to the files
// created below it from then on.
const (
	layoutPoolAttr = "ceph.dir.layout.pool"
	layoutAttr     = "ceph.dir.layout"
)

// setLayout gives dir the CephFS layout of s (data pool, object size) if
// it does not have it yet. An object size becomes the stripe unit too
// (one stripe unit per object, as CephFS's default 4 MiB/4 MiB).
func setLayout(dir string, s backend.Settings) error {
	if s.CephPool == "" && s.ObjectSize == 0 {
		return nil
	}
	cur, _ := getxattr(dir, layoutAttr) // "stripe_unit=.. stripe_count=.. object_size=.. pool=.."
	have := map[string]string{}
	for _, kv := range strings.Fields(cur) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			have[k] = v
		}
	}
	if s.CephPool != "" && have["pool"] != s.CephPool {
		if err := unix.Setxattr(dir, layoutPoolAttr, []byte(s.CephPool), 0); err != nil {
			return fmt.Errorf("set %s=%s on %s: %w", layoutPoolAttr, s.CephPool, dir, err)
		}
	}
	if s.ObjectSize > 0 && (have["object_size"] != fmt.Sprint(s.ObjectSize) || have["stripe_unit"] != fmt.Sprint(s.ObjectSize)) {
		// Stripe unit and object size change together: each alone may
		// be refused (the object size must be a multiple of the unit).
		v := fmt.Sprintf("stripe_unit=%d stripe_count=1 object_size=%d", s.ObjectSize, s.ObjectSize)
		if err := unix.Setxattr(dir, layoutAttr, []byte(v), 0); err != nil {
			return fmt.Errorf("set %s=%q on %s: %w", layoutAttr, v, dir, err)
		}
	}
	return nil
}

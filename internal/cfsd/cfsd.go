package cfsd

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/kaon-storage/kaon/internal/fusecore"
	"github.com/kaon-storage/kaon/internal/kerr"
	"golang.org/x/sys/unix"
)

// Options configure one cfsd filesystem.
type Options struct {
	Backend  string // directory to expose
	StateDir string // quota/recycle state; default <Backend>/.kaon-cfsd
	Quota    bool   // account usage per user and enforce limits
	Recycle  bool   // start with the recycle bin enabled (persisted state wins once set)

	// NoXattr answers every xattr request with ENOSYS, after which the
	// kernel stops asking: saves the per-file security.capability and
	// `ls -l` (security.selinux, system.posix_acl_access) round trips at
	// the price of user xattrs and the cfs.id attribute.
	NoXattr bool

	// NoACL is set when the kernel does not evaluate POSIX ACLs
	// (`--acl=false`): the system.posix_acl_* attributes are then
	// reported unsupported (EOPNOTSUPP, hidden from listxattr, cannot be
	// set through the mount) rather than shown without being enforced,
	// and `ls -l` stops asking for them on every file.
	NoACL bool

	// AttrTimeout is the kernel attribute cache time, returned with
	// SETATTR replies (go-fuse only applies it to GETATTR).
	AttrTimeout time.Duration
}

// FS is one cfsd instance: the backend, its state and statistics.
type FS struct {
	opts      Options
	rootFd    int
	rootDev   uint64
	stateName string // name of the state dir in the backend root ("" if outside)
	state     stateDir

	Stats   *fusecore.Stats
	op      opStats
	quota   *Quota   // nil when quota is disabled
	recycle *Recycle // always present; may be disabled

	// mount is what the kernel negotiated, set by SetMount once the
	// mount exists (requests may arrive before: hence atomic).
	mount atomic.Pointer[Transport]

	root *node
}

type opStats struct {
	lookup, getattr, setattr, open, create, read, write, release, fsync,
	mkdir, rmdir, unlink, rename, link, symlink, readlink, mknod, readdir,
	getxattr, setxattr, listxattr, removexattr, statfs, allocate, lseek,
	flush *fusecore.OpStats
}

// Transport is what the kernel granted a mount: how requests and file
// data travel. The control file .proc/stats.json reports it.
type Transport interface {
	PassthroughActive() bool // file data bypasses the daemon
}

// SetMount records the mount serving f (for .proc/stats.json).
func (f *FS) SetMount(t Transport) { f.mount.Store(&t) }

// New opens the backend and state. Call Root() for the fs tree and Close
// after unmounting.
func New(opts Options) (*FS, error) {
	b, err := filepath.Abs(opts.Backend)
	if err != nil {
		return nil, err
	}
	opts.Backend = b
	rootFd, err := unix.Open(b, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, kerr.Wrap(kerr.KindOf(err), "cfsd", b, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(rootFd, &st); err != nil {
		unix.Close(rootFd)
		return nil, err
	}
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(b, ".kaon-cfsd")
	}
	if opts.StateDir, err = filepath.Abs(opts.StateDir); err != nil {
		return nil, err
	}
	f := &FS{opts: opts, rootFd: rootFd, rootDev: uint64(st.Dev), Stats: fusecore.NewStats()}
	if filepath.Dir(opts.StateDir) == b {
		f.stateName = filepath.Base(opts.StateDir)
	} else if strings.HasPrefix(opts.StateDir, b+"/") {
		unix.Close(rootFd)
		return nil, kerr.New(kerr.Invalid, "cfsd", opts.StateDir, "state dir must be directly in the backend root or outside it")
	}
	if f.state, err = openStateDir(opts.StateDir); err != nil {
		unix.Close(rootFd)
		return nil, err
	}
	f.initOps()
	f.recycle, err = openRecycle(f, opts.Recycle)
	if err != nil {
		return nil, err
	}
	if opts.Quota {
		f.quota, err = openQuota(f.state)
		if err != nil {
			return nil, err
		}
		if err := f.quota.Reconcile(f.scanUsage()); err != nil {
			return nil, err
		}
	}
	f.root = &node{cfs: f, fd: rootFd}
	return f, nil
}

func (f *FS) initOps() {
	s := f.Stats
	f.op = opStats{
		lookup: s.Op("lookup"), getattr: s.Op("getattr"), setattr: s.Op("setattr"),
		open: s.Op("open"), create: s.Op("create"), read: s.Op("read"), write: s.Op("write"),
		release: s.Op("release"), fsync: s.Op("fsync"), mkdir: s.Op("mkdir"), rmdir: s.Op("rmdir"),
		unlink: s.Op("unlink"), rename: s.Op("rename"), link: s.Op("link"), symlink: s.Op("symlink"),
		readlink: s.Op("readlink"), mknod: s.Op("mknod"), readdir: s.Op("readdir"),
		getxattr: s.Op("getxattr"), setxattr: s.Op("setxattr"), listxattr: s.Op("listxattr"),
		removexattr: s.Op("removexattr"), statfs: s.Op("statfs"), allocate: s.Op("allocate"),
		lseek: s.Op("lseek"), flush: s.Op("flush"),
	}
}

// Root is the tree to hand to fusecore.New.
func (f *FS) Root() fs.InodeEmbedder { return f.root }

// Close persists state. The mount must be gone.
func (f *FS) Close() error {
	var err error
	if f.quota != nil {
		err = f.quota.Close()
	}
	if e := f.recycle.Close(); err == nil {
		err = e
	}
	f.state.close()
	return err
}

// stableAttr derives a FUSE inode number from the backend's, folding in
// the device so trees crossing mounts do not collide.
func (f *FS) stableAttr(st *syscall.Stat_t) fs.StableAttr {
	ino := st.Ino
	if d := uint64(st.Dev); d != f.rootDev {
		ino ^= (d << 32) | (d >> 32)
	}
	return fs.StableAttr{Mode: st.Mode & syscall.S_IFMT, Ino: ino}
}

// hidden reports names in the backend root that the mount never shows.
func (f *FS) hidden(parent *node, name string) bool {
	return parent == f.root && (name == procName || (f.stateName != "" && name == f.stateName))
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return fs.ToErrno(err)
}

// String describes the instance for logs.
func (f *FS) String() string { return fmt.Sprintf("cfsd(%s)", f.opts.Backend) }

// fstatat is unix.Fstatat on syscall.Stat_t (the layouts are identical),
// which is what go-fuse's Attr.FromStat takes.
func fstatat(dirfd int, name string, st *syscall.Stat_t, flags int) error {
	return unix.Fstatat(dirfd, name, (*unix.Stat_t)(unsafe.Pointer(st)), flags)
}

package fusecore

import (
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kaon-storage/kaon/internal/kerr"
	"golang.org/x/sys/unix"
)

// Config describes one mount. Zero values pick Kaon's defaults.
type Config struct {
	Mountpoint string
	FsName     string // shown as the source in /proc/mounts
	Name       string // fuse subtype, e.g. "kaon-cfsd"

	// Kernel caches of a node tree (New); zero picks the default (1s),
	// negative disables. A raw file system (NewRaw) sets its own
	// timeouts in every reply.
	EntryTimeout    time.Duration // kernel dentry cache
	AttrTimeout     time.Duration // kernel attribute cache
	NegativeTimeout time.Duration // kernel negative dentry cache
	MaxWrite        int           // bytes per WRITE (and READ) request; default 1 MiB
	MaxBackground   int           // async requests in flight; default 64

	AllowOther bool // let every user see the mount (needed for multi-user)
	ReadOnly   bool // mount read-only: the kernel refuses writes itself
	// NoDefaultPermissions leaves permission checks to the filesystem
	// instead of the kernel (mode bits on cached attributes).
	NoDefaultPermissions bool
	ACL                  bool // kernel evaluates POSIX ACLs from system.posix_acl_*
	Passthrough          bool // request kernel FUSE passthrough for file data
	// Writeback turns on the kernel's write-back cache
	// (FUSE_WRITEBACK_CACHE): writes land in the page cache and reach
	// the file system in large batches (at the latest at fsync and
	// close). The kernel then trusts its own size and mtime of a regular
	// file over the file system's answers: a file system whose files
	// change elsewhere must tell it (see internal/mount).
	Writeback  bool
	CleanStale bool // lazily unmount a stale mountpoint instead of failing
	// Locks sends flock and fcntl locks to the file system (which holds
	// them, e.g. in a namespace shared with other mounts) instead of
	// keeping them in the kernel.
	Locks bool
	// ServerKillsPriv declares that the filesystem (or the backend it acts
	// on as the caller) clears setuid/setgid/capabilities on write, chown
	// and truncate itself (FUSE_HANDLE_KILLPRIV_V2). The kernel then skips
	// a GETATTR round trip before every chown.
	ServerKillsPriv bool
	// NoOpendir makes the kernel skip OPENDIR/RELEASEDIR (see noOpendir):
	// two round trips less per directory listed. The file system's
	// directory handles then live for one READDIR request each, so its
	// stream offsets must be stable across opens.
	NoOpendir bool
	// ReaddirPlusAuto lets the kernel use plain READDIR for all but the
	// first chunk of a listing unless lookups advise otherwise
	// (FUSE_READDIRPLUS_AUTO). Off, every chunk is READDIRPLUS, so a
	// cold `ls -l`/`find -ls` of a large directory needs no LOOKUP per
	// entry; with FOPEN_CACHE_DIR warm listings send neither.
	ReaddirPlusAuto bool

	// Stats are the counters the file system keeps; (*Mount).Summary
	// reports them. Optional.
	Stats *Stats

	Debug  bool        // log every FUSE request
	Logger *log.Logger // go-fuse's log (default: the standard logger)
}

func (c *Config) defaults() error {
	if c.EntryTimeout == 0 {
		c.EntryTimeout = time.Second
	}
	if c.AttrTimeout == 0 {
		c.AttrTimeout = time.Second
	}
	if c.NegativeTimeout == 0 {
		c.NegativeTimeout = time.Second
	}
	if c.MaxWrite == 0 {
		c.MaxWrite = 1 << 20
	}
	if c.MaxBackground == 0 {
		c.MaxBackground = 64
	}
	if c.Name == "" {
		c.Name = "kaon"
	}
	if c.FsName == "" {
		c.FsName = c.Name
	}
	mp, err := filepath.Abs(c.Mountpoint)
	c.Mountpoint = mp
	return err
}

// mountOptions are go-fuse's options for c, the same for a node tree
// and a raw file system.
func (c *Config) mountOptions() fuse.MountOptions {
	mo := fuse.MountOptions{
		FsName:        c.FsName,
		Name:          c.Name,
		AllowOther:    c.AllowOther,
		MaxWrite:      c.MaxWrite,
		MaxBackground: c.MaxBackground,
		MaxReadAhead:  c.MaxWrite,
		DirectMount:   os.Geteuid() == 0,
		EnableAcl:     c.ACL,
		Debug:         c.Debug,
		Logger:        c.Logger,
		// Locks stay in the kernel (local flock/fcntl semantics) unless
		// the file system holds them; symlink targets are cached there.
		EnableLocks:          c.Locks,
		EnableSymlinkCaching: true,
	}
	if c.ReadOnly {
		mo.Options = append(mo.Options, "ro")
	}
	if !c.NoDefaultPermissions {
		mo.Options = append(mo.Options, "default_permissions")
	}
	if c.ReaddirPlusAuto {
		mo.ExtraCapabilities |= fuse.CAP_READDIRPLUS_AUTO
	}
	if c.ServerKillsPriv {
		mo.ExtraCapabilities |= fuse.CAP_HANDLE_KILLPRIV_V2
	}
	if !c.Passthrough {
		mo.DisabledCapabilities |= fuse.CAP_PASSTHROUGH
	}
	if c.Writeback {
		mo.ExtraCapabilities |= fuse.CAP_WRITEBACK_CACHE
	}
	if c.AllowOther && os.Geteuid() != 0 {
		// fusermount3 refuses allow_other without user_allow_other.
		mo.AllowOther = false
	}
	return mo
}

// Mount is a live FUSE mount.
type Mount struct {
	Server *fuse.Server
	Config Config
	pt     bool
}

// ErrStale reports a dead FUSE mount left by a crashed daemon.
var ErrStale = errors.New("stale FUSE mount (transport endpoint is not connected)")

// checkMountpoint verifies mp can be mounted on. A stale FUSE mount
// (stat fails with ENOTCONN) yields an error wrapping ErrStale, unless
// clean is set, in which case it is lazily unmounted and reported on
// stderr. A live mount of the same kind (FUSE subtype name, when not
// empty) is refused: mounting on top would hide it while its daemon
// keeps serving whoever is still inside it.
func checkMountpoint(mp string, clean bool, name string) error {
	var st unix.Stat_t
	err := staleErr(mp)
	if err == nil {
		err = unix.Stat(mp, &st)
	}
	if err == unix.ENOTCONN || err == unix.ECONNABORTED {
		if !clean {
			return &kerr.Error{Kind: kerr.Busy, Op: "mount", Path: mp,
				Msg: "stale FUSE mount from a crashed daemon; unmount it (`fusermount3 -uz " + mp + "`) or mount with --clean-stale", Err: ErrStale}
		}
		fmt.Fprintf(os.Stderr, "kaon: %s: stale FUSE mount detected, unmounting lazily\n", mp)
		if err := LazyUnmount(mp); err != nil {
			return &kerr.Error{Kind: kerr.Busy, Op: "mount", Path: mp, Msg: "cannot clean stale mount", Err: err}
		}
		err = unix.Stat(mp, &st)
	}
	if err != nil {
		return kerr.Wrap(kerr.KindOf(err), "mount", mp, err)
	}
	if m, ok := TopMount(mp); ok && name != "" && m.FsType == "fuse."+name {
		return kerr.New(kerr.Exists, "mount", mp,
			fmt.Sprintf("already served by a running %s (%s); unmount it first", name, m.Source))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return kerr.New(kerr.NotDir, "mount", mp, "mountpoint is not a directory")
	}
	return nil
}

// staleErr probes mp with statfs, which (unlike stat) is never answered
// from the kernel's attribute cache, so a dead daemon shows at once.
func staleErr(mp string) error {
	var sf unix.Statfs_t
	err := unix.Statfs(mp, &sf)
	if err == unix.ENOTCONN || err == unix.ECONNABORTED {
		return err
	}
	return nil
}

// IsStale reports whether mp is a dead FUSE mount.
func IsStale(mp string) bool { return staleErr(mp) != nil }

// LazyUnmount detaches mp even if it is busy or its daemon is gone.
func LazyUnmount(mp string) error {
	if err := unix.Unmount(mp, unix.MNT_DETACH); err == nil {
		return nil
	}
	out, err := exec.Command("fusermount3", "-uz", mp).CombinedOutput()
	if err != nil {
		return fmt.Errorf("fusermount3 -uz %s: %v: %s", mp, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ForceUnmount takes mp away whatever its daemon does: it aborts the
// mount's FUSE connection (every request waiting on the daemon fails
// with ENOTCONN, so nothing stays in D state) and detaches it lazily.
// The mount is found in /proc/self/mountinfo, never touched.
func ForceUnmount(mp string) error {
	m, ok := TopMount(mp)
	if !ok || !strings.HasPrefix(m.FsType, "fuse") {
		return kerr.New(kerr.NotFound, "umount", mp, "not a FUSE mountpoint")
	}
	_, minor, _ := strings.Cut(m.Dev, ":")
	const conns = "/sys/fs/fuse/connections"
	if _, err := os.Stat(conns + "/" + minor); err != nil {
		_ = unix.Mount("none", conns, "fusectl", 0, "")
	}
	abortErr := os.WriteFile(conns+"/"+minor+"/abort", []byte("1"), 0)
	if err := LazyUnmount(mp); err != nil {
		if abortErr != nil {
			return fmt.Errorf("%w (aborting its connection: %v)", err, abortErr)
		}
		return err
	}
	return nil
}

// Unmount cleanly unmounts mp (the daemon then exits).
func Unmount(mp string) error {
	if IsStale(mp) {
		return LazyUnmount(mp)
	}
	if err := unix.Unmount(mp, 0); err == nil {
		return nil
	} else if err == unix.EBUSY {
		return kerr.Wrap(kerr.Busy, "umount", mp, err)
	}
	out, err := exec.Command("fusermount3", "-u", mp).CombinedOutput()
	if err != nil {
		return fmt.Errorf("umount %s: %v: %s", mp, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// New mounts the node tree root at cfg.Mountpoint and starts serving.
func New(root fs.InodeEmbedder, cfg Config) (*Mount, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := checkMountpoint(cfg.Mountpoint, cfg.CleanStale, cfg.Name); err != nil {
		return nil, err
	}
	et, at, nt := max(cfg.EntryTimeout, 0), max(cfg.AttrTimeout, 0), max(cfg.NegativeTimeout, 0)
	opts := &fs.Options{
		EntryTimeout:    &et,
		AttrTimeout:     &at,
		NegativeTimeout: &nt,
		// The kernel sees the mode the file system reports, also when
		// it has no permission bits at all: go-fuse would otherwise
		// show mode 0 as 0644 (0755 for directories), and with
		// default_permissions the kernel would then grant access the
		// backend refuses.
		NullPermissions: true,
		MountOptions:    cfg.mountOptions(),
	}
	var raw fuse.RawFileSystem = lockOwners{fs.NewNodeFS(root, opts)}
	if cfg.NoOpendir {
		raw = noOpendir{raw}
	}
	return mount(raw, cfg, &opts.MountOptions)
}

// NewRaw mounts a file system speaking the raw FUSE protocol (node IDs
// of its own making, no go-fuse inode tree) at cfg.Mountpoint and
// starts serving. It gets the server in its Init method, before the
// first request.
func NewRaw(raw fuse.RawFileSystem, cfg Config) (*Mount, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := checkMountpoint(cfg.Mountpoint, cfg.CleanStale, cfg.Name); err != nil {
		return nil, err
	}
	if cfg.NoOpendir {
		raw = noOpendir{raw}
	}
	mo := cfg.mountOptions()
	return mount(raw, cfg, &mo)
}

// mount is fs.Mount without its WaitMount: NewServer returns once the
// kernel is mounted and INIT answered, and all WaitMount adds is
// go-fuse's poll hack, which opens a file on the new mount from the
// daemon itself. A daemon must never hold a descriptor on its own mount:
// killed while holding one, the exiting process closes it, the kernel
// sends FLUSH and waits for an answer only the dead daemon could give
// (state D until the connection is aborted). The hack's purpose, making
// the kernel learn that POLL is unsupported before the daemon polls a
// file of its own mount, does not arise since the daemon never opens
// one; a POLL from another process is answered ENOSYS like any other.
func mount(raw fuse.RawFileSystem, cfg Config, mo *fuse.MountOptions) (*Mount, error) {
	srv, err := fuse.NewServer(raw, cfg.Mountpoint, mo)
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, "mount", cfg.Mountpoint, err)
	}
	go srv.Serve()
	m := &Mount{Server: srv, Config: cfg}
	m.pt = cfg.Passthrough && m.probePassthrough()
	return m, nil
}

// probePassthrough checks the negotiated capability and that the kernel
// accepts a backing fd (it needs CAP_SYS_ADMIN).
func (m *Mount) probePassthrough() bool {
	ks := m.Server.KernelSettings()
	if ks == nil || ks.Flags64()&fuse.CAP_PASSTHROUGH == 0 {
		return false
	}
	exe, err := os.Executable()
	if err != nil {
		return false
	}
	fd, err := unix.Open(exe, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	id, errno := m.Server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
	if errno != 0 {
		return false
	}
	m.Server.UnregisterBackingFd(id)
	return true
}

// PassthroughActive reports whether file data bypasses the daemon.
func (m *Mount) PassthroughActive() bool { return m.pt }

// Wait blocks until the mount is gone: unmounted by Unmount, by
// `umount`/`fusermount3 -u` from outside, or its connection aborted.
func (m *Mount) Wait() error {
	m.Server.Wait()
	return nil
}

// Unmount unmounts cleanly. If the mount is busy it is detached lazily
// instead, so a daemon never leaves a stale mount behind: Wait returns
// once its last user is gone, and Unmount returns an error saying so.
func (m *Mount) Unmount() error {
	err := m.Server.Unmount()
	if err == nil {
		return nil
	}
	why := strings.Join(strings.Fields(err.Error()), " ") // fusermount3's message has newlines
	if lerr := LazyUnmount(m.Config.Mountpoint); lerr != nil {
		return fmt.Errorf("%s; %w", why, lerr)
	}
	return fmt.Errorf("%s; detached lazily, gone once its last user is", why)
}

// Summary reports Config.Stats (empty without).
func (m *Mount) Summary() string {
	if m.Config.Stats == nil {
		return ""
	}
	return m.Config.Stats.Summary()
}

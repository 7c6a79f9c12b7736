package fusecore

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
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

	// Kernel caches; zero picks the default (1s), negative disables.
	EntryTimeout    time.Duration // kernel dentry cache
	AttrTimeout     time.Duration // kernel attribute cache
	NegativeTimeout time.Duration // kernel negative dentry cache
	MaxWrite        int           // bytes per WRITE request; default 1 MiB
	MaxBackground   int           // async requests in flight; default 64

	AllowOther bool // let every user see the mount (needed for multi-user)
	// NoDefaultPermissions leaves permission checks to the filesystem
	// instead of the kernel (mode bits on cached attributes).
	NoDefaultPermissions bool
	ACL                  bool // kernel evaluates POSIX ACLs from system.posix_acl_*
	Passthrough          bool // request kernel FUSE passthrough for file data
	CleanStale           bool // lazily unmount a stale mountpoint instead of failing
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
	Debug           bool
}

func (c *Config) defaults() {
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
}

// Mount is a live FUSE mount.
type Mount struct {
	Server *fuse.Server
	Config Config
	pt     bool
	sig    chan os.Signal
}

// ErrStale reports a dead FUSE mount left by a crashed daemon.
var ErrStale = errors.New("stale FUSE mount (transport endpoint is not connected)")

// CheckMountpoint verifies mp can be mounted on. A stale FUSE mount
// (stat fails with ENOTCONN) yields an error wrapping ErrStale, unless
// clean is set, in which case it is lazily unmounted and reported on
// stderr.
func CheckMountpoint(mp string, clean bool) error {
	var st unix.Stat_t
	err := staleErr(mp)
	if err == nil {
		err = unix.Stat(mp, &st)
	}
	if err == unix.ENOTCONN || err == unix.ECONNABORTED {
		if !clean {
			return &kerr.Error{Kind: kerr.Busy, Op: "mount", Path: mp,
				Msg: "stale FUSE mount from a crashed daemon; run `kaon cfsd umount " + mp + "` or mount with --clean-stale", Err: ErrStale}
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

// New mounts root at cfg.Mountpoint and starts serving.
func New(root fs.InodeEmbedder, cfg Config) (*Mount, error) {
	cfg.defaults()
	mp, err := filepath.Abs(cfg.Mountpoint)
	if err != nil {
		return nil, err
	}
	cfg.Mountpoint = mp
	if err := CheckMountpoint(mp, cfg.CleanStale); err != nil {
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
		MountOptions: fuse.MountOptions{
			FsName:        cfg.FsName,
			Name:          cfg.Name,
			AllowOther:    cfg.AllowOther,
			MaxWrite:      cfg.MaxWrite,
			MaxBackground: cfg.MaxBackground,
			MaxReadAhead:  cfg.MaxWrite,
			DirectMount:   os.Geteuid() == 0,
			EnableAcl:     cfg.ACL,
			Debug:         cfg.Debug,
			// Locks stay in the kernel (local flock/fcntl semantics) and
			// symlink targets are cached there.
			EnableSymlinkCaching: true,
		},
	}
	if !cfg.NoDefaultPermissions {
		opts.Options = append(opts.Options, "default_permissions")
	}
	if cfg.ReaddirPlusAuto {
		opts.ExtraCapabilities |= fuse.CAP_READDIRPLUS_AUTO
	}
	if cfg.ServerKillsPriv {
		opts.ExtraCapabilities |= fuse.CAP_HANDLE_KILLPRIV_V2
	}
	if !cfg.Passthrough {
		opts.DisabledCapabilities |= fuse.CAP_PASSTHROUGH
	}
	if cfg.AllowOther && os.Geteuid() != 0 {
		// fusermount3 refuses allow_other without user_allow_other.
		opts.AllowOther = false
	}
	// Catch termination before the mount exists so a SIGTERM during
	// start-up still ends in a clean unmount rather than a stale mount.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	srv, err := mountFS(mp, root, opts, cfg.NoOpendir)
	if err != nil {
		signal.Stop(sig)
		return nil, kerr.Wrap(kerr.Internal, "mount", mp, err)
	}
	m := &Mount{Server: srv, Config: cfg, sig: sig}
	m.pt = cfg.Passthrough && m.probePassthrough()
	return m, nil
}

// mountFS is fs.Mount with an optional wrapper around the raw file
// system, and without fs.Mount's WaitMount: NewServer returns once the
// kernel is mounted and INIT answered, and all WaitMount adds is
// go-fuse's poll hack, which opens a file on the new mount from the
// daemon itself. A daemon must never hold a descriptor on its own mount:
// killed while holding one, the exiting process closes it, the kernel
// sends FLUSH and waits for an answer only the dead daemon could give
// (state D until the connection is aborted). The hack's purpose, making
// the kernel learn that POLL is unsupported before the daemon polls a
// file of its own mount, does not arise since the daemon never opens
// one; a POLL from another process is answered ENOSYS like any other.
func mountFS(mp string, root fs.InodeEmbedder, opts *fs.Options, noOpendirs bool) (*fuse.Server, error) {
	var raw fuse.RawFileSystem = fs.NewNodeFS(root, opts)
	if noOpendirs {
		raw = noOpendir{raw}
	}
	srv, err := fuse.NewServer(raw, mp, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	go srv.Serve()
	return srv, nil
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

// Serve blocks until the filesystem is unmounted. SIGTERM, SIGINT and
// SIGHUP trigger a clean unmount; if the mount is busy the unmount is
// retried lazily so the daemon never leaves a stale mount behind.
func (m *Mount) Serve() {
	sig := m.sig
	defer signal.Stop(sig)
	done := make(chan struct{})
	go func() { m.Server.Wait(); close(done) }()
	for {
		select {
		case <-done:
			return
		case s := <-sig:
			fmt.Fprintf(os.Stderr, "kaon: %v: unmounting %s\n", s, m.Config.Mountpoint)
			if err := m.Server.Unmount(); err != nil {
				fmt.Fprintf(os.Stderr, "kaon: unmount %s: %v; detaching lazily\n", m.Config.Mountpoint, err)
				_ = unix.Unmount(m.Config.Mountpoint, unix.MNT_DETACH)
			}
		}
	}
}

const daemonEnv = "KAON_FUSE_DAEMON"

// Daemonize re-executes the current command in the background (new
// session, stdio to logPath or /dev/null). In the parent it waits until
// the child calls NotifyReady and then returns isChild=false with the
// child's mount error, if any; the parent should exit. In the child it
// returns isChild=true.
func Daemonize(logPath string) (isChild bool, err error) {
	if os.Getenv(daemonEnv) == "1" {
		return true, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return false, err
	}
	out, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if logPath != "" {
		out, err = os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	}
	if err != nil {
		return false, err
	}
	exe, err := os.Executable()
	if err != nil {
		return false, err
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), daemonEnv+"=1")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return false, err
	}
	w.Close()
	out.Close()
	line, rerr := bufio.NewReader(r).ReadString('\n')
	r.Close()
	line = strings.TrimSpace(line)
	if line == "ok" {
		_ = cmd.Process.Release()
		return false, nil
	}
	if rerr != nil && line == "" {
		st, _ := cmd.Process.Wait()
		return false, fmt.Errorf("daemon exited before mounting (%v); see %s", st, logPath)
	}
	return false, errors.New(strings.TrimPrefix(line, "err "))
}

// NotifyReady tells a waiting Daemonize parent that the mount is up (err
// nil) or failed. It is a no-op in the foreground.
func NotifyReady(err error) {
	if os.Getenv(daemonEnv) != "1" {
		return
	}
	f := os.NewFile(3, "ready")
	if f == nil {
		return
	}
	if err != nil {
		fmt.Fprintf(f, "err %v\n", err)
	} else {
		fmt.Fprintln(f, "ok")
	}
	f.Close()
	if err == nil {
		// Detach from the terminal's stdin for good.
		if nul, e := os.Open(os.DevNull); e == nil {
			_ = unix.Dup2(int(nul.Fd()), 0)
			nul.Close()
		}
	}
}

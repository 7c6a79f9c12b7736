package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/cfsd"
	"github.com/kaon-storage/kaon/internal/fusecore"
)

func init() {
	addVerb(func() *cobra.Command {
		umount := newCfsdUmountCmd()
		umount.Aliases = []string{"unmount"}
		return group("cfsd", "pass-through FUSE mount of a POSIX tree (mount|umount)", newCfsdMountCmd(), umount)
	})
}

const cfsdUsage = `usage:
  kaon cfsd mount --backend DIR [options] MOUNTPOINT
  kaon cfsd umount [--lazy] MOUNTPOINT`

// cfsdOptions are the settings of a cfsd mount.
type cfsdOptions struct {
	backend, state, logPath, pprofAddr, cpuProfile     string
	quota, recycle, fg, noPT, allowOther, noXattr, acl bool
	rdplusAuto, cleanStale, debug                      bool
	entryTO, attrTO, negTO                             time.Duration
}

func newCfsdMountCmd() *cobra.Command {
	var o cfsdOptions
	c := leaf("mount --backend DIR [options] MOUNTPOINT", "mount DIR's tree on MOUNTPOINT (daemonizes once mounted)", func(_ *cobra.Command, args []string) int {
		if o.backend == "" || len(args) != 1 {
			fmt.Fprintln(os.Stderr, cfsdUsage)
			return 2
		}
		return cfsdMount(o, args[0])
	})
	fl := c.Flags()
	fl.StringVar(&o.backend, "backend", "", "directory to expose (required)")
	fl.StringVar(&o.state, "state", "", "state directory for quota and recycle bin (default BACKEND/.kaon-cfsd, hidden from the mount)")
	fl.BoolVar(&o.quota, "quota", false, "account per-user usage and enforce limits set in .proc/quota")
	fl.BoolVar(&o.recycle, "recycle", false, "enable the recycle bin (also switchable in .proc/recycle)")
	fl.BoolVar(&o.fg, "foreground", false, "stay in the foreground (default: daemonize once mounted)")
	fl.BoolVarP(&o.fg, "f", "f", false, "short for --foreground")
	fl.StringVar(&o.logPath, "log", "", "daemon log file (default /dev/null)")
	fl.BoolVar(&o.noPT, "no-passthrough", false, "do not use kernel FUSE passthrough for file data")
	fl.BoolVar(&o.allowOther, "allow-other", os.Geteuid() == 0, "let all users access the mount")
	// Changes made through the mount update the kernel caches at once;
	// these timeouts only bound how long a change made directly on the
	// backend (another client) can stay unseen, as NFS's ac* options do.
	fl.DurationVar(&o.entryTO, "entry-timeout", 10*time.Second, "kernel dentry cache timeout (visibility delay of names changed directly on the backend)")
	fl.DurationVar(&o.attrTO, "attr-timeout", 10*time.Second, "kernel attribute, ACL and xattr-name cache timeout (visibility delay of backend-side changes)")
	fl.DurationVar(&o.negTO, "negative-timeout", time.Second, "kernel negative lookup cache timeout")
	fl.BoolVar(&o.noXattr, "no-xattr", false, "disable extended attributes (fewer round trips for ls -l and writes; no user.* xattrs, no cfs.id)")
	fl.BoolVar(&o.acl, "acl", true, "let the kernel evaluate and cache the backend's POSIX ACLs; with --acl=false ACLs are reported unsupported on the mount (fewer round trips for a cold ls -l)")
	fl.BoolVar(&o.rdplusAuto, "readdirplus-auto", false, "let the kernel use plain READDIR after the first chunk of a listing (default: READDIRPLUS for every chunk)")
	fl.BoolVar(&o.cleanStale, "clean-stale", false, "lazily unmount a stale mount left by a crashed daemon")
	fl.BoolVar(&o.debug, "debug", false, "log every FUSE request")
	fl.BoolVarP(&o.debug, "v", "v", false, "verbose: log every FUSE request (same as --debug)")
	fl.StringVar(&o.pprofAddr, "pprof", "", "serve Go profiling of the daemon on this address (e.g. 127.0.0.1:6060)")
	fl.StringVar(&o.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the daemon to this file until unmount")
	return c
}

func cfsdMount(o cfsdOptions, mountpoint string) int {
	var (
		f        *cfsd.FS
		stopProf func()
	)
	d := fusecore.Daemon{Name: "kaon cfsd", Mountpoint: mountpoint, CleanStale: o.cleanStale, Foreground: o.fg, LogPath: o.logPath}
	err := d.Run(func() (fusecore.Served, error) {
		// Modes come from the caller (already masked by the kernel).
		syscall.Umask(0)
		raiseNofile()
		var err error
		f, err = cfsd.New(cfsd.Options{Backend: o.backend, StateDir: o.state, Quota: o.quota, Recycle: o.recycle, AttrTimeout: o.attrTO, NoXattr: o.noXattr, NoACL: !o.acl})
		if err != nil {
			return nil, err
		}
		// Everything the daemon opens by path is opened before the mount
		// exists, so no descriptor of it can be on the mount (see
		// fusecore.mount), and it works from "/" so its working directory
		// pins no file system.
		servePprof(o.pprofAddr)
		if stopProf, err = startCPUProfile(o.cpuProfile); err != nil {
			fmt.Fprintf(os.Stderr, "kaon cfsd: cpu profile: %v\n", err)
		}
		mp, err := filepath.Abs(d.Mountpoint)
		if err == nil {
			err = os.Chdir("/")
		}
		var m *fusecore.Mount
		if err == nil {
			m, err = fusecore.New(f.Root(), fusecore.Config{
				Mountpoint: mp, FsName: "kaon-cfsd:" + o.backend, Name: "kaon-cfsd",
				EntryTimeout: noCache(o.entryTO), AttrTimeout: noCache(o.attrTO), NegativeTimeout: noCache(o.negTO),
				AllowOther: o.allowOther, ACL: o.acl, Passthrough: !o.noPT, CleanStale: o.cleanStale, Debug: o.debug,
				ServerKillsPriv: true, NoOpendir: true, ReaddirPlusAuto: o.rdplusAuto, Stats: f.Stats,
			})
		}
		if err != nil {
			f.Close()
			f = nil
			return nil, err
		}
		f.SetMount(m)
		mode := "daemon data path"
		if m.PassthroughActive() {
			mode = "kernel passthrough"
		}
		fmt.Fprintf(os.Stderr, "kaon cfsd: %s mounted on %s (%s)\n", o.backend, mp, mode)
		return m, nil
	})
	if stopProf != nil {
		stopProf()
	}
	if f != nil { // served (f is nil in a daemonizing parent)
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("saving state: %w", cerr)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kaon cfsd: %v\n", err)
		return 1
	}
	return 0
}

// raiseNofile lifts the fd limit: each cached directory holds an fd.
func raiseNofile() {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur < rl.Max {
		rl.Cur = rl.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
}

func newCfsdUmountCmd() *cobra.Command {
	var lazy bool
	c := leaf("umount [--lazy] MOUNTPOINT", "unmount a cfsd mount (the daemon saves its state and exits)", func(_ *cobra.Command, args []string) int {
		if len(args) != 1 {
			fmt.Fprintln(os.Stderr, cfsdUsage)
			return 2
		}
		var err error
		if lazy {
			err = fusecore.LazyUnmount(args[0])
		} else {
			err = fusecore.Unmount(args[0])
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "kaon cfsd: %v\n", err)
			return 1
		}
		return 0
	})
	c.Flags().BoolVar(&lazy, "lazy", false, "detach even if busy")
	return c
}

// noCache maps a timeout of 0 given on the command line ("do not cache") to
// fusecore's negative value (its zero means "default").
func noCache(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

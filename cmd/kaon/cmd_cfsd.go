package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/kaon-storage/kaon/internal/cfsd"
	"github.com/kaon-storage/kaon/internal/fusecore"
)

func init() {
	register(command{name: "cfsd", short: "pass-through FUSE mount of a POSIX tree (mount|umount)", run: runCfsd})
}

const cfsdUsage = `usage:
  kaon cfsd mount --backend DIR [options] MOUNTPOINT
  kaon cfsd umount [--lazy] MOUNTPOINT`

func runCfsd(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, cfsdUsage)
		return 2
	}
	switch args[0] {
	case "mount":
		return cfsdMount(args[1:])
	case "umount", "unmount":
		return cfsdUmount(args[1:])
	}
	fmt.Fprintln(os.Stderr, cfsdUsage)
	return 2
}

func cfsdMount(args []string) int {
	fl := flag.NewFlagSet("cfsd mount", flag.ContinueOnError)
	backend := fl.String("backend", "", "directory to expose (required)")
	state := fl.String("state", "", "state directory for quota and recycle bin (default BACKEND/.kaon-cfsd, hidden from the mount)")
	quota := fl.Bool("quota", false, "account per-user usage and enforce limits set in .proc/quota")
	recycle := fl.Bool("recycle", false, "enable the recycle bin (also switchable in .proc/recycle)")
	fg := fl.Bool("foreground", false, "stay in the foreground (default: daemonize once mounted)")
	fl.BoolVar(fg, "f", false, "short for --foreground")
	logPath := fl.String("log", "", "daemon log file (default /dev/null)")
	noPT := fl.Bool("no-passthrough", false, "do not use kernel FUSE passthrough for file data")
	allowOther := fl.Bool("allow-other", os.Geteuid() == 0, "let all users access the mount")
	// Changes made through the mount update the kernel caches at once;
	// these timeouts only bound how long a change made directly on the
	// backend (another client) can stay unseen, as NFS's ac* options do.
	entryTO := fl.Duration("entry-timeout", 10*time.Second, "kernel dentry cache timeout (visibility delay of names changed directly on the backend)")
	attrTO := fl.Duration("attr-timeout", 10*time.Second, "kernel attribute, ACL and xattr-name cache timeout (visibility delay of backend-side changes)")
	negTO := fl.Duration("negative-timeout", time.Second, "kernel negative lookup cache timeout")
	noXattr := fl.Bool("no-xattr", false, "disable extended attributes (fewer round trips for ls -l and writes; no user.* xattrs, no cfs.id)")
	acl := fl.Bool("acl", true, "let the kernel evaluate and cache the backend's POSIX ACLs; with --acl=false ACLs are reported unsupported on the mount (fewer round trips for a cold ls -l)")
	rdplusAuto := fl.Bool("readdirplus-auto", false, "let the kernel use plain READDIR after the first chunk of a listing (default: READDIRPLUS for every chunk)")
	cleanStale := fl.Bool("clean-stale", false, "lazily unmount a stale mount left by a crashed daemon")
	debug := fl.Bool("debug", false, "log every FUSE request")
	fl.BoolVar(debug, "v", false, "verbose: log every FUSE request (same as --debug)")
	pprofAddr := fl.String("pprof", "", "serve Go profiling of the daemon on this address (e.g. 127.0.0.1:6060)")
	cpuProfile := fl.String("cpuprofile", "", "write a Go CPU profile of the daemon to this file until unmount")
	pos, err := parseInterspersed(fl, args)
	if err != nil {
		return 2
	}
	if *backend == "" || len(pos) != 1 {
		fmt.Fprintln(os.Stderr, cfsdUsage)
		return 2
	}
	var (
		f        *cfsd.FS
		stopProf func()
	)
	d := fusecore.Daemon{Name: "kaon cfsd", Mountpoint: pos[0], CleanStale: *cleanStale, Foreground: *fg, LogPath: *logPath}
	err = d.Run(func() (fusecore.Served, error) {
		// Modes come from the caller (already masked by the kernel).
		syscall.Umask(0)
		raiseNofile()
		var err error
		f, err = cfsd.New(cfsd.Options{Backend: *backend, StateDir: *state, Quota: *quota, Recycle: *recycle, AttrTimeout: *attrTO, NoXattr: *noXattr, NoACL: !*acl})
		if err != nil {
			return nil, err
		}
		// Everything the daemon opens by path is opened before the mount
		// exists, so no descriptor of it can be on the mount (see
		// fusecore.mount), and it works from "/" so its working directory
		// pins no file system.
		servePprof(*pprofAddr)
		if stopProf, err = startCPUProfile(*cpuProfile); err != nil {
			fmt.Fprintf(os.Stderr, "kaon cfsd: cpu profile: %v\n", err)
		}
		mp, err := filepath.Abs(d.Mountpoint)
		if err == nil {
			err = os.Chdir("/")
		}
		var m *fusecore.Mount
		if err == nil {
			m, err = fusecore.New(f.Root(), fusecore.Config{
				Mountpoint: mp, FsName: "kaon-cfsd:" + *backend, Name: "kaon-cfsd",
				EntryTimeout: noCache(*entryTO), AttrTimeout: noCache(*attrTO), NegativeTimeout: noCache(*negTO),
				AllowOther: *allowOther, ACL: *acl, Passthrough: !*noPT, CleanStale: *cleanStale, Debug: *debug,
				ServerKillsPriv: true, NoOpendir: true, ReaddirPlusAuto: *rdplusAuto, Stats: f.Stats,
			})
		}
		if err != nil {
			f.Close()
			f = nil
			return nil, err
		}
		f.PassthroughActive = m.PassthroughActive
		mode := "daemon data path"
		if m.PassthroughActive() {
			mode = "kernel passthrough"
		}
		fmt.Fprintf(os.Stderr, "kaon cfsd: %s mounted on %s (%s)\n", *backend, mp, mode)
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

func cfsdUmount(args []string) int {
	fl := flag.NewFlagSet("cfsd umount", flag.ContinueOnError)
	lazy := fl.Bool("lazy", false, "detach even if busy")
	pos, err := parseInterspersed(fl, args)
	if err != nil || len(pos) != 1 {
		fmt.Fprintln(os.Stderr, cfsdUsage)
		return 2
	}
	if *lazy {
		err = fusecore.LazyUnmount(pos[0])
	} else {
		err = fusecore.Unmount(pos[0])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kaon cfsd: %v\n", err)
		return 1
	}
	return 0
}

// noCache maps a timeout of 0 given on the command line ("do not cache") to
// fusecore's negative value (its zero means "default").
func noCache(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/auth/gateway"
	"github.com/kaon-storage/kaon/internal/fusecore"
	"github.com/kaon-storage/kaon/internal/mount"
)

func init() {
	addVerb(newMountCmd)
	addVerb(newUmountCmd)
}

// mountOptions are the settings of `kaon mount`, from flags and -o.
type mountOptions struct {
	url, subtree, cache, logPath string
	fg, debug, allowOther        bool
	writeback                    bool
	direct                       string // auto, off
	timeout, grace               time.Duration
	xrootd                       string   // the root:// host:port of kaon.url.root
	gateway                      string   // the gateway key file ("": callers' tokens)
	options                      []string // -o, comma-separated
}

func newMountCmd() *cobra.Command {
	var o mountOptions
	c := leaf("mount [--url URL] [--subtree /PATH] [-o OPTIONS] [-f] MOUNTPOINT",
		"mount the namespace (or a subtree) on MOUNTPOINT, a caching FUSE mount coherent with every other client",
		func(c *cobra.Command, args []string) int {
			if len(args) != 1 {
				return usageError(c)
			}
			if err := o.parseOptions(); err != nil {
				fmt.Fprintf(os.Stderr, "kaon mount: %v\n", err)
				return 2
			}
			return kaonMount(o, args[0])
		})
	fl := c.Flags()
	fl.StringVar(&o.url, "url", "", "namespace server URL, or the servers of a replicated instance comma-separated, tried in order (default $KAON_URL or the local all-in-one)")
	fl.StringVar(&o.gateway, "gateway", "", "on a host the instance trusts as a gateway: its key file (the namespace servers' --gateway-key); callers' uids and gids are asserted with it instead of their tokens")
	fl.StringVar(&o.subtree, "subtree", "", "the namespace directory to mount (default /, or the URL's path)")
	fl.StringSliceVarP(&o.options, "options", "o", nil, "mount options, comma-separated (see kaon mount --help)")
	fl.BoolVarP(&o.fg, "foreground", "f", false, "stay in the foreground (default: daemonize once mounted)")
	fl.StringVar(&o.cache, "cache", "", "directory of the write-back journals (default /var/cache/kaon/mount-ID as root)")
	fl.StringVar(&o.logPath, "log", "", "daemon log file (default /dev/null)")
	fl.BoolVar(&o.allowOther, "allow-other", os.Geteuid() == 0, "let all users access the mount (each acts as itself)")
	fl.BoolVar(&o.debug, "debug", false, "log every FUSE request")
	fl.StringVar(&o.xrootd, "xrootd", "", "the namespace's root:// host:port, for the kaon.url.root attribute (default: as `kaon ns status` lists it)")
	fl.DurationVar(&o.grace, "grace", 2*time.Minute, "how long fsync and close wait for an unreachable server (a restart) while the local journal keeps what was written")
	fl.BoolVar(&o.writeback, "writeback", true, "the kernel's write-back cache (small writes batched in the page cache; remote changes still invalidate it); --writeback=false: each write a request")
	fl.StringVar(&o.direct, "direct", "auto", "read a file's stripe straight from its backend where this host reaches it (FUSE passthrough for plain stripes): auto or off")
	fl.DurationVar(&o.timeout, "timeout", time.Minute, "how long a request waits for a server's answer before it fails (a hung server never holds callers)")
	c.Long = `Mounts Kaon's namespace on MOUNTPOINT. Every caller acts as itself: its
bearer token (WLCG discovery in its environment: BEARER_TOKEN,
BEARER_TOKEN_FILE, $XDG_RUNTIME_DIR/bt_u$UID, /tmp/bt_u$UID), else its
unix identity toward a namespace server on this host; on a gateway host
(--gateway KEYFILE, a key the servers trust with --auth gateway) its uid
and groups, asserted with the key on each request. --url may name
several servers, comma-separated (a replicated instance): a request that
cannot reach one goes to the next. Metadata is cached
for as long as the mount's leases last and invalidated by the namespace
service; writes go to a local journal and reach the storage servers at
fsync and close. Locks (flock, fcntl) are the namespace's, shared with
every other mount. A stale mount left on MOUNTPOINT by a killed daemon is
cleared; a live one is refused.

-o takes mount(8)'s generic options (ignored: rw, defaults, _netdev,
auto, noauto, user, users, nofail, dev, suid, exec, x-*) and these:
  subtree=/PATH   the namespace directory to mount
  cache=DIR       the journals' directory
  log=FILE        the daemon's log
  allow_other     let all users in (default as root)
  timeout=DUR     how long a request waits for a server's answer (60s)
  xrootd=HOST:PORT  the root:// endpoint kaon.url.root names
  gateway=KEYFILE the gateway key: callers' uids are asserted with it
  debug           log every FUSE request
  grace=DUR       how long fsync/close replay the journal to an unreachable server (2m)
  writeback       the kernel's write-back cache on (the default)
  nowriteback     the kernel's write-back cache off (each write a request)
  direct=auto|off read-only opens read a stripe this host reaches itself
                  (same host, or a CephFS mounted at the filesystem's
                  path) without the storage server; plain stripes go to
                  the kernel (FUSE passthrough; with nowriteback). auto
                  by default

mount.kaon (the same binary by that name) is mount(8)'s helper:
  mount -t kaon http://mgm:8000/data /mnt/kaon -o subtree=/data
  /etc/fstab: http://mgm:8000 /mnt/kaon kaon _netdev 0 0
  /etc/fstab: http://mgm1:8000,http://mgm2:8000 /mnt/kaon kaon _netdev,gateway=/etc/kaon/gateway.key 0 0`
	return c
}

// parseOptions applies -o.
func (o *mountOptions) parseOptions() error {
	for _, opt := range o.options {
		k, v, _ := strings.Cut(strings.TrimSpace(opt), "=")
		switch {
		case k == "":
		case k == "subtree":
			o.subtree = v
		case k == "cache":
			o.cache = v
		case k == "log":
			o.logPath = v
		case k == "url":
			o.url = v
		case k == "xrootd":
			o.xrootd = v
		case k == "gateway":
			o.gateway = v
		case k == "allow_other":
			o.allowOther = true
		case k == "debug":
			o.debug = true
		case k == "writeback":
			o.writeback = true
		case k == "nowriteback":
			o.writeback = false
		case k == "direct":
			o.direct = v
		case k == "timeout" || k == "grace":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("mount option %q: want a positive duration (60s, 2m)", opt)
			}
			if k == "timeout" {
				o.timeout = d
			} else {
				o.grace = d
			}
		case strings.HasPrefix(k, "x-"), genericMountOption[k]:
		default:
			return fmt.Errorf("unknown mount option %q", opt)
		}
	}
	if o.direct != "auto" && o.direct != "off" {
		return fmt.Errorf("direct=%s: want auto or off", o.direct)
	}
	return nil
}

// genericMountOption are mount(8)'s and fstab's options a helper is
// handed and that ask nothing of this mount.
var genericMountOption = map[string]bool{"rw": true, "defaults": true, "_netdev": true, "auto": true, "noauto": true,
	"user": true, "users": true, "nouser": true, "nofail": true, "dev": true, "nodev": true, "suid": true, "nosuid": true,
	"exec": true, "noexec": true, "atime": true, "noatime": true, "relatime": true, "async": true}

func kaonMount(o mountOptions, mountpoint string) int {
	servers, sub, err := mountServers(serverURL(o.url))
	if err != nil {
		fmt.Fprintf(os.Stderr, "kaon mount: %v\n", err)
		return 2
	}
	base := servers[0]
	if o.subtree == "" {
		o.subtree = sub
	}
	var gw *gateway.Key
	if o.gateway != "" {
		if gw, err = gateway.LoadKey(o.gateway); err != nil {
			fmt.Fprintf(os.Stderr, "kaon mount: %v\n", err)
			return 1
		}
	}
	mp, err := filepath.Abs(mountpoint)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kaon mount: %v\n", err)
		return 1
	}
	defaultCache := o.cache == ""
	if defaultCache {
		o.cache = defaultMountCache(mp)
	}
	host, _ := os.Hostname()
	var f *mount.FS
	d := fusecore.Daemon{Name: "kaon mount", Mountpoint: mp, CleanStale: true, Foreground: o.fg, LogPath: o.logPath}
	err = d.Run(func() (fusecore.Served, error) {
		syscall.Umask(0) // modes come from the caller, masked by the kernel
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		f, err = mount.New(ctx, mount.Options{URL: base, Subtree: o.subtree, CacheDir: o.cache,
			Host: host + ":" + mp, Version: versionString(), Token: envBearer(), Servers: servers[1:], Gateway: gw, Timeout: o.timeout, Grace: o.grace, Writeback: o.writeback, XRootD: o.xrootd,
			Direct: o.direct == "auto"})
		if err != nil {
			return nil, err
		}
		if err := os.Chdir("/"); err != nil {
			return nil, err
		}
		sub := o.subtree
		if sub == "" {
			sub = "/"
		}
		m, err := fusecore.New(f.Root(), fusecore.Config{Mountpoint: mp, FsName: "kaon:" + base + sub, Name: "kaon",
			AllowOther: o.allowOther, Locks: true, CleanStale: true, Debug: o.debug, Stats: f.Stats, Writeback: o.writeback, ServerKillsPriv: true,
			Passthrough: o.direct == "auto" && !o.writeback}) // the kernel refuses passthrough with write-back

		if err != nil {
			f.Close()
			f = nil
			return nil, err
		}
		f.SetPassthrough(m.PassthroughActive())
		fmt.Fprintf(os.Stderr, "kaon mount: %s%s mounted on %s (session %s, direct path %s, passthrough %v)\n", base, sub, mp, f.SessionID(), o.direct, m.PassthroughActive())
		done := mounted{Mount: m, f: f}
		if defaultCache {
			done.cache = o.cache
		}
		return done, nil
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "kaon mount: %v\n", err)
		return 1
	}
	return 0
}

// mountServers splits --url (or the mount source) into the namespace
// servers' URLs, in order, and the subtree the first one's path names
// ("" for none).
func mountServers(spec string) (servers []string, subtree string, err error) {
	for i, s := range strings.Split(spec, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, "", fmt.Errorf("%q is not a namespace server URL (http(s)://HOST:PORT[/PATH])", s)
		}
		if p := strings.TrimRight(u.Path, "/"); p != "" {
			if i == 0 {
				subtree = p
			} else if p != subtree {
				return nil, "", fmt.Errorf("%q names subtree %s, not the first URL's %q", s, p, subtree)
			}
		}
		u.Path, u.RawPath = "", ""
		servers = append(servers, u.String())
	}
	if len(servers) == 0 {
		return nil, "", fmt.Errorf("no namespace server URL")
	}
	return servers, subtree, nil
}

// mounted is a mount and its file system, whose session ends with it.
type mounted struct {
	*fusecore.Mount
	f     *mount.FS
	cache string // the default journals' directory, removed at the end
}

func (m mounted) Wait() error {
	err := m.Mount.Wait()
	m.f.Close()
	if m.cache != "" {
		// The default journals' directory: journals are unlinked at
		// creation, so nothing in it outlives the mount; removed when
		// empty (never a directory the user named).
		os.Remove(m.cache)
	}
	return err
}

func (m mounted) Summary() string { return m.f.Summary() }

// defaultMountCache is the journals' directory of the mount on mp.
func defaultMountCache(mp string) string {
	dir := "/var/cache/kaon"
	if os.Geteuid() != 0 {
		if d, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(d, "kaon")
		}
	}
	sum := sha256.Sum256([]byte(mp))
	return filepath.Join(dir, "mount-"+hex.EncodeToString(sum[:6]))
}

func newUmountCmd() *cobra.Command {
	var force bool
	c := leaf("umount [-f] MOUNTPOINT", "unmount a kaon mount (with -f even if its daemon hangs or is gone)", func(c *cobra.Command, args []string) int {
		if len(args) != 1 {
			return usageError(c)
		}
		var err error
		if force {
			err = fusecore.ForceUnmount(args[0])
		} else {
			err = fusecore.Unmount(args[0])
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "kaon umount: %v\n", err)
			return 1
		}
		return 0
	})
	c.Aliases = []string{"unmount"}
	c.Flags().BoolVarP(&force, "force", "f", false, "abort the mount's FUSE connection and detach it (requests in flight fail)")
	return c
}

// mountHelperArgs translates mount(8)'s call of its helper,
//
//	mount.kaon SPEC DIR [-sfnv] [-N NS] [-o OPTIONS] [-t TYPE]
//
// into kaon mount's command line (nil for -f, a fake mount: nothing to do).
func mountHelperArgs(args []string) ([]string, error) {
	var pos, opts []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" || a == "-t" || a == "-N":
			if i+1 >= len(args) {
				return nil, fmt.Errorf("%s needs a value", a)
			}
			if a == "-o" {
				opts = append(opts, args[i+1])
			}
			i++
		case strings.HasPrefix(a, "-o"):
			opts = append(opts, a[2:])
		case strings.HasPrefix(a, "-") && len(a) > 1:
			if strings.Contains(a, "f") {
				return nil, nil
			}
			// -s (sloppy), -n (no mtab), -v (verbose): nothing to do
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return nil, fmt.Errorf("usage: mount.kaon URL MOUNTPOINT [-o OPTIONS]")
	}
	out := []string{"mount", "--url", pos[0]}
	if len(opts) > 0 {
		out = append(out, "-o", strings.Join(opts, ","))
	}
	return append(out, "--", pos[1]), nil
}

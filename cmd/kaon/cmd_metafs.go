package main

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/fusecore"
	"github.com/kaon-storage/kaon/internal/metafs"
)

func init() {
	addVerb(func() *cobra.Command {
		keeper := leaf("keeper", "started by mount --kernel (internal/metafs/keeper.go)", func(*cobra.Command, []string) int {
			return metafs.RunKeeper()
		})
		keeper.Hidden = true
		umount := leaf("umount MOUNTPOINT", "unmount either kind of metafs mount (and stop its daemon)", func(_ *cobra.Command, args []string) int {
			return metafsUmount(args)
		})
		g := group("metafs", "bulk metadata index and read-only overlay for software trees",
			newMetafsIndexCmd(), newMetafsMountCmd(), newMetafsVerifyCmd(), umount, keeper)
		g.Long = metafsUsage
		return g
	})
}

const metafsUsage = `usage:
  kaon metafs index DIR [-o FILE] [--workers N] [--no-xattrs]
  kaon metafs mount --index FILE [--force] [--no-passthrough] [--ttl D] [--clean-stale] DIR [MOUNTPOINT]
  kaon metafs mount --kernel --index FILE [--force] [--clean-stale] DIR [MOUNTPOINT]
  kaon metafs umount MOUNTPOINT
  kaon metafs verify --index FILE DIR [--max N]

index   walk DIR once and write a compact, checksummed metadata index
        (default FILE: DIR.metafs next to DIR)
mount   serve DIR's metadata from the index; without MOUNTPOINT, mount over
        DIR itself. Only opens and data reads reach DIR. SIGHUP reloads FILE
        (rebuilt meanwhile) without unmounting; SIGUSR1 prints statistics;
        SIGINT/SIGTERM unmount.
        --kernel: no FUSE; the index becomes a skeleton tree on a private
        tmpfs, mounted read-only, so metadata never leaves the kernel; the
        daemon only copies each file's data in from DIR on its first open
        (fanotify; Linux 6.14+, root). The copied data stays in the tmpfs.
        A keeper process (kaon metafs keeper) takes the view down if the
        daemon dies, so no file reads as zeros; opens then fail with EIO.
        --clean-stale: clear a stale mount (FUSE: a dead connection;
        kernel mode: a view whose daemon and keeper are both gone).
umount  unmount either kind of metafs mount (and stop its daemon)
verify  compare the index with DIR and list every difference
        (exit 0: identical, 1: differences, 2: error)
`

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func newMetafsIndexCmd() *cobra.Command {
	var out string
	var workers int
	var noX bool
	c := leaf("index DIR [-o FILE]", "walk DIR once and write a compact, checksummed metadata index (default FILE: DIR.metafs)", func(_ *cobra.Command, args []string) int {
		if len(args) != 1 {
			fmt.Fprint(os.Stderr, metafsUsage)
			return 2
		}
		return metafsIndex(args[0], out, workers, noX)
	})
	c.Flags().StringVarP(&out, "o", "o", "", "index file to write (default DIR.metafs)")
	c.Flags().IntVar(&workers, "workers", 0, "directories read in parallel (default 4*GOMAXPROCS, at least 8)")
	c.Flags().BoolVar(&noX, "no-xattrs", false, "do not record extended attributes")
	return c
}

func metafsIndex(dir, out string, workers int, noX bool) int {
	if out == "" {
		out = filepath.Clean(dir) + ".metafs"
	}
	var prog atomic.Int64
	done := make(chan struct{})
	if isTerminal(os.Stderr) {
		go func() {
			t := time.NewTicker(200 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					fmt.Fprint(os.Stderr, "\r\033[K")
					return
				case <-t.C:
					fmt.Fprintf(os.Stderr, "\rindexing %s: %d entries", dir, prog.Load())
				}
			}
		}()
	}
	start := time.Now()
	x, err := metafs.Build(dir, metafs.BuildOptions{Workers: workers, NoXattrs: noX, Progress: &prog})
	walked := time.Since(start)
	if err == nil {
		var n int64
		n, err = x.WriteFile(out)
		close(done)
		if err == nil {
			fmt.Printf("indexed %s: %d entries (%d directories) in %.3fs (walk %.3fs); wrote %d bytes to %s (%d bytes in memory)\n",
				x.Source.Root, x.Len(), x.Source.Dirs, time.Since(start).Seconds(), walked.Seconds(), n, out, x.MemBytes())
			return 0
		}
	} else {
		close(done)
	}
	time.Sleep(10 * time.Millisecond) // let the progress line clear
	fmt.Fprintf(os.Stderr, "kaon metafs index: %v\n", err)
	return 1
}

// metafsMountOptions are the settings of a metafs mount.
type metafsMountOptions struct {
	idx, pprofAddr                    string
	force, noPT, debug, kernel, stale bool
	ttl                               time.Duration
	fdc                               int
}

func newMetafsMountCmd() *cobra.Command {
	var o metafsMountOptions
	c := leaf("mount --index FILE [--kernel] DIR [MOUNTPOINT]", "serve DIR's metadata from the index (over DIR itself without MOUNTPOINT)", func(_ *cobra.Command, args []string) int {
		if o.idx == "" || len(args) < 1 || len(args) > 2 {
			fmt.Fprint(os.Stderr, metafsUsage)
			return 2
		}
		mnt := args[0]
		if len(args) == 2 {
			mnt = args[1]
		}
		return metafsMount(o, args[0], mnt)
	})
	fl := c.Flags()
	fl.StringVar(&o.idx, "index", "", "index file (required)")
	fl.BoolVar(&o.force, "force", false, "mount (and reload) even if the index is stale")
	fl.BoolVar(&o.noPT, "no-passthrough", false, "serve reads with pread instead of kernel passthrough")
	fl.DurationVar(&o.ttl, "ttl", 24*time.Hour, "kernel cache lifetime of entries, attributes and misses")
	fl.IntVar(&o.fdc, "fd-cache", 1024, "lower files kept open after their last close")
	fl.BoolVar(&o.debug, "debug", false, "log every FUSE request")
	fl.BoolVarP(&o.debug, "v", "v", false, "verbose: log every FUSE request (same as --debug)")
	fl.StringVar(&o.pprofAddr, "pprof", "", "serve Go profiling of the daemon on this address (e.g. 127.0.0.1:6060)")
	fl.BoolVar(&o.kernel, "kernel", false, "serve metadata from a tmpfs skeleton in the kernel instead of FUSE")
	fl.BoolVar(&o.stale, "clean-stale", false, "clear a stale mount left on MOUNTPOINT by a crashed daemon (FUSE: detached lazily; kernel mode: a view whose daemon is dead)")
	return c
}

func metafsMount(o metafsMountOptions, dir, mnt string) int {
	// What SIGHUP switches to a rebuilt index: either kind of mount.
	var srv interface {
		Reload(x *metafs.Index, force bool) error
	}
	d := fusecore.Daemon{Name: "kaon metafs", Mountpoint: mnt, CleanStale: o.stale, Foreground: true,
		Reload: func() error {
			x, err := metafs.Load(o.idx)
			if err == nil {
				err = srv.Reload(x, o.force)
			}
			if err != nil {
				return fmt.Errorf("still serving the previous index: %w", err)
			}
			fmt.Printf("kaon metafs: reloaded %s (%d entries)\n", o.idx, x.Len())
			return nil
		}}
	err := d.Run(func() (fusecore.Served, error) {
		servePprof(o.pprofAddr)
		start := time.Now()
		x, err := metafs.Load(o.idx)
		if err != nil {
			return nil, err
		}
		loadT := time.Since(start)
		var (
			m   fusecore.Served
			how string
		)
		if o.kernel {
			exe, err := os.Executable()
			if err != nil {
				return nil, err
			}
			k, err := metafs.MountKernel(x, dir, mnt, metafs.KernelOptions{Force: o.force, CleanStale: o.stale,
				Keeper: []string{exe, "metafs", "keeper"}, Logf: log.Printf})
			if err != nil {
				return nil, err
			}
			m, srv, how = k, k, " in the kernel"
		} else {
			f, err := metafs.Mount(x, dir, mnt, metafs.MountOptions{Force: o.force, NoPassthrough: o.noPT, TTL: o.ttl,
				FdCache: o.fdc, AllowOther: os.Geteuid() == 0, CleanStale: o.stale, Debug: o.debug})
			if err != nil {
				return nil, err
			}
			m, srv = f, f
		}
		fmt.Printf("kaon metafs: serving %d entries of %s on %s%s (index %s, %d bytes, loaded in %.3fs, mounted in %.3fs)\n",
			x.Len(), dir, mnt, how, o.idx, x.FileSize, loadT.Seconds(), time.Since(start).Seconds()-loadT.Seconds())
		return m, nil
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "kaon metafs mount: %v\n", err)
		return 1
	}
	return 0
}

func metafsUmount(args []string) int {
	if len(args) != 1 {
		fmt.Fprint(os.Stderr, metafsUsage)
		return 2
	}
	if err := metafs.Unmount(args[0]); err != nil {
		fmt.Fprintf(os.Stderr, "kaon metafs umount %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func newMetafsVerifyCmd() *cobra.Command {
	var idx string
	var maxN int
	c := leaf("verify --index FILE DIR [--max N]", "compare the index with DIR and list every difference (exit 0: identical, 1: differences, 2: error)", func(_ *cobra.Command, args []string) int {
		if idx == "" || len(args) != 1 {
			fmt.Fprint(os.Stderr, metafsUsage)
			return 2
		}
		return metafsVerify(idx, args[0], maxN)
	})
	c.Flags().StringVar(&idx, "index", "", "index file (required)")
	c.Flags().IntVar(&maxN, "max", 100, "differences to print (0 = all)")
	return c
}

func metafsVerify(idx, dir string, maxN int) int {
	x, err := metafs.Load(idx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kaon metafs verify: %v\n", err)
		return 2
	}
	cur, err := metafs.Build(dir, metafs.BuildOptions{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "kaon metafs verify: %v\n", err)
		return 2
	}
	diffs := metafs.Compare(x, cur)
	if x.Source.Ino != cur.Source.Ino { // not the device: it changes with every mount
		fmt.Printf("root identity differs: index built from inode %d, %s is inode %d\n",
			x.Source.Ino, dir, cur.Source.Ino)
		diffs = append(diffs, metafs.Diff{Kind: "changed", Detail: "root identity"})
	}
	for k, d := range diffs {
		if maxN > 0 && k >= maxN {
			fmt.Printf("... and %d more\n", len(diffs)-k)
			break
		}
		fmt.Println(d)
	}
	if len(diffs) == 0 {
		fmt.Printf("%s matches %s: %d entries, built %s\n", idx, dir, x.Len(), x.Source.BuiltAt.UTC().Format(time.RFC3339))
		return 0
	}
	fmt.Printf("%s differs from %s: %d differences\n", idx, dir, len(diffs))
	return 1
}

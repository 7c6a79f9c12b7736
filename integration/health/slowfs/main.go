// Command slowfs mounts a directory again through FUSE (go-fuse's
// loopback) and delays every file operation by a time read from a file,
// changed while it runs: a disk made artificially slow for the slow-disk
// tests (integration/health).
//
//	slowfs DELAYFILE LOWER MOUNTPOINT   # serves until SIGTERM/SIGINT, then unmounts
//
// DELAYFILE holds a Go duration ("300ms"; missing, empty or "0": none),
// read again every 50 ms. Lookups, attributes, opens, creates, reads,
// writes, flushes, fsyncs, extended attributes and unlinks wait that long
// before they are served; statfs and directory listings do not.
package main

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/kaon-storage/kaon/internal/fusecore"
)

type delayed struct {
	fuse.RawFileSystem
	d *atomic.Int64
}

func (f delayed) wait() {
	if d := time.Duration(f.d.Load()); d > 0 {
		time.Sleep(d)
	}
}

func (f delayed) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	f.wait()
	return f.RawFileSystem.Lookup(c, h, name, out)
}

func (f delayed) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	f.wait()
	return f.RawFileSystem.GetAttr(c, in, out)
}

func (f delayed) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	f.wait()
	return f.RawFileSystem.SetAttr(c, in, out)
}

func (f delayed) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	f.wait()
	return f.RawFileSystem.Create(c, in, name, out)
}

func (f delayed) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	f.wait()
	return f.RawFileSystem.Open(c, in, out)
}

func (f delayed) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	f.wait()
	return f.RawFileSystem.Read(c, in, buf)
}

func (f delayed) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	f.wait()
	return f.RawFileSystem.Write(c, in, data)
}

func (f delayed) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	f.wait()
	return f.RawFileSystem.Flush(c, in)
}

func (f delayed) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	f.wait()
	return f.RawFileSystem.Fsync(c, in)
}

func (f delayed) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	f.wait()
	return f.RawFileSystem.GetXAttr(c, h, attr, dest)
}

func (f delayed) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	f.wait()
	return f.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (f delayed) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	f.wait()
	return f.RawFileSystem.Unlink(c, h, name)
}

// follow reads the delay from file every 50 ms.
func follow(file string, d *atomic.Int64) {
	for {
		var v time.Duration
		if b, err := os.ReadFile(file); err == nil {
			if s := strings.TrimSpace(string(b)); s != "" && s != "0" {
				if x, err := time.ParseDuration(s); err == nil {
					v = x
				}
			}
		}
		d.Store(int64(v))
		time.Sleep(50 * time.Millisecond)
	}
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: slowfs DELAYFILE LOWER MOUNTPOINT")
		os.Exit(2)
	}
	delayFile, lower, mp := os.Args[1], os.Args[2], os.Args[3]
	var d atomic.Int64
	go follow(delayFile, &d)
	root, err := fs.NewLoopbackRoot(lower)
	if err != nil {
		fmt.Fprintln(os.Stderr, "slowfs:", err)
		os.Exit(1)
	}
	// No kernel caching: every operation reaches the daemon (and waits).
	zero := time.Duration(0)
	raw := fs.NewNodeFS(root, &fs.Options{EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero, NullPermissions: true})
	dm := fusecore.Daemon{Name: "slowfs", Mountpoint: mp, CleanStale: true, Foreground: true}
	err = dm.Run(func() (fusecore.Served, error) {
		return fusecore.NewRaw(delayed{RawFileSystem: raw, d: &d}, fusecore.Config{Mountpoint: mp, FsName: "slowfs", Name: "slowfs"})
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "slowfs:", err)
		os.Exit(1)
	}
}

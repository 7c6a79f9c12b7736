// Command slowfs mounts a directory again through FUSE (go-fuse's
// loopback) and delays every file operation by a time read from a file,
// changed while it runs, or fails every operation with EIO: a disk made
// artificially slow for the slow-disk tests (integration/health), or a
// disk that died for the rebuild tests (integration/move).
//
//	slowfs DELAYFILE LOWER MOUNTPOINT   # serves until SIGTERM/SIGINT, then unmounts
//
// DELAYFILE holds a Go duration ("300ms"; missing, empty or "0": none)
// or "eio", read again every 50 ms. With a duration, lookups,
// attributes, opens, creates, reads, writes, flushes, fsyncs, extended
// attributes and unlinks wait that long before they are served; statfs
// and directory listings do not. With "eio", every one of those, statfs,
// directory listings and the other namespace operations fail with EIO,
// as a dead disk's do.
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
	d *atomic.Int64 // the delay, or eio
}

// eio in place of a delay fails every operation.
const eio = -1

// wait delays an operation, or says it fails.
func (f delayed) wait() fuse.Status {
	switch d := time.Duration(f.d.Load()); {
	case d == eio:
		return fuse.EIO
	case d > 0:
		time.Sleep(d)
	}
	return fuse.OK
}

// failing says whether operations fail (those never delayed).
func (f delayed) failing() fuse.Status {
	if f.d.Load() == eio {
		return fuse.EIO
	}
	return fuse.OK
}

func (f delayed) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if st := f.wait(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.Lookup(c, h, name, out)
}

func (f delayed) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if st := f.wait(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.GetAttr(c, in, out)
}

func (f delayed) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	if st := f.wait(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.SetAttr(c, in, out)
}

func (f delayed) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	if st := f.wait(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.Create(c, in, name, out)
}

func (f delayed) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if st := f.wait(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.Open(c, in, out)
}

func (f delayed) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	if st := f.wait(); st != fuse.OK {
		return nil, st
	}
	return f.RawFileSystem.Read(c, in, buf)
}

func (f delayed) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if st := f.wait(); st != fuse.OK {
		return 0, st
	}
	return f.RawFileSystem.Write(c, in, data)
}

func (f delayed) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	if st := f.wait(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.Flush(c, in)
}

func (f delayed) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	if st := f.wait(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.Fsync(c, in)
}

func (f delayed) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	if st := f.wait(); st != fuse.OK {
		return 0, st
	}
	return f.RawFileSystem.GetXAttr(c, h, attr, dest)
}

func (f delayed) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	if st := f.wait(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (f delayed) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	if st := f.wait(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.Unlink(c, h, name)
}

func (f delayed) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	if st := f.failing(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.StatFs(c, h, out)
}

func (f delayed) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if st := f.failing(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.OpenDir(c, in, out)
}

func (f delayed) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if st := f.failing(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.ReadDir(c, in, out)
}

func (f delayed) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	if st := f.failing(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.ReadDirPlus(c, in, out)
}

func (f delayed) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	if st := f.failing(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.Mkdir(c, in, name, out)
}

func (f delayed) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if st := f.failing(); st != fuse.OK {
		return st
	}
	return f.RawFileSystem.Rename(c, in, oldName, newName)
}

// follow reads the delay from file every 50 ms.
func follow(file string, d *atomic.Int64) {
	for {
		var v time.Duration
		if b, err := os.ReadFile(file); err == nil {
			switch s := strings.TrimSpace(string(b)); {
			case s == "eio":
				v = eio
			case s != "" && s != "0":
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

package fusecore

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// noOpendir makes the kernel skip OPENDIR and RELEASEDIR (two round trips
// per directory listed): the first OPENDIR answers ENOSYS, after which
// the kernel sends READDIR(PLUS) and FSYNCDIR with handle 0 and keeps
// directory listings cached (FOPEN_KEEP_CACHE|FOPEN_CACHE_DIR is the
// kernel's default in that mode). Each handle-less request is served by
// a short-lived handle of the wrapped file system positioned at the
// request's offset, so the file system's own OpendirHandle (filtering,
// seekdir) keeps working unchanged. Offsets must therefore be stable
// across opens of the directory, which holds for getdents-based streams
// (d_off) and the in-memory ones of go-fuse.
type noOpendir struct {
	fuse.RawFileSystem
}

func (w noOpendir) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	return fuse.ENOSYS
}

// withHandle runs fn with a temporary directory handle when the kernel
// sent none.
func (w noOpendir) withHandle(cancel <-chan struct{}, h *fuse.InHeader, fh uint64, fn func(fh uint64) fuse.Status) fuse.Status {
	if fh != 0 {
		return fn(fh)
	}
	var oo fuse.OpenOut
	if st := w.RawFileSystem.OpenDir(cancel, &fuse.OpenIn{InHeader: *h, Flags: syscall.O_RDONLY | syscall.O_DIRECTORY}, &oo); !st.Ok() {
		return st
	}
	defer w.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: *h, Fh: oo.Fh})
	return fn(oo.Fh)
}

func (w noOpendir) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return w.withHandle(cancel, &in.InHeader, in.Fh, func(fh uint64) fuse.Status {
		r := *in
		r.Fh = fh
		return w.RawFileSystem.ReadDir(cancel, &r, out)
	})
}

func (w noOpendir) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return w.withHandle(cancel, &in.InHeader, in.Fh, func(fh uint64) fuse.Status {
		r := *in
		r.Fh = fh
		return w.RawFileSystem.ReadDirPlus(cancel, &r, out)
	})
}

func (w noOpendir) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	return w.withHandle(cancel, &in.InHeader, in.Fh, func(fh uint64) fuse.Status {
		r := *in
		r.Fh = fh
		return w.RawFileSystem.FsyncDir(cancel, &r)
	})
}

func (w noOpendir) ReleaseDir(in *fuse.ReleaseIn) {
	if in.Fh != 0 {
		w.RawFileSystem.ReleaseDir(in)
	}
}

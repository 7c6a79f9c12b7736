package cfsd

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kaon-storage/kaon/internal/fusecore"
	"golang.org/x/sys/unix"
)

// file is an open backend file. Data goes through the daemon only when
// the kernel cannot pass it through (or quota must see every write); a
// ptFile additionally offers its fd for kernel passthrough.
type file struct {
	n     *node
	fd    int
	privs bool // setuid/setgid file: writes by users clear those bits
}

type ptFile struct{ *file }

// fileOf is implemented by both handle flavours.
type fileOf interface{ base() *file }

func (f *file) base() *file { return f }

// PassthroughFd lets the kernel do reads and writes on the backend file.
func (p ptFile) PassthroughFd() (int, bool) { return p.fd, true }

var (
	_ = (fs.FileReader)((*file)(nil))
	_ = (fs.FileWriter)((*file)(nil))
	_ = (fs.FileReleaser)((*file)(nil))
	_ = (fs.FileFsyncer)((*file)(nil))
	_ = (fs.FileAllocater)((*file)(nil))
	_ = (fs.FileLseeker)((*file)(nil))
	_ = (fs.FileGetattrer)((*file)(nil))
	_ = (fs.FileFlusher)((*file)(nil))
	_ = (fs.FilePassthroughFder)(ptFile{})
)

// newHandle wraps fd (st is its fstat). Passthrough is offered unless
//   - quota has to check the writes of a file whose owner has a byte
//     limit, or
//   - the file is setuid/setgid: the kernel performs passthrough writes
//     with the daemon's (root) credentials, so the backend would not
//     clear those bits on a write by an ordinary user; through the daemon
//     the write runs as the caller and it does.
func (n *node) newHandle(fd int, st *syscall.Stat_t) fs.FileHandle {
	f := &file{n: n, fd: fd}
	n.mu.Lock()
	n.handles = append(n.handles, f)
	n.mu.Unlock()
	if st.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
		f.privs = true
		return f
	}
	if q := n.cfs.quota; q != nil && q.Limited(st.Uid) {
		return f
	}
	return ptFile{f}
}

func (f *file) Read(ctx context.Context, dest []byte, off int64) (res fuse.ReadResult, errno syscall.Errno) {
	defer f.n.cfs.op.read.Done(time.Now(), &errno)
	k, err := syscall.Pread(f.fd, dest, off)
	if err != nil {
		return nil, errnoOf(err)
	}
	f.n.cfs.Stats.BytesOut.Add(int64(k))
	return fuse.ReadResultData(dest[:k]), 0
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (w uint32, errno syscall.Errno) {
	defer f.n.cfs.op.write.Done(time.Now(), &errno)
	if q := f.n.cfs.quota; q != nil {
		var st syscall.Stat_t
		if err := syscall.Fstat(f.fd, &st); err != nil {
			return 0, errnoOf(err)
		}
		if end := off + int64(len(data)); end > st.Size {
			if e := q.Check(st.Uid, end-st.Size, 0); e != 0 {
				return 0, e
			}
		}
	}
	// As the caller, so the backend clears setuid/setgid as it would.
	c := caller(ctx)
	cr := fusecore.Enter(c)
	k, err := syscall.Pwrite(f.fd, data, off)
	cr.Leave()
	if err != nil {
		return 0, errnoOf(err)
	}
	if f.privs && c.Uid != 0 {
		// The backend dropped the bits; the kernel's cached mode is
		// stale. Offset -1 invalidates attributes only (the written pages
		// are locked by this very request).
		f.n.NotifyContent(-1, 0)
	}
	f.n.cfs.Stats.BytesIn.Add(int64(k))
	if f.n.cfs.quota != nil {
		f.account()
	}
	return uint32(k), 0
}

// account brings the owner's usage in line with the file's size.
func (f *file) account() {
	var st syscall.Stat_t
	if syscall.Fstat(f.fd, &st) == nil {
		f.n.reconcile(&st)
	}
}

func (f *file) Release(ctx context.Context) (errno syscall.Errno) {
	defer f.n.cfs.op.release.Done(time.Now(), &errno)
	if f.n.cfs.quota != nil {
		// Passthrough writes bypassed us: settle the size now.
		f.account()
	}
	n := f.n
	n.mu.Lock()
	for i, h := range n.handles {
		if h == f {
			n.handles = append(n.handles[:i], n.handles[i+1:]...)
			break
		}
	}
	n.mu.Unlock()
	return errnoOf(syscall.Close(f.fd))
}

// Flush answers ENOSYS once so the kernel stops sending FLUSH on every
// close (one round trip per file saved): locks are kernel-local and the
// backends cfsd targets report write errors at write or fsync time.
func (f *file) Flush(ctx context.Context) syscall.Errno { return syscall.ENOSYS }

func (f *file) Fsync(ctx context.Context, flags uint32) (errno syscall.Errno) {
	defer f.n.cfs.op.fsync.Done(time.Now(), &errno)
	if flags&1 != 0 {
		return errnoOf(syscall.Fdatasync(f.fd))
	}
	return errnoOf(syscall.Fsync(f.fd))
}

func (f *file) Allocate(ctx context.Context, off, size uint64, mode uint32) (errno syscall.Errno) {
	defer f.n.cfs.op.allocate.Done(time.Now(), &errno)
	q := f.n.cfs.quota
	if q != nil && mode&unix.FALLOC_FL_KEEP_SIZE == 0 {
		var st syscall.Stat_t
		if err := syscall.Fstat(f.fd, &st); err != nil {
			return errnoOf(err)
		}
		if end := int64(off + size); end > st.Size {
			if e := q.Check(st.Uid, end-st.Size, 0); e != 0 {
				return e
			}
		}
	}
	if err := unix.Fallocate(f.fd, mode, int64(off), int64(size)); err != nil {
		return errnoOf(err)
	}
	if q != nil {
		f.account()
	}
	return 0
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (r uint64, errno syscall.Errno) {
	defer f.n.cfs.op.lseek.Done(time.Now(), &errno)
	k, err := unix.Seek(f.fd, int64(off), int(whence))
	return uint64(k), errnoOf(err)
}

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) (errno syscall.Errno) {
	defer f.n.cfs.op.getattr.Done(time.Now(), &errno)
	var st syscall.Stat_t
	if err := syscall.Fstat(f.fd, &st); err != nil {
		return errnoOf(err)
	}
	f.n.attr(&out.Attr, &st)
	return 0
}

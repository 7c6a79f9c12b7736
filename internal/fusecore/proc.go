package fusecore

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// ProcFile is a virtual control file. Render renders the content for the
// calling process at open; Exec executes what the caller wrote (one
// write(2) = one command). Either may be nil.
type ProcFile struct {
	fs.Inode
	Render func(c *fuse.Caller) []byte
	Exec   func(c *fuse.Caller, data []byte) error
}

var (
	_ = (fs.NodeOpener)((*ProcFile)(nil))
	_ = (fs.NodeReader)((*ProcFile)(nil))
	_ = (fs.NodeWriter)((*ProcFile)(nil))
	_ = (fs.NodeGetattrer)((*ProcFile)(nil))
	_ = (fs.NodeSetattrer)((*ProcFile)(nil))
)

type procHandle struct{ data []byte }

func callerOf(ctx context.Context) *fuse.Caller {
	if c, ok := fuse.FromContext(ctx); ok {
		return c
	}
	return &fuse.Caller{}
}

// Open snapshots the content so a reader sees one consistent document.
func (p *ProcFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	acc := flags & syscall.O_ACCMODE
	if acc != syscall.O_RDONLY && p.Exec == nil {
		return nil, 0, syscall.EACCES
	}
	if acc != syscall.O_WRONLY && p.Render == nil {
		return nil, 0, syscall.EACCES
	}
	h := &procHandle{}
	if p.Render != nil && acc != syscall.O_WRONLY {
		h.data = p.Render(callerOf(ctx))
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

func (p *ProcFile) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, _ := f.(*procHandle)
	if h == nil || off >= int64(len(h.data)) {
		return fuse.ReadResultData(nil), 0
	}
	end := min(off+int64(len(dest)), int64(len(h.data)))
	return fuse.ReadResultData(h.data[off:end]), 0
}

func (p *ProcFile) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if p.Exec == nil {
		return 0, syscall.EACCES
	}
	if err := p.Exec(callerOf(ctx), data); err != nil {
		return 0, kerr.Errno(kerr.KindOf(err))
	}
	return uint32(len(data)), 0
}

func (p *ProcFile) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o444
	if p.Exec != nil {
		// Writers check the caller themselves (e.g. root-only commands).
		out.Mode |= 0o222
	}
	out.Nlink = 1
	t := uint64(time.Now().Unix())
	out.Mtime, out.Ctime, out.Atime = t, t, t
	out.SetTimeout(0)
	return 0
}

// Setattr accepts the truncate that `echo cmd > file` sends.
func (p *ProcFile) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return p.Getattr(ctx, f, out)
}

type procDir struct{ fs.Inode }

func (d *procDir) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o555
	out.Nlink = 2
	return 0
}

// NewProcDir builds a persistent virtual directory holding files. The
// caller links it into its tree (e.g. returns it from Lookup(".proc")
// without listing it, which keeps it hidden).
func NewProcDir(ctx context.Context, parent *fs.Inode, files map[string]*ProcFile) *fs.Inode {
	dir := parent.NewPersistentInode(ctx, &procDir{}, fs.StableAttr{Mode: syscall.S_IFDIR})
	for name, f := range files {
		ch := dir.NewPersistentInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG})
		dir.AddChild(name, ch, true)
	}
	return dir
}

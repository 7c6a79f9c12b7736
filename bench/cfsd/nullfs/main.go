// Command nullfs mounts a FUSE file system that keeps its tree in memory
// and discards file data, with the same mount options as `kaon cfsd`
// (package fusecore). bench/cfsd/bench.sh runs the workloads on it to show
// the ceiling of any FUSE file system on the machine: what the kernel
// round trips alone cost, with no backend behind them.
//
//	nullfs MOUNTPOINT    # serves until SIGTERM/SIGINT, then unmounts
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kaon-storage/kaon/internal/fusecore"
)

type node struct {
	fs.Inode
	mu     sync.Mutex
	attr   fuse.Attr
	target []byte // symlinks
}

var (
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeWriter     = (*node)(nil)
	_ fs.NodeReader     = (*node)(nil)
)

func (n *node) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	out.Attr = n.attr
	return 0
}

func (n *node) Setattr(_ context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	if m, ok := in.GetMode(); ok {
		n.attr.Mode = n.attr.Mode&syscall.S_IFMT | m&07777
	}
	if u, ok := in.GetUID(); ok {
		n.attr.Uid = u
	}
	if g, ok := in.GetGID(); ok {
		n.attr.Gid = g
	}
	if s, ok := in.GetSize(); ok {
		n.attr.Size = s
	}
	if t, ok := in.GetMTime(); ok {
		n.attr.SetTimes(nil, &t, nil)
	}
	out.Attr = n.attr
	return 0
}

func (n *node) newChild(ctx context.Context, mode uint32, out *fuse.EntryOut) *fs.Inode {
	c := &node{}
	now := time.Now()
	c.attr.Mode = mode
	c.attr.Nlink = 1
	c.attr.SetTimes(&now, &now, &now)
	if caller, ok := fuse.FromContext(ctx); ok {
		c.attr.Uid, c.attr.Gid = caller.Uid, caller.Gid
	}
	out.Attr = c.attr
	// Persistent: the kernel forgetting an inode (drop_caches) must not
	// drop it from the tree, which lives nowhere else.
	return n.NewPersistentInode(ctx, c, fs.StableAttr{Mode: mode & syscall.S_IFMT})
}

func (n *node) Create(ctx context.Context, _ string, _ uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return n.newChild(ctx, syscall.S_IFREG|mode&07777, out), nil, 0, 0
}

func (n *node) Mkdir(ctx context.Context, _ string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.newChild(ctx, syscall.S_IFDIR|mode&07777, out), 0
}

func (n *node) Symlink(ctx context.Context, target, _ string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	in := n.newChild(ctx, syscall.S_IFLNK|0o777, out)
	in.Operations().(*node).target = []byte(target)
	return in, 0
}

func (n *node) Readlink(context.Context) ([]byte, syscall.Errno) { return n.target, 0 }
func (n *node) Unlink(context.Context, string) syscall.Errno     { return 0 }
func (n *node) Rmdir(context.Context, string) syscall.Errno      { return 0 }
func (n *node) Open(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, 0, 0
}

// Write keeps only the size: the data is discarded.
func (n *node) Write(_ context.Context, _ fs.FileHandle, p []byte, off int64) (uint32, syscall.Errno) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if end := uint64(off) + uint64(len(p)); end > n.attr.Size {
		n.attr.Size = end
	}
	return uint32(len(p)), 0
}

func (n *node) Read(_ context.Context, _ fs.FileHandle, p []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return fuse.ReadResultData(nil), 0
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: nullfs MOUNTPOINT")
		os.Exit(2)
	}
	root := &node{}
	root.attr.Mode = syscall.S_IFDIR | 0o777
	root.attr.Nlink = 2
	d := fusecore.Daemon{Name: "nullfs", Mountpoint: os.Args[1], CleanStale: true, Foreground: true}
	err := d.Run(func() (fusecore.Served, error) {
		return fusecore.New(root, fusecore.Config{Mountpoint: os.Args[1], FsName: "nullfs", Name: "nullfs", ServerKillsPriv: true,
			EntryTimeout: 10 * time.Second, AttrTimeout: 10 * time.Second})
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nullfs:", err)
		os.Exit(1)
	}
}

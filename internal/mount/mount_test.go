package mount

import (
	"context"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/kaon-storage/kaon/internal/fusecore"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// tree builds an unmounted FS whose root (inode 1) holds file "f"
// (inode 7), as the kernel would know them after a lookup.
func tree(t *testing.T) *FS {
	t.Helper()
	f := &FS{Stats: fusecore.NewStats(), nodes: map[uint64]*node{}, subs: map[uint64]bool{}, notify: make(chan func(), 16)}
	f.root = &node{fsys: f}
	f.root.attr = nsapi.Attr{ID: 1, IsDir: true}
	f.nodes[1] = f.root
	fs.NewNodeFS(f.root, &fs.Options{})
	cn := &node{fsys: f}
	cn.attr = nsapi.Attr{ID: 7, Size: 5}
	ch := f.root.NewPersistentInode(context.Background(), cn, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 7})
	f.root.AddChild("f", ch, false)
	f.register(cn)
	return f
}

// TestLateCommitKeepsName: the news that a file came into being, arriving
// after the mount looked the file up and read it, invalidates its
// attributes only: invalidating its name would make the kernel evict
// the (closed) file's inode and its pages with it.
func TestLateCommitKeepsName(t *testing.T) {
	f := tree(t)
	f.apply(nsapi.Invalidation{Event: nsapi.Event{Kind: nsapi.EventCommitted, Ino: 7, Parent: 1, Name: "f", Size: 5}})
	if n := len(f.notify); n != 1 {
		t.Fatalf("a late commit of a file known by its name queued %d kernel notifications, want 1 (its attributes)", n)
	}
	// A new file the kernel does not know: its name (a negative entry)
	// is invalidated.
	f.apply(nsapi.Invalidation{Event: nsapi.Event{Kind: nsapi.EventCommitted, Ino: 8, Parent: 1, Name: "g"}})
	if n := len(f.notify); n != 2 {
		t.Fatalf("a commit of a new name queued %d kernel notifications in all, want 2", n)
	}
}

package fusecore

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// modeNode reports a fixed mode (type bits included) and owner root.
type modeNode struct {
	fs.Inode
	mode uint32
}

func (n *modeNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = n.mode
	out.Nlink = 1
	return 0
}

type modeRoot struct{ modeNode }

func (r *modeRoot) OnAdd(ctx context.Context) {
	for name, mode := range map[string]uint32{
		"zdir": syscall.S_IFDIR, "zfile": syscall.S_IFREG, "pdir": syscall.S_IFDIR | 0o755,
	} {
		ch := r.NewPersistentInode(ctx, &modeNode{mode: mode}, fs.StableAttr{Mode: mode & syscall.S_IFMT})
		r.AddChild(name, ch, false)
	}
}

// TestModeZeroReachesKernel: a directory or file whose mode has no
// permission bits is shown with mode 0 (not go-fuse's 0755/0644
// substitute), and the kernel's default_permissions check refuses an
// ordinary user on it.
func TestModeZeroReachesKernel(t *testing.T) {
	if !isRoot {
		t.Skip("needs root")
	}
	mp := t.TempDir()
	// Reachable by uid 65534 (t.TempDir's parent is 0700).
	for p := mp; p != os.TempDir(); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m, err := New(&modeRoot{modeNode{mode: syscall.S_IFDIR | 0o755}}, Config{Mountpoint: mp, Name: "modetest"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Server.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}()
	for name, want := range map[string]uint32{"zdir": syscall.S_IFDIR, "zfile": syscall.S_IFREG, "pdir": syscall.S_IFDIR | 0o755} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(mp, name), &st); err != nil {
			t.Fatalf("stat %s: %v", name, err)
		}
		if st.Mode != want {
			t.Errorf("%s: mode %o, want %o", name, st.Mode, want)
		}
	}
	// As uid 65534 on this (locked) thread: the kernel checks the modes.
	cr := Enter(&fuse.Caller{Owner: fuse.Owner{Uid: 65534, Gid: 65534}})
	_, errPub := os.ReadDir(filepath.Join(mp, "pdir"))
	_, errDir := os.ReadDir(filepath.Join(mp, "zdir"))
	_, errFile := os.ReadFile(filepath.Join(mp, "zfile"))
	cr.Leave()
	if errPub != nil {
		t.Errorf("uid 65534 listing a 0755 directory: %v", errPub)
	}
	if !os.IsPermission(errDir) {
		t.Errorf("uid 65534 listing a mode-0 directory: %v, want permission denied", errDir)
	}
	if !os.IsPermission(errFile) {
		t.Errorf("uid 65534 reading a mode-0 file: %v, want permission denied", errFile)
	}
}

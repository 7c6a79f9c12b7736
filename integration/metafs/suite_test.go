package metafs_test

import (
	"path/filepath"
	"testing"

	"github.com/kaon-storage/kaon/integration/fusetest"
	"golang.org/x/sys/unix"
)

// TestSuite runs the read-only part of the shared FUSE suite
// (integration/fusetest: every metadata answer as the tree's, misses,
// EROFS on every write path) on metafs over an index of the suite's
// tree: in FUSE mode with and without kernel passthrough, and in kernel
// mode. statfs names the file system serving the mount (FUSE, or the
// kernel mode's tmpfs skeleton); in FUSE mode a metadata-only scenario
// never reaches the tree below (the daemon's statistics at exit count
// no lower open).
func TestSuite(t *testing.T) {
	for _, mode := range []struct {
		name  string
		args  []string
		caps  fusetest.Caps
		magic int64 // statfs f_type of the mount
	}{
		{"fuse", nil, fusetest.Caps{Presents: true, HardLinks: true, Xattrs: true, Atimes: true}, 0x65735546},
		{"no-passthrough", []string{"--no-passthrough"}, fusetest.Caps{Presents: true, HardLinks: true, Xattrs: true, Atimes: true}, 0x65735546},
		{"kernel", []string{"--kernel"}, fusetest.Caps{Presents: true, HardLinks: true, Xattrs: true, OwnInodes: true}, unix.TMPFS_MAGIC},
	} {
		t.Run(mode.name, func(t *testing.T) {
			fusetest.Run(t, fusetest.Driver{Caps: mode.caps, Mount: func(t *testing.T, sc fusetest.Scenario, tree string) (string, func()) {
				idx := filepath.Join(t.TempDir(), "sw.metafs")
				index(t, tree, idx)
				mnt := t.TempDir()
				d := mount(t, append(append([]string(nil), mode.args...), "--index", idx, tree, mnt)...)
				var sf unix.Statfs_t
				must(t, unix.Statfs(mnt, &sf))
				if sf.Type != mode.magic {
					t.Fatalf("statfs type %x: not the %s mount (%x)", sf.Type, mode.name, mode.magic)
				}
				return mnt, func() {
					out := d.stop(t)
					if sc.MetadataOnly && mode.magic != unix.TMPFS_MAGIC {
						if got := lowerOpens(t, out); got != "opens=0" {
							t.Fatalf("scenario %s (metadata only) reached the lower filesystem: %s", sc.Name, got)
						}
					}
				}
			}})
		})
	}
}

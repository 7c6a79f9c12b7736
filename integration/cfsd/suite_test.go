package cfsd_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/fusetest"
)

// variants are the mount options the shared suite runs under: the
// recycle bin must change nothing an application sees.
var variants = []struct {
	name string
	args []string
}{{"plain", nil}, {"recycle", []string{"--recycle"}}, {"io_uring", []string{"--io-uring"}}}

// uringEnabled reports whether the kernel offers FUSE over io_uring
// (Linux >= 6.14 with the fuse module's enable_uring parameter on).
func uringEnabled() bool {
	b, err := os.ReadFile("/sys/module/fuse/parameters/enable_uring")
	return err == nil && strings.TrimSpace(string(b)) == "Y"
}

// cfsdCaps: a pass-through mount that can do everything its backend (a
// plain directory here) can. Not Presents: cfsd keeps its state
// directory (.kaon-cfsd) in the backend and hides it, so a walk of the
// tree below would find an entry the mount does not show.
var cfsdCaps = fusetest.Caps{Writable: true, InTree: true, HardLinks: true, Xattrs: true, Locks: true, ACL: true, NonRoot: true,
	Symlinks: true, Special: true, Utimes: true, Holes: true, Exchange: true, LongPaths: true}

// TestSuite runs the shared FUSE suite (integration/fusetest) on `kaon
// cfsd mount` with the tree as its backend, plain and with the recycle
// bin: POSIX behaviour as root and access rules as other users exactly
// as on a plain directory of the backend's file system, large listings,
// kernel-enforced POSIX ACLs.
func TestSuite(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			uring := slices.Contains(v.args, "--io-uring")
			if uring && !uringEnabled() {
				t.Skip("FUSE over io_uring not enabled (/sys/module/fuse/parameters/enable_uring)")
			}
			fusetest.Run(t, fusetest.Driver{Caps: cfsdCaps, Mount: func(t *testing.T, _ fusetest.Scenario, tree string) (string, func()) {
				m := newMount(t, tree, v.args...)
				if uring {
					// The suite must not pass over /dev/fuse unnoticed.
					b, err := os.ReadFile(m.path(".proc", "stats.json"))
					if err != nil || !strings.Contains(string(b), `"transport": "io_uring"`) {
						t.Fatalf("--io-uring mount serves over another transport: %v\n%s\n%s", err, b, m.log)
					}
				}
				return m.mp, m.stop
			}})
		})
	}
}

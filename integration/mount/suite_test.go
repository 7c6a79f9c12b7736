package mount_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/kaon-storage/kaon/integration/fusetest"
	"github.com/kaon-storage/kaon/integration/harness"
)

// mountCaps: what Kaon's namespace holds the way a local file system
// does. Times: the modification time, no access time. Symlinks: the
// namespace's links, followed by the kernel (TestSymlinks). Not yet: hard
// links (EPERM, TestLinkAndTimes), special files (fifos),
// holes (fallocate, SEEK_DATA), RENAME_EXCHANGE,
// paths beyond PATH_MAX (the API takes whole paths), POSIX ACLs (Kaon's
// are its own, sys.acl). NonRoot: other callers act as themselves
// (TestIdentity) with their process's gid and supplementary groups
// (auth.ProcessGroups).
var mountCaps = fusetest.Caps{Writable: true, NonRoot: true, Xattrs: true, Locks: true, Utimes: true, NoAtime: true, Symlinks: true}

// TestSuite runs the shared FUSE suite on `kaon mount`: each scenario on
// a fresh directory of one `kaon up`, mounted as the subtree.
func TestSuite(t *testing.T) {
	up := harness.Up(t)
	var n atomic.Int32
	fusetest.Run(t, fusetest.Driver{Caps: mountCaps, Mount: func(t *testing.T, sc fusetest.Scenario, _ string) (string, func()) {
		sub := fmt.Sprintf("/suite-%s-%d", sc.Name, n.Add(1))
		up.MustKaon("mkdir", sub)
		up.MustKaon("chmod", "755", sub)
		m := newMount(t, up.EP.HTTP, sub, "")
		return m.mp, m.stop
	}})
}

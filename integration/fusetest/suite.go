package fusetest

import (
	"os"
	"path/filepath"
	"testing"
)

// Caps say what a mount can do. A scenario needing what a mount lacks is
// skipped on it (named in the test output), and a step of a scenario
// needing it is left out of both the plain directory's run and the
// mount's, so nothing a mount can do is checked less for another's sake.
type Caps struct {
	// Writable: the mount takes writes. Without it, every write path
	// must fail with EROFS (scenario read-only).
	Writable bool
	// Presents: Mount shows the content of the directory it is given;
	// the tree scenarios compare every answer with that directory. A
	// read-only mount needs it to be tested at all.
	Presents bool
	// InTree: what is written through the mount lands in that
	// directory as if written there directly (a pass-through mount), so
	// the scenarios also check it there.
	InTree bool
	// HardLinks: link(2), and link counts as a plain directory keeps them.
	HardLinks bool
	// Xattrs: user.* extended attributes.
	Xattrs bool
	// Locks: flock(2) and OFD fcntl locks.
	Locks bool
	// ACL: POSIX ACLs (system.posix_acl_access), enforced by the kernel.
	ACL bool
	// NonRoot: callers other than root are served, with the permission
	// checks of a plain directory (allow_other, default_permissions):
	// the permission scenarios run as uid 1000 and as nobody.
	NonRoot bool
	// Atimes: access times are the tree's and metadata answers leave them
	// so (compared by scenario tree).
	Atimes bool
	// Symlinks: symlink(2), readlink, lchown and utimensat on a link.
	Symlinks bool
	// Special: fifos (mkfifo) and other special files.
	Special bool
	// Utimes: explicit access and modification times (utimensat).
	Utimes bool
	// NoAtime: the mount keeps no access time (stat answers the
	// modification time); with Utimes, only the mtime set is compared.
	NoAtime bool
	// Holes: sparse files (a write far past the end allocates little;
	// SEEK_DATA/SEEK_HOLE find the data).
	Holes bool
	// Exchange: renameat2 RENAME_EXCHANGE.
	Exchange bool
	// LongPaths: trees deeper than PATH_MAX as a whole path, walked with
	// directory descriptors.
	LongPaths bool
	// OwnInodes: inode numbers, ctimes, block counts of files and sizes
	// of directories are the mount's own, not the tree's (metafs' kernel
	// mode serves a tmpfs skeleton); scenario tree does not compare them.
	OwnInodes bool
}

// A Driver is one mount under test.
type Driver struct {
	Caps Caps
	// Mount mounts a file system for scenario sc and returns the
	// directory where callers see it and a function that unmounts it.
	// tree is an empty directory, or with sc.Tree the tree MakeTree
	// made; a mount with Caps.Presents shows its content, one with
	// Caps.InTree keeps what is written in it. Mount fails t if the
	// mount does not come up; unmount is called once the scenario is
	// done (also when it failed) and may check what the mount did during
	// sc (metafs: a metadata-only scenario opened no file below).
	Mount func(t *testing.T, sc Scenario, tree string) (root string, unmount func())
}

// Mounted is a mount a scenario runs on.
type Mounted struct {
	Root string // where callers see the file system
	Tree string // the directory given to Driver.Mount
	Caps Caps
}

// A Scenario is one test of the suite.
type Scenario struct {
	Name string
	// Tree: the scenario runs on MakeTree's tree (else on an empty
	// directory).
	Tree bool
	// MetadataOnly: the scenario only looks up, stats, lists and reads
	// links and extended attributes; it opens no file and changes
	// nothing.
	MetadataOnly bool
	// Needs says what a mount must be able to do (the skip message).
	Needs string
	runs  func(Caps) bool // whether a mount that can do c runs it
	run   func(*testing.T, Mounted)
}

// Scenarios are the suite, in the order Run runs them.
var Scenarios = []Scenario{
	{Name: "posix", Needs: "Writable", runs: func(c Caps) bool { return c.Writable }, run: testPOSIX},
	{Name: "permissions", Needs: "Writable, NonRoot", runs: func(c Caps) bool { return c.Writable && c.NonRoot }, run: testPermissions},
	{Name: "acl", Needs: "Writable, NonRoot, ACL", runs: func(c Caps) bool { return c.Writable && c.NonRoot && c.ACL }, run: testACL},
	{Name: "large-dir", Needs: "Writable", runs: func(c Caps) bool { return c.Writable }, run: testLargeDir},
	{Name: "tree", Tree: true, MetadataOnly: true, Needs: "Presents", runs: func(c Caps) bool { return c.Presents }, run: testTree},
	{Name: "negative-lookups", Tree: true, MetadataOnly: true, Needs: "Presents", runs: func(c Caps) bool { return c.Presents }, run: testNegativeLookups},
	{Name: "read-only", Tree: true, Needs: "Presents, not Writable", runs: func(c Caps) bool { return c.Presents && !c.Writable }, run: testReadOnly},
}

// Run runs every scenario on fresh mounts of d, one subtest each.
func Run(t *testing.T, d Driver) {
	for _, sc := range Scenarios {
		t.Run(sc.Name, func(t *testing.T) { runScenario(t, d, sc) })
	}
}

func runScenario(t *testing.T, d Driver, sc Scenario) {
	if !sc.runs(d.Caps) {
		t.Skipf("needs Caps %s", sc.Needs)
	}
	var tree string
	if sc.Tree {
		tree = MakeTree(t)
	} else {
		tree = filepath.Join(TempDir(t), "tree")
		if err := os.Mkdir(tree, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root, unmount := d.Mount(t, sc, tree)
	defer unmount()
	sc.run(t, Mounted{Root: root, Tree: tree, Caps: d.Caps})
}

package fusetest

import (
	"os"
	"testing"
)

// TestPlainDirectory runs the suite on its reference itself, a plain
// directory with no mount, once with every capability and once without
// those that leave steps out (hard links, xattrs, locks, ACLs, checks in
// the tree): the absolute checks hold on a plain directory, and leaving
// out the steps a mount cannot take leaves no other step depending on
// them. (large-dir, which no capability changes,
// runs on the mounts only: it empties the host's caches.)
func TestPlainDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (chown, setuid children)")
	}
	plain := func(c Caps) Driver {
		return Driver{Caps: c, Mount: func(t *testing.T, _ Scenario, tree string) (string, func()) { return tree, func() {} }}
	}
	for _, v := range []struct {
		name string
		caps Caps
	}{
		{"every", Caps{Writable: true, Presents: true, InTree: true, HardLinks: true, Xattrs: true, Locks: true, ACL: true, NonRoot: true, Atimes: true}},
		{"bare", Caps{Writable: true, Presents: true, NonRoot: true}},
	} {
		t.Run(v.name, func(t *testing.T) {
			for _, sc := range Scenarios {
				if sc.Name != "large-dir" {
					t.Run(sc.Name, func(t *testing.T) { runScenario(t, plain(v.caps), sc) })
				}
			}
		})
	}
}

// TestFSXPlainDirectory: the exerciser's model agrees with a plain
// directory (through one path and through two alternating), so a
// difference on a mount is the mount's.
func TestFSXPlainDirectory(t *testing.T) {
	d := t.TempDir()
	FSX{Roots: []string{d}, Name: "one", Ops: 5000, Seed: 1}.Run(t)
	FSX{Roots: []string{d, d}, Name: "two", Ops: 5000, Seed: 2}.Run(t)
}

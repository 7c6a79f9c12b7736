package fusetest

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// permLines are the lines of the permission script, which exercises
// access checks and ownership as an ordinary user. A line whose needs a
// mount lacks is left out, and its alternative (if any) put in.
var permLines = []struct {
	needs func(Caps) bool // nil: every mount
	line  string
}{
	{nil, `echo a > pub/mine && echo created-pub`},
	{nil, `stat -c '%u:%g %a' pub/mine`},
	{nil, `echo b > priv/x; echo "write priv rc=$?"`},
	{nil, `ls priv >/dev/null 2>&1; echo "ls priv rc=$?"`},
	{nil, `cat priv/../pub/mine`},
	{nil, `cat ro/secret; echo "read secret rc=$?"`},
	{nil, `echo c > grp/g; echo "write grp rc=$?"`},
	{nil, `stat -c '%u:%g' grp/g 2>/dev/null`},
	{nil, `rm -f sticky/other; echo "rm sticky other rc=$?"`},
	{nil, `rm -f sticky/own; echo "rm sticky own rc=$?"`},
	{nil, `chmod 600 pub/mine; echo "chmod own rc=$?"; stat -c '%a' pub/mine`},
	{nil, `chmod 600 ro/secret; echo "chmod foreign rc=$?"`},
	{nil, `chown 0 pub/mine; echo "chown rc=$?"`},
	{nil, `chgrp 2000 pub/mine; echo "chgrp member rc=$?"; stat -c '%g' pub/mine`},
	{nil, `chgrp 3000 pub/mine; echo "chgrp nonmember rc=$?"`},
	{nil, `touch -d @86400 pub/mine; echo "utime own rc=$?"; stat -c '%Y' pub/mine`},
	{nil, `touch -d @86400 ro/secret; echo "utime foreign rc=$?"`},
	{nil, `touch ro/pubw; echo "touch world-writable rc=$?"`},
	{nil, `mkdir alice/sub && stat -c 'sub %u:%g %a' alice/sub`},
	{withSymlinks, `ln -s pub alice/lnk && stat -c 'lnk %u:%g' alice/lnk`},
	{nil, `mkdir sgid/sd && stat -c 'sgid-dir %u:%g %a' sgid/sd`},
	{nil, `echo s > sgid/sf && stat -c 'sgid-file %u:%g' sgid/sf`},
	{nil, `mv alice/sub pub/moved; echo "mv rc=$?"`},
	{nil, `mv pub/moved priv/; echo "mv into priv rc=$?"`},
	{nil, `rmdir pub/moved; echo "rmdir rc=$?"`},
	{withXattrs, `setfattr -n user.u -v 1 pub/mine; echo "setxattr own rc=$?"`},
	{withXattrs, `setfattr -n user.u -v 1 ro/secret; echo "setxattr foreign rc=$?"`},
	{withXattrs, `getfattr -n user.tag --only-values ro/secret; echo " getxattr rc=$?"`},
	{nil, `echo suid > alice/s && chmod 4755 alice/s && echo more >> alice/s; stat -c 'suid-after-write %a' alice/s`},
	{nil, `: > ro/pubw; echo "truncate world-writable rc=$?"`},
	{nil, `stat -c 'zero %a %U' zero zerof`},
	{nil, `ls zero; echo "ls zero rc=$?"`},
	{nil, `cat zero/inner; echo "cat zero/inner rc=$?"`},
	{nil, `cat zerof; echo "cat zerof rc=$?"`},
	{withXattrs, `mkdir alice/z && setfattr -n user.k -v 1 alice/z && chmod 0600 alice/z; echo "chmod 0600 dir rc=$?"`},
	{withoutXattrs, `mkdir alice/z && chmod 0600 alice/z; echo "chmod 0600 dir rc=$?"`},
	{nil, `chmod 0000 alice/z; echo "chmod 0000 dir rc=$?"`},
	{nil, `chgrp 2000 alice/z; echo "chgrp 0000 dir rc=$?"`},
	{nil, `touch -d @86400 alice/z; echo "utime 0000 dir rc=$?"`},
	{withXattrs, `getfattr -m - alice/z; echo "listxattr 0000 dir rc=$?"`},
	{nil, `stat -c 'z %a %g %Y' alice/z`},
	{nil, `ls alice/z; echo "ls own 0000 dir rc=$?"`},
	{nil, `chmod 0700 alice/z; echo "chmod 0000 dir back rc=$?"`},
	{nil, `echo f > alice/zf && chmod 0 alice/zf && chmod 0600 alice/zf; echo "chmod 0000 file rc=$?"`},
	{withHardLinks, `ln alice/zf alice/zf2 && rm alice/zf; echo "rm one link rc=$?"; stat -c 'zf2 nlink %h' alice/zf2`},
}

func withXattrs(c Caps) bool    { return c.Xattrs }
func withoutXattrs(c Caps) bool { return !c.Xattrs }
func withHardLinks(c Caps) bool { return c.HardLinks }
func withSymlinks(c Caps) bool  { return c.Symlinks }

// permScript is the permission script for a mount that can do c.
func permScript(c Caps) string {
	s := "\n"
	for _, l := range permLines {
		if l.needs == nil || l.needs(c) {
			s += l.line + "\n"
		}
	}
	return s
}

// setupPermTree builds the same owners/modes in dir.
func setupPermTree(t *testing.T, dir string, c Caps) {
	mk := func(p string, mode os.FileMode, uid, gid int) {
		if err := os.Mkdir(filepath.Join(dir, p), mode); err != nil {
			t.Fatal(err)
		}
		os.Chown(filepath.Join(dir, p), uid, gid)
		unix.Chmod(filepath.Join(dir, p), uint32(mode))
	}
	file := func(p string, mode os.FileMode, uid, gid int) {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("data\n"), mode); err != nil {
			t.Fatal(err)
		}
		os.Chown(filepath.Join(dir, p), uid, gid)
		unix.Chmod(filepath.Join(dir, p), uint32(mode))
	}
	mk("pub", 0o777, 0, 0)
	mk("priv", 0o700, 0, 0)
	mk("ro", 0o755, 0, 0)
	file("ro/secret", 0o600, 0, 0)
	file("ro/pubw", 0o666, 0, 0)
	if c.Xattrs {
		unix.Setxattr(filepath.Join(dir, "ro/secret"), "user.tag", []byte("t"), 0)
	}
	mk("grp", 0o770, 0, 2000)
	mk("sticky", 0o1777, 0, 0)
	file("sticky/other", 0o666, 1001, 1001)
	file("sticky/own", 0o644, 1000, 1000)
	mk("alice", 0o755, 1000, 1000)
	mk("sgid", 0o2777, 0, 2000)
	mk("zero", 0o755, 0, 0)
	file("zero/inner", 0o644, 0, 0)
	unix.Chmod(filepath.Join(dir, "zero"), 0)
	file("zerof", 0, 0, 0)
}

// testPermissions runs the permission script as uid 1000 (groups
// 1000,2000) and as nobody in a plain directory and through the mount:
// output (successes, errors, owners, modes) must match line by line.
func testPermissions(t *testing.T, m Mounted) {
	ref := filepath.Join(TempDir(t), "ref")
	os.Mkdir(ref, 0o755)
	setupPermTree(t, ref, m.Caps)
	dir := filepath.Join(m.Root, "perm")
	os.Mkdir(dir, 0o755)
	setupPermTree(t, dir, m.Caps)
	script := permScript(m.Caps)
	for _, u := range []struct {
		uid, gid uint32
		groups   []uint32
	}{{1000, 1000, []uint32{1000, 2000}}, {65534, 65534, nil}} {
		want, wc := AsUser(t, u.uid, u.gid, u.groups, ref, script)
		got, gc := AsUser(t, u.uid, u.gid, u.groups, dir, script)
		if wc != gc {
			t.Errorf("uid %d: exit %d in a plain dir, %d on the mount", u.uid, wc, gc)
		}
		diffTranscripts(t, strings.Split(want, "\n"), strings.Split(got, "\n"))
		if u.uid == 1000 {
			must := []string{"created-pub", "1000:1000 644", "write priv rc=2", "read secret rc=1",
				"write grp rc=0", "rm sticky own rc=0", "chown rc=1",
				"sub 1000:1000 755", "sgid-dir 1000:2000 2755", "sgid-file 1000:2000", "suid-after-write 755",
				"chmod 0600 dir rc=0", "chmod 0000 dir rc=0", "chgrp 0000 dir rc=0", "utime 0000 dir rc=0",
				"z 0 2000 86400", "ls own 0000 dir rc=2", "chmod 0000 dir back rc=0", "chmod 0000 file rc=0"}
			if m.Caps.Xattrs {
				must = append(must, "user.k", "listxattr 0000 dir rc=0")
			}
			if m.Caps.HardLinks {
				must = append(must, "rm one link rc=0", "zf2 nlink 1")
			}
			for _, s := range must {
				if !strings.Contains(got, s) {
					t.Errorf("uid 1000 through mount: missing %q in\n%s", s, got)
				}
			}
		}
		// Mode 0 stays 0 and closed to everyone but root.
		for _, s := range []string{"zero 0 root", "ls zero rc=2", "cat zero/inner rc=1", "cat zerof rc=1"} {
			if !strings.Contains(got, s) {
				t.Errorf("uid %d through mount: missing %q in\n%s", u.uid, s, got)
			}
		}
	}
	if m.Caps.InTree && m.Caps.Symlinks {
		// Ownership as recorded by the tree below the mount itself.
		var s syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(m.Tree, "perm", "alice", "lnk"), &s); err != nil || s.Uid != 1000 {
			t.Errorf("tree below the mount: symlink owner = %d, %v; want 1000", s.Uid, err)
		}
	}
}

// ACLBlob encodes a system.posix_acl_access value: owner rw, user uid r,
// group none, mask r, other none.
func ACLBlob(uid uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 6, ^uint32(0)}, {0x02, 4, uid}, {0x04, 0, ^uint32(0)}, {0x10, 4, ^uint32(0)}, {0x20, 0, ^uint32(0)}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// testACL: the kernel evaluates (and caches) POSIX ACLs, so an ACL
// granting one user read access works through the mount as in a plain
// directory, and revoking it through the mount takes effect at once.
func testACL(t *testing.T, m Mounted) {
	ref := TempDir(t)
	for _, p := range []string{filepath.Join(m.Root, "acl-mnt"), filepath.Join(ref, "acl-ref")} {
		if err := os.WriteFile(p, []byte("secret"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(p, "system.posix_acl_access", ACLBlob(4321), 0); err != nil {
			if err == unix.EOPNOTSUPP && strings.HasPrefix(p, ref) {
				t.Skip("the test's file system has no POSIX ACLs")
			}
			t.Fatalf("set ACL on %s: %v", p, err)
		}
		if out, code := AsUser(t, 4321, 4321, nil, "/", "cat "+p); code != 0 || out != "secret" {
			t.Errorf("%s: ACL user cannot read: %d %s", p, code, out)
		}
		if out, code := AsUser(t, 4322, 4322, nil, "/", "cat "+p); code == 0 {
			t.Errorf("%s: other user reads: %s", p, out)
		}
		if err := os.Chmod(p, 0o600); err != nil { // mask := ---
			t.Fatal(err)
		}
		if out, code := AsUser(t, 4321, 4321, nil, "/", "cat "+p); code == 0 {
			t.Errorf("%s: read after chmod 600 masked the ACL: %s", p, out)
		}
	}
	if m.Caps.InTree {
		if _, err := os.Stat(filepath.Join(m.Tree, "acl-mnt")); err != nil {
			t.Fatal(err)
		}
	}
	sz, err := unix.Getxattr(filepath.Join(m.Root, "acl-mnt"), "system.posix_acl_access", nil)
	if err != nil || sz != len(ACLBlob(1)) {
		t.Errorf("ACL through the mount: size %d, %v", sz, err)
	}
}

// Package fusetest is the POSIX suite every Kaon FUSE mount runs: one set
// of scenarios parametrised by the mount under test (a Driver), so cfsd,
// metafs and `kaon mount` are held to the same behaviour, and a scenario
// written for one checks them all.
//
// # Scenarios
//
// Writable mounts run a fixed sequence of system calls once in a plain
// directory of the test's file system and once through the mount, and
// the two transcripts must match line by line (posix): create and
// O_EXCL, pread, truncate, fallocate and hole punching, a sparse file
// with SEEK_DATA/SEEK_HOLE, O_APPEND from two descriptors, renameat2
// NOREPLACE and EXCHANGE, hard links and link counts seen through an open
// descriptor, removed-but-open files and directories, symlinks and
// utimensat on them, mode 0, chmod/chown, user xattrs, flock and OFD
// locks, shared mmap, O_DIRECT, name length limits, a fifo, a tree deeper
// than PATH_MAX, the listing; absolute checks on top, so "wrong in both"
// cannot pass. A shell script of access checks and ownership (private,
// group and sticky directories, setgid inheritance, setuid cleared by a
// write, chown/chgrp/utime rules, others' xattrs, mode 0) runs as uid
// 1000 and as nobody in both places (permissions); a POSIX ACL grants one
// user read access (acl); a directory of 2500 entries is listed warm,
// cold and in small getdents chunks (large-dir). Mounts that present a
// tree (MakeTree's: every kind of entry, odd names, xattrs, a hard link,
// a device) are compared with it entry by entry — every stat field,
// readlink, listing order, xattrs in order, access(2) — (tree), for
// names that are not there (negative-lookups) and, read-only, for EROFS
// on every write path with nothing changed below (read-only).
//
// # Adding a mount
//
// A mount joins with one test in its integration package:
//
//	func TestSuite(t *testing.T) {
//		fusetest.Run(t, fusetest.Driver{
//			Caps: fusetest.Caps{Writable: true, Xattrs: true, NonRoot: true},
//			Mount: func(t *testing.T, sc fusetest.Scenario, tree string) (string, func()) {
//				// start the daemon on a fresh mountpoint (fusetest.TempDir),
//				// fusetest.Track it, wait until it answers
//				return mountpoint, stop
//			},
//		})
//	}
//
// Mount returns once the mount answers (failing t, with the daemon's log,
// if it does not come up), should track it (Track) so that a step that hangs
// aborts its FUSE connection instead of the test binary's deadline, and
// returns an unmount function that stops the daemon and may fail t with
// what its exit tells; a driver may also check its own invariants over a
// scenario there (metafs: a MetadataOnly scenario opens nothing below).
// The writable scenarios work in new subdirectories of the root, as root,
// then as other users through setuid children (AsUser): the mount needs
// allow_other and default_permissions, and its mountpoint's parents must
// be world-traversable (TempDir makes them so).
//
// Caps say what the mount can do. A scenario needing what it cannot do is
// skipped, and named so in the test output; a step needing it is left
// out of both the plain directory's run and the mount's. A mount that
// cannot take a step no field covers yet gets a new Caps field, gating
// the step and its absolute checks — never a changed step, which every
// other mount keeps checking.
//
// `kaon mount` (a caching mount of Kaon's own namespace) serves the
// namespace rather than a local directory: its driver starts an instance
// (kaontest in process, or the binary as integration/harness does),
// mounts a fresh directory of it, ignores the tree argument and leaves
// Presents and InTree off, so it runs the writable scenarios. Anything
// its namespace cannot hold the way a local file system does (devices,
// fifos, hard links, POSIX ACLs, locks shared with other clients) is a
// Caps field, and its own coherence questions (two clients, the change
// feed) are tests of its own package beside this suite.
//
// The tests need root (mounts, chown, setuid children), fuse3 and attr
// (setfattr, getfattr).
package fusetest

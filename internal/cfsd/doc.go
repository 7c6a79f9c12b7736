// Package cfsd is `kaon cfsd`: a pass-through FUSE mount of any POSIX
// tree (a local disk, a CephFS mount) with Kaon's identity, quota and
// recycle bin on top. It stands on internal/fusecore.
//
// Design:
//   - Every directory node keeps an O_PATH fd of its backend directory;
//     all operations use *at() syscalls relative to it (files are
//     addressed as parent fd + name), so no full backend path is ever
//     built and trees deeper than PATH_MAX work. The few calls without an
//     *at() form (chmod of a directory, truncate by name, xattrs) go
//     through the short /proc/self/fd/N/name path, or for a directory
//     its own link /proc/self/fd/N, which needs no search permission on
//     the directory (its owner may chmod a 0000 directory).
//   - The kernel checks permissions (default_permissions) on cached
//     attributes, which carry the backend's mode as is (mode 0 stays 0,
//     fusecore); operations that create, change or open something run
//     with the caller's fsuid/fsgid/groups (fusecore.Enter) so the backend
//     applies its own rules too and new objects get the caller as owner.
//     Root callers run without any switch.
//   - Round trips (the cost of FUSE): the kernel caches entries and
//     attributes for 10s by default (`--entry-timeout`, `--attr-timeout`;
//     changes made through the mount update the caches at once, the
//     timeouts only bound how long a change made directly on the backend
//     stays unseen), negative entries for 1s, listings (FOPEN_CACHE_DIR,
//     revalidated by the directory's mtime) and POSIX ACLs (`--acl`,
//     default on: the kernel evaluates the backend's ACLs and caches
//     them). OPENDIR/RELEASEDIR are skipped (fusecore.Config.NoOpendir),
//     every listing chunk is READDIRPLUS (no LOOKUP per entry of a large
//     directory listed cold), FLUSH answers ENOSYS once. Absent security.capability (asked by
//     the kernel on the first write and every chown of a file) and other
//     absent xattrs are answered from a per-node cache of the name list.
//     On a host without SELinux an absent security.selinux is answered
//     EOPNOTSUPP instead of ENODATA, which ls/coreutils remember per
//     device and stop asking (a label present on the backend is still
//     returned). What remains per untarred file: a negative LOOKUP,
//     CREATE, two GETXATTR security.capability, three SETATTR
//     (times, owner, mode), a GETATTR of the parent (the kernel drops its
//     attributes after every create and default_permissions needs them
//     for the next lookup) and an asynchronous RELEASE; --no-xattr
//     removes the two GETXATTR at the price of all xattrs.
//   - File data uses kernel passthrough when available (the open backend
//     fd is registered with the kernel), otherwise pread/pwrite in the
//     daemon. Locks (flock, fcntl) are left to the kernel.
//   - The daemon never resolves a path into its own mount, and so never
//     holds a descriptor there: killed while holding one, the exiting
//     process would close it and wait forever for its own FLUSH answer.
//     The backend, the state directory and everything else it opens by
//     path are opened before mounting; state files are written relative
//     to the state directory's descriptor (the backend may even be
//     mounted over itself).
//
// Hidden names in the mount root: ".proc" (control tree) and the state
// directory (default "<backend>/.kaon-cfsd", which holds quota.json,
// recycle.enabled, recycle.log and the recycle/ area).
//
// Control tree MOUNT/.proc (read: cat; write: echo "cmd" > file, one
// command per line):
//
//	whoami      the caller as Kaon sees it: "auth=unix uid=U(name) gid=G groups=.. pid=P"
//	stats.json  per-op count, errors, rate_1s/10s/60s, mean/p50/p90/p99/p999 latency (µs),
//	            bytes_in/bytes_out through the daemon, "passthrough": true|false,
//	            "data_path": "daemon"|"passthrough" ("starting" until the mount is recorded)
//	quota       table "uid user bytes bytes_limit inodes inodes_lim" (root sees all users,
//	            others their own line); root writes "set <uid|user> bytes=10G inodes=100000"
//	            (0 = unlimited; K/M/G/T suffixes are powers of 1024)
//	recycle     "# recycle enabled|disabled" then one line per entry:
//	            "<id> <RFC3339 time> <uid> <file|dir|symlink|other> <size> <original path>";
//	            commands: "enable", "disable" (root), "restore <id>",
//	            "restore-tree <path>" (every entry at or below path, newest first),
//	            "purge <age>" with age like 3600s, 12h, 7d or "all".
//	            Non-root callers see, restore and purge only their own entries.
//
// The virtual xattr "cfs.id" on any path returns the whoami string. The
// daemon (a fusecore.Daemon) prints the same counters as one line to its
// log on SIGUSR1 and at exit; SIGTERM, SIGINT and SIGHUP unmount.
//
// Quota (with --quota): usage is the logical size of regular files plus
// one inode per object, charged to the object's owner, kept in
// quota.json (flushed every second and at unmount) and recomputed by a
// scan of the backend at start. A create, write, truncate or fallocate
// that would exceed the owner's limit fails with EDQUOT; files of an
// owner with a byte limit are opened without passthrough so every write
// is checked. Objects in the recycle bin are not charged.
//
// Recycle bin: when enabled, unlink and rmdir rename the object into the
// bin (constant time, no copy) and journal its original path, owner and
// time. `rm -r` deletes bottom-up, so a tree becomes one entry per object;
// "restore-tree <path>" brings the whole tree back. Restore recreates
// missing parent directories and refuses to overwrite an existing name.
// The bin must not change what applications see, so only an object's
// last name goes there: removing one name of a file that has others is
// a plain unlink (the data stays reachable under the other names, and
// their link count and ctime change as on the backend); the bin gets the
// file when its last name is removed, and restore brings it back under
// that name. Keeping every name in the bin instead would leave the link
// in the bin counted in st_nlink of the remaining names (or require
// subtracting bin links on every stat). A file or directory still open
// after its last name went to the bin reports nlink 0, as it would after
// a real unlink, although the bin's link keeps it on the backend.
// Removals with the bin on are serialized, so two names of one file
// removed at once cannot both be unlinked for good.
package cfsd

// Package fusecore is the FUSE core every Kaon mount stands on: cfsd (a
// go-fuse node tree over a POSIX backend), metafs (a raw FUSE file
// system answering from an index, and a kernel mode without FUSE) and
// the caching mount of Kaon's own namespace (internal/mount, `kaon
// mount`). A mount brings its file system; fusecore mounts it, runs the
// daemon's life, and counts what it does, the same way for all.
//
// # Two kinds of file system, one mount
//
// New mounts a go-fuse node tree (fs.InodeEmbedder): go-fuse keeps an
// Inode per kernel inode and the file system implements one small
// interface per operation. NewRaw mounts a fuse.RawFileSystem: the file
// system speaks the protocol itself and makes its own node IDs (metafs
// computes them from index positions, so serving a tree costs no Go
// object per entry); it receives the *fuse.Server in Init, before the
// first request, for cache invalidation and backing files. Both take one
// Config and get Kaon's defaults: max_write 1 MiB, 64 background
// requests, direct mount(2) as root, default_permissions on the modes
// exactly as reported (go-fuse's NullPermissions: mode 0 stays 0),
// kernel-local flock/fcntl locks (Config.Locks hands them to the file
// system), cached symlinks, and for a node tree
// kernel entry/attr/negative caching of 1s and READDIRPLUS for every
// listing chunk (Config.ReaddirPlusAuto lets the kernel choose). A raw
// file system sets its cache lifetimes in every reply.
//
// The mountpoint is checked first: statfs failing with ENOTCONN is a dead
// mount left by a crashed daemon, reported (ErrStale) or, with
// Config.CleanStale, detached lazily and mounted over; a live mount of
// the same kind (FUSE subtype) is refused, never stacked on. Mounting does not
// wait on go-fuse's poll hack, which opens a file on the new mount from
// the daemon: a daemon must never hold a descriptor on its own mount
// (killed while holding one, its exit would wait forever for a FLUSH only
// it could answer). So a process that serves a mount must not os.Open its
// files either (tests: read them with plain system calls), since adding a
// FUSE file to the runtime's epoll asks the daemon for POLL while holding
// a scheduler slot.
//
// # The daemon's life
//
// Daemon.Run is the life of every mount daemon: check the mountpoint, go
// to the background unless Foreground (the command re-executes itself in
// a new session; the parent returns once the child reports the mount up,
// or with the child's error), catch SIGTERM, SIGINT, SIGHUP and SIGUSR1
// before mounting (a signal during set-up still ends in a clean unmount),
// call the mount function, and serve its result until it is gone.
// SIGTERM/SIGINT unmount, lazily if busy, so no stale mount is left;
// SIGHUP runs Daemon.Reload (metafs: switch to a rebuilt index) or, with
// none, unmounts; SIGUSR1 prints the mount's Summary, as does the exit.
// What Run serves is a Served (Wait, Unmount, Summary): a *Mount, a type
// embedding one (metafs.Mounted closes its lower files after Wait), or a
// mount without FUSE (metafs' kernel mode). Unmount and LazyUnmount serve
// `umount` commands; IsStale tells a dead mount.
//
// # Statistics
//
// Stats holds per-operation OpStats (count, errors, rates over the last
// complete 1/10/60 s, mean and p50/p90/p99/p999 latency from a lock-free
// log histogram), bytes in/out, and named counters for events that are no
// operation (negative lookups, refusals, reloads). A file system keeps the
// *OpStats from Stats.Op and writes `defer op.Done(time.Now(), &errno)`
// (node tree), `defer op.DoneStatus(time.Now(), &status)` (raw) or
// `defer op.DoneErr(time.Now(), &err)` (anything else) with a named
// result. Stats.JSON renders a control file (cfsd's .proc/stats.json),
// Stats.Summary the log line a daemon prints; Config.Stats makes it the
// mount's Summary.
//
// # Passthrough, credentials, control files
//
//   - Config.Passthrough requests kernel FUSE passthrough (Linux >= 6.9,
//     needs root); (*Mount).PassthroughActive reports whether the kernel
//     negotiated it and accepted a probe backing fd. A node's file handle
//     opts in by implementing fs.FilePassthroughFder; a raw file system
//     registers backing fds with the server itself.
//   - Enter(caller) switches the current OS thread (locked) to the
//     caller's fsuid, fsgid and supplementary groups (from
//     /proc/PID/status, cached 1s) so a backend enforces its own access
//     rules and new objects get the right owner; Leave restores root.
//     Root callers cost nothing.
//   - NewProcDir builds a persistent virtual directory of ProcFiles
//     (Render: content per caller at open, served DIRECT_IO; Exec: one
//     write(2) = one command, errors map through kerr) in a node tree.
//     Return it from the root's Lookup without listing it to keep it
//     hidden.
//
// # Round trips
//
// Config.NoOpendir answers the first OPENDIR with ENOSYS so the kernel
// never sends OPENDIR/RELEASEDIR again (two round trips per directory
// listed); READDIR(PLUS) then arrive without a handle and are served by a
// short-lived handle of the file system seeked to the request offset.
// Config.ACL (FUSE_POSIX_ACL) lets the kernel enforce POSIX ACLs and cache
// them per inode, so `ls -l` asks the daemon once per inode and entry
// timeout instead of on every listing. Config.ServerKillsPriv
// (FUSE_HANDLE_KILLPRIV_V2) is for file systems whose backend clears
// setuid/setgid itself because it acts as the caller; it saves a GETATTR
// before every chown. FUSE over io_uring was prototyped and measured
// (DESIGN-NOTES.md; the go-fuse change is docs/patches/go-fuse-io-uring.patch)
// and does not pay here: requests arrive over /dev/fuse.
package fusecore

// Package fusecore is the FUSE plumbing shared by Kaon's mounts (cfsd,
// metafs and the namespace mount). It is deliberately small; a mount
// implements its own go-fuse fs.InodeEmbedder tree and takes from here:
//
//   - Mount lifecycle: New(root, Config) mounts with Kaon's defaults
//     (kernel entry/attr/negative caching of 1s, readdirplus for every
//     listing chunk (Config.ReaddirPlusAuto to let the kernel choose), max_write
//     1 MiB, direct mount as root, default_permissions on the modes
//     exactly as reported (go-fuse's NullPermissions: mode 0 stays 0),
//     kernel-local flock/fcntl locks), after checking the mountpoint (CheckMountpoint:
//     statfs failing with ENOTCONN = a crashed daemon left a stale mount;
//     reported, or lazily unmounted with Config.CleanStale). SIGTERM,
//     SIGINT and SIGHUP are caught from before the mount exists;
//     (*Mount).Serve blocks until unmount and turns them into a clean
//     unmount. Unmount/LazyUnmount/IsStale serve `umount` commands.
//     Daemonize/NotifyReady run a mount in the background: the parent
//     re-executes itself and exits only once the child reports the mount
//     is up (or why it failed).
//   - Passthrough: Config.Passthrough requests kernel FUSE passthrough
//     (Linux >= 6.9, needs root); (*Mount).PassthroughActive reports
//     whether the kernel negotiated it and accepted a probe backing fd.
//     A file handle opts in by implementing fs.FilePassthroughFder.
//   - Statistics: Stats holds per-operation OpStats (count, errors, rates
//     over the last complete 1/10/60 s, mean and p50/p90/p99/p999
//     latency from a lock-free log histogram) and bytes in/out. Keep the
//     *OpStats from Stats.Op and write `defer op.Done(time.Now(), &errno)`
//     with a named errno result. Stats.JSON renders stats.json.
//   - Credentials: Enter(caller) switches the current OS thread (locked)
//     to the caller's fsuid, fsgid and supplementary groups (from
//     /proc/PID/status, cached 1s) so a backend enforces its own access
//     rules and new objects get the right owner; Leave restores root.
//     Root callers cost nothing.
//   - Control tree: NewProcDir builds a persistent virtual directory of
//     ProcFiles (Render: content per caller at open, served DIRECT_IO;
//     Exec: one write(2) = one command, errors map through kerr). Return
//     it from the root's Lookup without listing it to keep it hidden.
//
// Config.NoOpendir answers the first OPENDIR with ENOSYS so the kernel
// never sends OPENDIR/RELEASEDIR again (two round trips per directory
// listed); READDIR(PLUS) then arrive without a handle and are served by
// a short-lived handle of the file system seeked to the request offset.
// Config.ACL (FUSE_POSIX_ACL) lets the kernel enforce POSIX ACLs and
// cache them per inode, so `ls -l` asks the daemon once per inode and
// entry timeout instead of on every listing.
//
// Config.ServerKillsPriv (FUSE_HANDLE_KILLPRIV_V2) is for file systems
// whose backend clears setuid/setgid itself because it acts as the
// caller; it saves a GETATTR before every chown.
package fusecore

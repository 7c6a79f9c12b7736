// Package fusecore is the FUSE plumbing shared by Kaon's mounts (cfsd,
// metafs and the namespace mount). It is deliberately small; a mount
// implements its own go-fuse fs.InodeEmbedder tree and takes from here:
//
//   - Mount lifecycle: New(root, Config) mounts with Kaon's defaults
//     (kernel entry/attr caching, readdirplus, max_write 1 MiB, direct mount
//     as root, default_permissions), detecting a stale mountpoint first
//     (CheckMountpoint: ENOTCONN on stat = a crashed daemon; with
//     Config.CleanStale it is lazily unmounted). (*Mount).Serve blocks until
//     the filesystem is unmounted and turns SIGTERM/SIGINT into a clean
//     unmount. Daemonize/NotifyReady run the mount in the background: the
//     parent re-executes itself and exits only once the child has mounted.
//   - Passthrough: Config.Passthrough requests kernel FUSE passthrough
//     (Linux >= 6.9); (*Mount).PassthroughActive reports whether the kernel
//     negotiated it and accepted a probe backing fd. A file handle opts in
//     by implementing fs.FilePassthroughFder.
//   - Statistics: Stats counts operations (totals, errors, rates over the
//     last 1/10/60 s, latency percentiles) and bytes in/out. Use
//     `defer st.Op("lookup").Done(time.Now(), &errno)` style or Begin/End;
//     Stats.JSON renders the stats.json document.
//   - Credentials: Enter(caller) switches the current (locked) OS thread to
//     the caller's fsuid, fsgid and supplementary groups so the backend
//     enforces its own access rules and new files get the right owner;
//     the returned Cred must be Left on the same goroutine.
//   - Control tree: NewProcDir builds a virtual directory (".proc") of
//     ProcFiles whose content is rendered per caller at open and whose
//     writes are commands.
package fusecore

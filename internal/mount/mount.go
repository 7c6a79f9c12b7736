package mount

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/kaon-storage/kaon/internal/auth/gateway"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/fusecore"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Options configure a mount of the namespace.
type Options struct {
	URL      string // the namespace server (http(s)://host:port)
	Subtree  string // the namespace directory mounted (default /)
	CacheDir string // where journals of files open for writing live
	Host     string // this client's name in `kaon fusex ls` (default: the host name)
	Version  string // the client's version (fusex ls)
	Token    string // the daemon's own bearer token for its session ("": its unix identity)
	// XRootD is the namespace's root:// host:port (kaon.url.root);
	// "": the one `ns status` lists for the server at URL.
	XRootD string
	// Servers are the other namespace servers of a replicated instance:
	// requests go to them, in order, when the one they go to cannot be
	// reached, and the session reconnects through them.
	Servers []string
	// Gateway is the key of a host the namespace servers trust as a
	// gateway: callers' uids and gids are asserted with it instead of
	// their tokens being looked for (nil: not a gateway).
	Gateway *gateway.Key
	// Timeout bounds how long a request waits for a server's answer
	// (then EIO-like errors), so a hung server never holds a caller in
	// the kernel for good (default 60 s).
	Timeout time.Duration
	// NoCacheTimeout is the kernel cache lifetime where no lease covers
	// an entry (its directory could not be subscribed).
	NoCacheTimeout time.Duration
	// Grace is how long fsync and close keep replaying a file's journal
	// while the servers cannot be reached (a restart) before they fail
	// (default 2 min).
	Grace time.Duration
	// Writeback: the kernel's write-back cache is on (fusecore's
	// Config.Writeback), so the kernel keeps its own size and mtime of
	// a file and remote changes are told to it differently (see
	// contentChanged).
	Writeback bool
	// Direct reads a file's stripe straight from its backend where this
	// host reaches it (direct.go); false: always through the storage
	// servers.
	Direct bool
}

// FS is a mounted namespace: the node tree fusecore mounts, its session
// with the namespace service and the daemon's cache.
type FS struct {
	opts Options
	sess *client.Session // with the daemon's own identity
	own  *client.Client  // the daemon's own identity
	ids  *identities
	// squash is who root is to the servers when they squash it (a
	// gateway mount whose key they trust without no_root_squash).
	squash *nsapi.Whoami
	Stats  *fusecore.Stats
	root   *node

	mu    sync.Mutex
	nodes map[uint64]*node // by inode number, the nodes the kernel knows
	subs  map[uint64]bool  // directories subscribed (renewed while known)
	open  int              // open handles (heartbeats report them)
	xrdEP string           // the namespace server's root:// host:port, once known
	// passthrough: the kernel took FUSE passthrough (SetPassthrough).
	passthrough atomic.Bool
	// noRewrite: the namespace server does not rewrite files
	// (client.Rewrite); flushes send updates only.
	noRewrite atomic.Bool

	locals locals // the filesystems reachable from this host (direct.go)

	notify chan func() // kernel notifications, sent by notifier
	stop   chan struct{}
	wg     sync.WaitGroup
}

// New opens a session with the namespace service at o.URL, checks the
// subtree and returns the file system to mount.
func New(ctx context.Context, o Options) (*FS, error) {
	if o.Subtree == "" {
		o.Subtree = "/"
	}
	sub, err := nsapi.CleanPath(o.Subtree)
	if err != nil {
		return nil, err
	}
	o.Subtree = sub
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if o.Grace <= 0 {
		o.Grace = 2 * time.Minute
	}
	if o.NoCacheTimeout == 0 {
		o.NoCacheTimeout = time.Second
	}
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	if err := os.MkdirAll(o.CacheDir, 0o700); err != nil {
		return nil, kerr.Wrap(kerr.IO, "mount", o.CacheDir, err)
	}
	own := client.New(o.URL)
	own.Servers = o.Servers
	own.Token = o.Token
	if o.Gateway != nil {
		// The daemon asserts itself (root is squashed to nobody unless
		// the servers trust the key with no_root_squash).
		groups, _ := os.Getgroups()
		gs := make([]uint32, len(groups))
		for i, g := range groups {
			gs[i] = uint32(g)
		}
		own.Token = ""
		own.Assert = asserting(o.Gateway, uint32(os.Getuid()), uint32(os.Getgid()), gs)
	}
	e, err := own.Stat(ctx, sub)
	if err != nil {
		return nil, err
	}
	if !e.IsDir {
		return nil, kerr.New(kerr.NotDir, "mount", sub, "the subtree to mount is not a directory")
	}
	f := &FS{opts: o, own: own, xrdEP: o.XRootD, ids: newIdentities(o), Stats: fusecore.NewStats(),
		nodes: map[uint64]*node{}, subs: map[uint64]bool{}, notify: make(chan func(), 4096), stop: make(chan struct{})}
	if o.Gateway != nil {
		// The servers must take the assertions: one that ignored them
		// would take every caller for its socket's owner or nobody.
		w, err := own.Whoami(ctx)
		if err != nil {
			return nil, err
		}
		if w.Method != "gateway" {
			return nil, kerr.New(kerr.Permission, "mount", o.URL, fmt.Sprintf("the namespace server does not take gateway assertions (it took this host's for %s by %s; start it with --auth ...,gateway --gateway-key FILE)", w.Name, w.Method))
		}
		if os.Getuid() == 0 && w.UID != 0 {
			f.squash = &w
		}
	}
	f.sess, err = own.OpenSession(ctx, client.SessionOptions{Host: o.Host, Version: o.Version, Servers: o.Servers})
	if err != nil {
		return nil, err
	}
	f.root = &node{fsys: f}
	f.root.setAttr(e.Attr, time.Time{})
	f.nodes[e.ID] = f.root
	f.wg.Add(3)
	go f.invalidations()
	go f.notifier()
	go f.renewer()
	return f, nil
}

// Root is the node tree's root.
func (f *FS) Root() fs.InodeEmbedder { return f.root }

// Close ends the session (its leases and locks are released).
func (f *FS) Close() error {
	close(f.stop)
	err := f.sess.Close() // ends invalidations()
	f.wg.Wait()
	return err
}

// SessionID is the session's id, as `kaon fusex ls` shows it.
func (f *FS) SessionID() string { return f.sess.ID() }

// nsPath is the namespace path of a path relative to the mount's root.
func (f *FS) nsPath(rel string) string {
	if rel == "" {
		return f.opts.Subtree
	}
	return path.Join(f.opts.Subtree, rel)
}

// subscribe takes a lease on directory p and returns until when it
// holds (zero: none, caching falls back to NoCacheTimeout) and, when
// listed, its entries as read after the lease was granted.
func (f *FS) subscribe(ctx context.Context, p string) (time.Time, []nsapi.Entry, bool) {
	ls, err := f.sess.SubscribeList(ctx, p)
	if err != nil || len(ls) != 1 || ls[0].Error != "" {
		return time.Time{}, nil, false
	}
	f.mu.Lock()
	f.subs[ls[0].Ino] = true
	f.mu.Unlock()
	return ls[0].Expires, ls[0].Entries, ls[0].Listed
}

// register records n (as the kernel knows it) under its inode number.
func (f *FS) register(n *node) {
	f.mu.Lock()
	f.nodes[n.ino()] = n
	f.mu.Unlock()
}

// rebind records that n, inode number from, is now inode number to in
// the namespace (rewritten: the kernel keeps knowing it as from). A node
// the kernel already looked up as to meanwhile (the rewrite's event
// came first) stays the one the namespace's events of to reach.
func (f *FS) rebind(n *node, from, to uint64) {
	n.mu.Lock()
	n.attr.ID = to
	n.mu.Unlock()
	f.mu.Lock()
	if f.nodes[from] == n {
		delete(f.nodes, from)
	}
	if f.nodes[to] == nil {
		f.nodes[to] = n
	}
	f.mu.Unlock()
}

func (f *FS) lookupNode(ino uint64) *node {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[ino]
}

// forget drops n once the kernel forgot it.
func (f *FS) forget(n *node) {
	ino := n.ino()
	f.mu.Lock()
	if f.nodes[ino] == n {
		delete(f.nodes, ino)
	}
	sub := f.subs[ino]
	delete(f.subs, ino)
	f.mu.Unlock()
	if sub {
		go f.sess.Unsubscribe(context.Background(), ino)
	}
}

// renewer renews the leases of the directories the kernel still knows,
// at half their lifetime.
func (f *FS) renewer() {
	defer f.wg.Done()
	for {
		f.mu.Lock()
		var inos []uint64
		for ino := range f.subs {
			inos = append(inos, ino)
		}
		f.mu.Unlock()
		wait := 30 * time.Second
		if len(inos) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			ls, err := f.sess.Renew(ctx, inos...)
			cancel()
			for _, l := range ls {
				if n := f.lookupNode(l.Ino); n != nil && l.Error == "" {
					n.renewed(l.Expires)
					wait = min(wait, time.Until(l.Expires)/2)
				} else if l.Error != "" {
					f.mu.Lock()
					delete(f.subs, l.Ino)
					f.mu.Unlock()
				}
			}
			if err != nil {
				wait = time.Second
			}
		}
		select {
		case <-time.After(max(wait, time.Second)):
		case <-f.stop:
			return
		}
	}
}

// invalidations applies what the session is told to the daemon's cache
// and queues the kernel's invalidations for notifier: this goroutine
// never waits on the kernel, so a FUSE request the kernel holds a lock
// for is never waited on while its answer depends on us.
func (f *FS) invalidations() {
	defer f.wg.Done()
	for inv := range f.sess.Invalidations() {
		if inv.Full {
			f.dropAll()
			continue
		}
		f.apply(inv.Invalidation)
	}
}

// dropAll forgets everything cached: leases, attributes, listings; the
// kernel is told to drop every inode's attributes and pages.
func (f *FS) dropAll() {
	f.mu.Lock()
	nodes := make([]*node, 0, len(f.nodes))
	for _, n := range f.nodes {
		nodes = append(nodes, n)
	}
	clear(f.subs)
	f.mu.Unlock()
	for _, n := range nodes {
		n.invalidate(true)
		f.queue(func() { n.NotifyContent(0, 0) })
		if n.IsDir() {
			// The kernel's names too: a name may now be another file.
			for name := range n.Children() {
				f.queue(func() { n.NotifyEntry(name) })
			}
		}
	}
	f.Stats.Counter("full_invalidations").Add(1)
}

func (f *FS) apply(ev nsapi.Invalidation) {
	f.Stats.Counter("invalidations").Add(1)
	// The daemon's listings first, whatever the kernel is told below:
	// every name an event concerns is unsure in its directory's listing
	// from now on (its entry, its attributes, its size).
	for _, de := range [2]struct {
		dir  uint64
		name string
	}{{ev.Parent, ev.Name}, {ev.From, ev.FromName}} {
		if d := f.lookupNode(de.dir); d != nil && de.name != "" {
			d.nameChanged(de.name)
		}
	}
	entry := func(dir uint64, name string) {
		if d := f.lookupNode(dir); d != nil && name != "" {
			f.queue(func() { d.NotifyEntry(name) })
		}
	}
	switch ev.Kind {
	case nsapi.EventCommitted, nsapi.EventMkdir:
		if n := f.lookupNode(ev.Ino); n != nil && !n.IsDir() && n.knownAs(ev.Parent, ev.Name) {
			// A new file this mount already looked up under this name (the
			// event came late): what the kernel holds of it was read since.
			// Its name is not invalidated: FUSE keeps no unused inode, so a
			// closed file's inode would go, its pages with it (the late
			// event of a file read meanwhile emptied the page cache,
			// TestPageCacheKept); its attributes are.
			n.invalidate(false)
			f.queue(func() { n.NotifyContent(-1, 0) })
			break
		}
		entry(ev.Parent, ev.Name)
		if n := f.lookupNode(ev.Ino); n != nil {
			n.invalidate(true)
			if n.IsDir() {
				f.queue(func() { n.NotifyContent(0, 0) })
			} else {
				since := n.emptiedCount()
				f.queue(func() { f.contentChanged(n, ev.Size, ev.DataVersion, since) })
			}
		}
	case nsapi.EventRemoved:
		entry(ev.Parent, ev.Name)
		if n := f.lookupNode(ev.Ino); n != nil {
			n.invalidate(false)
			f.queue(func() { n.NotifyContent(-1, 0) })
		}
	case nsapi.EventRenamed:
		entry(ev.From, ev.FromName)
		entry(ev.Parent, ev.Name)
	case nsapi.EventAttr:
		if n := f.lookupNode(ev.Ino); n != nil {
			n.invalidate(false)
			f.queue(func() { n.NotifyContent(-1, 0) })
		}
	case nsapi.EventModified:
		if n := f.lookupNode(ev.Ino); n != nil && !n.hold(ev) {
			if pages := n.modified(ev); pages {
				since := n.emptiedCount()
				f.queue(func() { f.contentChanged(n, ev.Size, ev.DataVersion, since) })
			} else {
				f.queue(func() { n.NotifyContent(-1, 0) })
			}
		}
	}
}

// contentChanged tells the kernel that file n changed elsewhere (to data
// version ver) and is size bytes long now; since is n's emptiedCount
// when the change was applied to the daemon's cache. Its pages go first:
// the kernel writes the dirty ones back to us (FUSE WRITE into n's
// journal, served while this waits) before it drops them, mapped ones
// included, so what this mount wrote is never lost, and is replayed over
// the remote change at the next flush. An open that emptied the page
// cache meanwhile, at ver or later, did it already: its pages, read
// since, are current and stay.
//
// Without write-back the kernel then takes size and mtime from the next
// GETATTR. With write-back it never does for a file it knows (it trusts
// its own: libfuse issue 864), so:
//   - a file not open here is made to be forgotten (its name
//     invalidated, its inode pruned): the next lookup builds a new inode
//     from the namespace's attributes;
//   - a file open here that grew gets its new last bytes stored in its
//     page cache (FUSE_NOTIFY_STORE), which is how the kernel learns a
//     larger size; one that shrank keeps the kernel's larger size until
//     its last close here (reads past the end get zeros), then is
//     forgotten as above. The kernel has no notification that lowers a
//     size (see docs/DESIGN.md).
func (f *FS) contentChanged(n *node, size int64, ver, since uint64) {
	n.mu.Lock()
	reread := n.emptied != since && n.emptiedVer >= ver
	n.mu.Unlock()
	if !reread {
		n.NotifyContent(0, 0)
	}
	n.mu.Lock()
	jr, open, told := n.jr, n.opens > 0, n.told
	n.mu.Unlock()
	if jr != nil {
		told = max(told, jr.Size())
		jr.rebase(size)
	}
	if !f.opts.Writeback {
		return
	}
	if !open {
		f.retire(n)
		return
	}
	if size < told {
		n.mu.Lock()
		n.stale = true
		n.mu.Unlock()
	}
	if size > 0 {
		f.storeTail(n, size)
	}
}

// retire makes the kernel forget file n, whose size and mtime it would
// keep: its names are invalidated, then the inode pruned (nothing holds
// it once no file is open), so the next lookup makes a new one.
func (f *FS) retire(n *node) {
	n.mu.Lock()
	n.stale = false
	n.mu.Unlock()
	if name, p := n.Parent(); p != nil {
		p.NotifyEntry(name)
	}
	if eno := n.NotifyPrune([]*fs.Inode{&n.Inode}); eno != 0 {
		f.Stats.Counter("prune_failed").Add(1)
	}
	f.Stats.Counter("retired").Add(1)
}

// storeTail stores the last bytes of file n (from the start of the page
// holding its last byte, so the page is whole) in the kernel's page
// cache: the kernel's size of n grows to size. They are read as n's
// readers see them: this mount's journal over the remote file.
func (f *FS) storeTail(n *node, size int64) {
	ctx, cancel := context.WithTimeout(context.Background(), f.opts.Timeout)
	defer cancel()
	from := (size - 1) &^ (pageSize - 1)
	buf := make([]byte, size-from)
	var rd *client.Reader
	remote := func(ctx context.Context, p []byte, off int64) (int, error) {
		if rd == nil {
			r, err := f.own.OpenReader(ctx, n.path())
			if err != nil {
				return 0, err
			}
			rd = r
		}
		return rd.ReadAt(ctx, p, off)
	}
	n.mu.Lock()
	jr := n.jr
	n.mu.Unlock()
	var m int
	var err error
	if jr != nil {
		m, err = jr.ReadAt(ctx, buf, from, remote)
	} else {
		m, err = remote(ctx, buf, from)
	}
	if err == io.EOF && m == len(buf) {
		err = nil
	}
	if err == nil && m == len(buf) {
		if eno := n.WriteCache(from, buf); eno == 0 {
			return
		} else {
			err = eno
		}
	}
	// The kernel keeps its old size until the last close here.
	log.Printf("kaon mount: %s changed elsewhere: telling the kernel its size %d: %v (read %d of %d)", n.path(), size, err, m, len(buf))
	f.Stats.Counter("store_failed").Add(1)
	n.mu.Lock()
	n.stale = true
	n.mu.Unlock()
}

const pageSize = 4096

// queue hands a kernel notification to notifier; when the queue is full
// it is dropped with a count (the kernel's caches then expire by time).
func (f *FS) queue(fn func()) {
	select {
	case f.notify <- fn:
	default:
		f.Stats.Counter("notify_dropped").Add(1)
	}
}

// notifier sends the kernel its invalidations, one at a time, holding
// no lock of the daemon's.
func (f *FS) notifier() {
	defer f.wg.Done()
	for {
		select {
		case fn := <-f.notify:
			fn()
		case <-f.stop:
			return
		}
	}
}

// Summary is the mount's account (SIGUSR1, exit).
func (f *FS) Summary() string {
	return fmt.Sprintf("session %s\n%s", f.SessionID(), strings.TrimSpace(f.Stats.Summary()))
}

// xrootd is the root:// host:port of the namespace server the mount
// talks to (kaon.url.root), asked once with the daemon's identity (ns
// status lists each server's endpoints, to the admin: root on the node
// is): "" if it serves none.
func (f *FS) xrootd(ctx context.Context) (string, error) {
	f.mu.Lock()
	ep := f.xrdEP
	f.mu.Unlock()
	if ep != "" {
		return ep, nil
	}
	st, err := f.own.NSStatus(ctx)
	if err != nil {
		return "", err
	}
	for _, want := range []string{strings.TrimSuffix(f.opts.URL, "/"), st.Self, st.Active} {
		for _, sv := range st.Servers {
			if sv.HTTP == want && sv.XRootD != "" && ep == "" {
				ep = sv.XRootD
			}
		}
	}
	f.mu.Lock()
	f.xrdEP = ep
	f.mu.Unlock()
	return ep, nil
}

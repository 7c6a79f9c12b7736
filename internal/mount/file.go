package mount

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/fusecore"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// handle is one open file: it reads through the client of the caller
// that opened it (the namespace authorized that open), and writes into
// its node's journal.
type handle struct {
	n     *node
	c     *client.Client
	write bool

	mu sync.Mutex
	rd *client.Reader // opened at the first read that needs the remote file
	// local is the stripe read from this host's backend (the direct
	// path, direct.go), nil when reads go to the storage server; pt: its
	// descriptor was handed to the kernel (passthrough). localGen is the
	// node's content generation when local was found current: at any
	// other, local is looked at again before it is read (current).
	local    backend.Reader
	pt       bool
	localSt  *posix.Store
	localFid uint64
	localGen uint64
	// Read-ahead: what the last remote read fetched beyond what was
	// asked, and how much the next one fetches (doubling while reads are
	// sequential, up to maxReadAhead).
	ra     []byte
	raOff  int64
	raGen  uint64 // the node's content generation ra was read at
	raNext int
	// owners are the lock owners that set locks through this handle:
	// the kernel expects the file system to release them when the file
	// is closed (POSIX locks at each close, flock at the last).
	owners map[lockOwner]bool
}

type lockOwner struct {
	owner uint64
	flock bool
}

const (
	minReadAhead = 1 << 20
	maxReadAhead = 16 << 20
)

var (
	_ = (fs.FileReader)((*handle)(nil))
	_ = (fs.FileWriter)((*handle)(nil))
	_ = (fs.FileFlusher)((*handle)(nil))
	_ = (fs.FileFsyncer)((*handle)(nil))
	_ = (fs.FileReleaser)((*handle)(nil))
	_ = (fs.FileAllocater)((*handle)(nil))
)

// open makes a handle; writers share the node's journal. The kernel
// keeps the file's pages across opens while its content is unchanged
// (same inode, data version, size and mtime). A read-only open takes the
// direct path where it can (direct.go).
func (n *node) open(ctx context.Context, flags uint32, c *client.Client) (fs.FileHandle, uint32, syscall.Errno) {
	h := &handle{n: n, c: c, write: flags&syscall.O_ACCMODE != syscall.O_RDONLY}
	var g *grant
	if !h.write && n.fsys.opts.Direct && flags&syscall.O_DIRECT == 0 {
		n.mu.Lock()
		plain := !n.attr.IsDir && n.jr == nil // this mount's unflushed writes are read from the journal
		gen := n.gen
		n.mu.Unlock()
		if plain {
			var err error
			if g, err = n.fsys.openDirect(ctx, c, n.path()); err != nil {
				return nil, 0, errno(err)
			}
			h.rd, h.local, h.localSt, h.localFid = g.rd, g.local, g.st, g.fid
			// A change told from here on (granted's own included) has
			// the stripe looked at again before the daemon reads it.
			h.localGen = gen
			n.granted(g)
		}
	}
	var fl uint32
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.attr.IsDir {
		return nil, 0, syscall.EISDIR
	}
	if h.write {
		if n.jr == nil {
			jr, err := newJournal(n.fsys.opts.CacheDir, n.attr.Size)
			if err != nil {
				return nil, 0, syscall.EIO
			}
			jr.streamable = n.streamable()
			jr.count = func(name string) { n.fsys.Stats.Counter(name).Add(1) }
			n.jr = jr
		}
		n.writers++
	}
	// The kernel keeps an inode's opens all passthrough or all not; one
	// that is not while others are reads without its page cache.
	var fh fs.FileHandle = h
	if fd, ok := g.passthrough(); ok && n.fsys.passthrough.Load() && n.jr == nil && n.opens == n.ptOpens && (n.ptOpens == 0 || n.ptKey == g.key) {
		h.pt = true
		n.ptOpens++
		n.ptKey = g.key
		fh = ptHandle{h, fd}
	} else if n.ptOpens > 0 {
		fl |= fuse.FOPEN_DIRECT_IO
	}
	n.dataPath(g, h.pt)
	n.opens++
	key := contentKey(n.attr)
	if n.pageKey == key && n.jr == nil {
		fl |= fuse.FOPEN_KEEP_CACHE
	} else { // the kernel empties the file's page cache at this open
		n.emptied++
		n.emptiedVer = n.attr.DataVersion
	}
	n.pageKey, n.pageVer = key, n.attr.DataVersion
	if flags&syscall.O_DIRECT != 0 {
		fl |= fuse.FOPEN_DIRECT_IO
	}
	n.fsys.sess.SetOpenFiles(n.fsys.openFiles(1))
	return fh, fl, 0
}

// granted applies what the namespace granted an open (the file's size
// and data version now) to n: a change made elsewhere that no
// invalidation told yet is seen by this open (close-to-open), the
// kernel's attributes of n dropped before the open returns so its next
// read past the size it knew asks again.
func (n *node) granted(g *grant) {
	n.mu.Lock()
	changed := n.attr.Size != g.size || n.attr.DataVersion != g.ver
	if changed {
		n.attr.Size, n.attr.DataVersion = g.size, g.ver
		n.valid = time.Time{}
		n.gen++
	}
	n.mu.Unlock()
	if changed {
		n.NotifyContent(-1, 0) // attributes only: no page lock taken
		n.fsys.Stats.Counter("direct_refreshed").Add(1)
	}
}

// ptHandle is a handle whose stripe the kernel reads itself (FUSE
// passthrough): go-fuse registers fd as the open's backing file.
type ptHandle struct {
	*handle
	fd int
}

var _ = (fs.FilePassthroughFder)(ptHandle{})

func (p ptHandle) PassthroughFd() (int, bool) { return p.fd, true }

// asHandle is the mount's handle behind f (nil: none).
func asHandle(f fs.FileHandle) *handle {
	switch h := f.(type) {
	case *handle:
		return h
	case ptHandle:
		return h.handle
	}
	return nil
}

// dataPath records and counts how an open reads (kaon.datapath,
// kaon.stats). The log tells when a file's path changes after its first
// open, and each new reason for reading through the storage server
// (not every file's first open: a mount reads thousands). n.mu held.
func (n *node) dataPath(g *grant, pt bool) {
	if g == nil {
		return
	}
	dp, why := pathServer, g.why
	switch {
	case pt:
		dp, why = pathPassthrough, fmt.Sprintf("fs %d", g.fsid)
	case g.local != nil:
		dp, why = pathLocal, fmt.Sprintf("fs %d", g.fsid)
	}
	n.fsys.Stats.Counter("direct_" + dp).Add(1)
	switch {
	case n.datapath != "" && dp != n.datapath:
		log.Printf("kaon mount: %s: reads %s now (%s)", n.path(), dp, why)
	case dp == pathServer && n.fsys.newServerReason(why):
		log.Printf("kaon mount: %s: reads through the storage server (%s)", n.path(), why)
	}
	n.datapath = dp
}

// current looks at h's local stripe again after the file changed (its
// content generation is gen now, its data version ver as this mount
// knows it). A committed update's journal is applied after the commit's
// reply, by the storage servers, and only they roll a journal forward
// when they read (storage.current): a stripe behind ver (its journal
// pending) is not read here any more — the storage server reads the
// file from then on, at the version it holds now. One at ver or later
// is opened again (its length and sums as they are now). h.mu held.
func (h *handle) current(gen, ver uint64) {
	h.local.Close()
	h.local = nil
	r, why := h.n.fsys.openLocal(h.localSt, h.localFid, func(m backend.Meta) (int64, bool) { return m.Size, m.Version >= ver },
		fmt.Sprintf("stripe behind data version %d (its update not applied yet)", ver))
	if r == nil {
		h.n.fsys.Stats.Counter("direct_behind").Add(1)
		log.Printf("kaon mount: %s: reads through the storage server now (%s)", h.n.path(), why)
		return
	}
	h.local, h.localGen = r, gen
}

// closeLocal closes the local stripe h read.
func (h *handle) closeLocal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.local != nil {
		h.local.Close()
		h.local = nil
	}
}

// remote reads the file as stored, through the read-ahead buffer: a
// read the buffer holds costs no request; a sequential one fetches twice
// as much as the last (from 1 MiB up to 16 MiB), a random one what was
// asked for.
func (h *handle) remote(ctx context.Context, p []byte, off int64) (int, error) {
	h.n.mu.Lock()
	gen, ver := h.n.gen, h.n.attr.DataVersion
	h.n.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.local != nil && gen != h.localGen {
		h.current(gen, ver)
	}
	if h.local != nil {
		m, err := h.local.ReadAt(p, off)
		if err == nil || err == io.EOF {
			return m, err
		}
		// A block that fails its sum, a disk error: the storage server
		// reads (and repairs) it from another copy.
		log.Printf("kaon mount: %s: direct read failed, reading through the storage server: %v", h.n.path(), err)
		h.n.fsys.Stats.Counter("direct_read_failed").Add(1)
		h.local.Close()
		h.local = nil
	}
	if gen != h.raGen {
		h.ra = h.ra[:0]
	}
	if off >= h.raOff && off+int64(len(p)) <= h.raOff+int64(len(h.ra)) {
		return copy(p, h.ra[off-h.raOff:]), nil
	}
	if h.rd == nil {
		rd, err := h.c.OpenReader(ctx, h.n.path())
		if err != nil {
			return 0, err
		}
		h.rd = rd
	}
	sequential := len(h.ra) > 0 && off >= h.raOff && off <= h.raOff+int64(len(h.ra))
	switch {
	case !sequential:
		h.raNext = minReadAhead
	case h.raNext < maxReadAhead:
		h.raNext *= 2
	}
	want := max(len(p), h.raNext)
	if cap(h.ra) < want {
		h.ra = make([]byte, want)
	}
	buf := h.ra[:want]
	n, err := h.rd.ReadAt(ctx, buf, off)
	h.ra, h.raOff, h.raGen = buf[:n], off, gen
	if err != nil && err != io.EOF {
		h.ra = h.ra[:0]
		return 0, err
	}
	m := copy(p, buf[:n])
	if m < len(p) {
		return m, io.EOF
	}
	return m, nil
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (_ fuse.ReadResult, eno syscall.Errno) {
	ctx = detach(ctx)
	defer h.n.fsys.Stats.Op("read").Done(time.Now(), &eno)
	h.n.mu.Lock()
	jr, size := h.n.jr, h.n.attr.Size
	h.n.mu.Unlock()
	var n int
	var err error
	if jr != nil {
		n, err = jr.ReadAt(ctx, dest, off, h.remote)
	} else {
		if off >= size {
			return fuse.ReadResultData(nil), 0
		}
		n, err = h.remote(ctx, dest[:min(int64(len(dest)), size-off)], off)
	}
	if err != nil && err != io.EOF {
		return nil, errno(err)
	}
	h.n.fsys.Stats.BytesOut.Add(int64(n))
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (_ uint32, eno syscall.Errno) {
	ctx = detach(ctx)
	defer h.n.fsys.Stats.Op("write").Done(time.Now(), &eno)
	h.n.mu.Lock()
	jr, mode := h.n.jr, h.n.attr.Mode
	h.n.pend.MTime = time.Time{} // a time held before a write: the write's (the commit's)
	h.n.mu.Unlock()
	if jr == nil || !h.write {
		return 0, syscall.EBADF
	}
	// The mount clears setuid/setgid on a write by anyone but root
	// (fusecore's ServerKillsPriv: the kernel then skips asking for
	// security.capability before every write).
	if c, ok := fuse.FromContext(ctx); ok && c.Uid != 0 && killsPriv(mode) {
		if eno := h.n.killPriv(ctx, h.c); eno != 0 {
			return 0, eno
		}
	}
	n, err := jr.WriteAt(data, off)
	h.n.fsys.Stats.BytesIn.Add(int64(n))
	if err != nil {
		return uint32(n), syscall.EIO
	}
	jr.stream(func() (rewriter, string) { p := h.n.path(); return h.n.rewriter(h.c, p), p })
	return uint32(n), 0
}

// killsPriv reports whether mode has bits a write or a chown clears:
// setuid, and setgid where it means set-group-ID (group execute set).
func killsPriv(mode uint32) bool {
	return mode&syscall.S_ISUID != 0 || mode&(syscall.S_ISGID|0o010) == syscall.S_ISGID|0o010
}

// killPriv clears setuid and set-group-ID of n.
func (n *node) killPriv(ctx context.Context, c *client.Client) syscall.Errno {
	n.mu.Lock()
	mode := n.attr.Mode & 0o7777
	n.mu.Unlock()
	mode &^= syscall.S_ISUID
	if mode&0o010 != 0 {
		mode &^= syscall.S_ISGID
	}
	if err := c.Chmod(ctx, n.path(), mode); err != nil {
		return errno(err)
	}
	n.mu.Lock()
	n.attr.Mode = n.attr.Mode&^0o7777 | mode
	n.mu.Unlock()
	return 0
}

// Allocate reserves space the way the namespace can: files have no
// holes, so extending (mode 0) sets the size, and punching a hole
// (with KEEP_SIZE) writes zeros over the range.
func (h *handle) Allocate(_ context.Context, off, size uint64, mode uint32) (eno syscall.Errno) {
	defer h.n.fsys.Stats.Op("fallocate").Done(time.Now(), &eno)
	h.n.mu.Lock()
	jr := h.n.jr
	h.n.mu.Unlock()
	if jr == nil || !h.write {
		return syscall.EBADF
	}
	end := int64(off + size)
	switch mode {
	case 0:
		if end > jr.Size() {
			return errno(jr.Truncate(end))
		}
		return 0
	case unix.FALLOC_FL_KEEP_SIZE:
		return 0
	case unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE:
		end = min(end, jr.Size())
		zeros := make([]byte, 1<<20)
		for o := int64(off); o < end; o += int64(len(zeros)) {
			if _, err := jr.WriteAt(zeros[:min(int64(len(zeros)), end-o)], o); err != nil {
				return syscall.EIO
			}
		}
		return 0
	}
	return syscall.EOPNOTSUPP
}

// dirty reports whether n's journal holds data not yet on the servers.
func (n *node) dirty() bool {
	n.mu.Lock()
	jr, unlinked := n.jr, n.unlinked
	n.mu.Unlock()
	return jr != nil && !unlinked && jr.Dirty()
}

// flush writes n's journal to the namespace: close-to-open, and fsync.
func (n *node) flush(ctx context.Context, c *client.Client) syscall.Errno {
	if !n.dirty() {
		return n.sendPend(ctx)
	}
	n.mu.Lock()
	jr := n.jr
	if n.flushing == 0 {
		n.flushBase, n.flushChanges = n.pageVer, 0
	}
	n.flushing++
	n.mu.Unlock()
	before := jr.Changes()
	p := n.path()
	err := n.fsys.replay(ctx, jr, c, p, n.rewriter(c, p))
	var e nsapi.Entry
	if err == nil {
		// What the flush made is what the kernel's pages hold.
		e, err = c.Stat(ctx, p)
	}
	n.flushed(jr.Changes()-before, e, err == nil)
	if err != nil {
		return errno(err)
	}
	return n.sendPend(ctx)
}

// rewriter sends n, written whole from empty, as one upload that
// rewrites it (client.Rewrite): the namespace checks that p is still
// the file n knows, at the data version it knows, and not locked (locks
// are the file's id's), and keeps its mode, owner and extended
// attributes; n takes the file's new id. None once the server said it
// does not rewrite.
func (n *node) rewriter(c *client.Client, p string) rewriter {
	if n.fsys.noRewrite.Load() {
		return nil
	}
	return func(ctx context.Context, body io.Reader, size int64) error {
		a, _ := n.snapshot()
		// What holdAttrs held goes with the content when the creator
		// flushes (the owner, whom the server lets set them).
		var pd client.RewriteAttrs
		n.mu.Lock()
		if c == n.creator {
			pd = n.pend
		}
		n.mu.Unlock()
		id, took, err := c.Rewrite(ctx, p, a.ID, a.DataVersion, pd, body, size)
		switch {
		case errors.Is(err, client.ErrNoRewrite):
			n.fsys.noRewrite.Store(true)
			return err
		case kerr.Is(err, kerr.Busy):
			n.fsys.Stats.Counter("rewrite_refused").Add(1)
			return err
		case err != nil:
			return err
		}
		n.fsys.Stats.Counter("rewrites").Add(1)
		if took && pd != (client.RewriteAttrs{}) {
			n.mu.Lock()
			if n.pend == pd { // else held anew meanwhile: sendPend sends it
				n.pend = client.RewriteAttrs{}
			}
			n.mu.Unlock()
			n.fsys.Stats.Counter("rewrite_attrs").Add(1)
		}
		if id != 0 && id != a.ID {
			n.fsys.rebind(n, a.ID, id)
		}
		return nil
	}
}

// flushed ends a flush of n that sent changes changing requests and
// (ok) left the file as e. When the last flush under way ends, the news
// of n's content held meanwhile are decided. The namespace's events do
// not say whose change they report, and a flush's own arrive while it
// runs, before it knows the data version it made: taken as changes made
// elsewhere, they had the kernel's pages dropped and its size set to a
// size the file had half-way through the flush — after the writer had
// moved on (a later truncate undone, reads past the end answered). So a
// flush holds them, and what its own requests can account for is its
// own: each commits at most one data version, so a file more than that
// many versions past the one the pages were read at was changed
// elsewhere too, and its pages go; news newer than the flush's result
// are applied as they came.
func (n *node) flushed(changes int, e nsapi.Entry, ok bool) {
	n.mu.Lock()
	n.flushing--
	n.flushChanges += changes
	last := n.flushing == 0
	mine := ok && e.ID == n.attr.ID
	if mine {
		n.gen++ // what was read ahead before the flush is stale
		n.attr = e.Attr
		n.pageKey, n.pageVer = contentKey(e.Attr), e.DataVersion
	}
	var held []nsapi.Invalidation
	elsewhere := false
	if last {
		held, n.held = n.held, nil
		upTo := n.flushBase + uint64(n.flushChanges)
		elsewhere = mine && e.DataVersion > upTo
		if mine {
			upTo = e.DataVersion
		}
		held = slices.DeleteFunc(held, func(ev nsapi.Invalidation) bool { return ev.DataVersion <= upTo })
	}
	if elsewhere {
		n.pageKey = ""
	}
	n.mu.Unlock()
	if elsewhere {
		n.fsys.Stats.Counter("changed_during_flush").Add(1)
		since := n.emptiedCount()
		n.fsys.queue(func() { n.fsys.contentChanged(n, e.Size, e.DataVersion, since) })
	}
	for _, ev := range held {
		n.fsys.apply(ev)
	}
	n.changedHere() // its listed size is stale
}

// replay flushes journal jr onto p. While the servers cannot be reached
// or ask to retry (a storage or namespace server restarting) it tries again for the
// mount's grace period: the journal holds what was written meanwhile,
// and fsync or close returns once it is on the storage servers, or
// fails after the grace.
func (f *FS) replay(ctx context.Context, jr *journal, c *client.Client, p string, rw rewriter) error {
	deadline := time.Now().Add(f.opts.Grace)
	wait := 100 * time.Millisecond
	for told := false; ; {
		err := jr.Flush(ctx, c, p, rw)
		retry := kerr.Is(err, kerr.Unavailable) || kerr.Is(err, kerr.Busy) // down, or just started (503 + Retry-After)
		if err == nil || !retry || time.Now().Add(wait).After(deadline) {
			if err == nil && told {
				log.Printf("kaon mount: %s: journal replayed", p)
			}
			return err
		}
		if !told {
			log.Printf("kaon mount: %s: %v; the journal is kept and replayed once the server is back (grace %v)", p, err, f.opts.Grace)
			f.Stats.Counter("replay_waits").Add(1)
			told = true
		}
		time.Sleep(wait)
		wait = min(2*wait, 2*time.Second)
	}
}

func (h *handle) Flush(ctx context.Context) (eno syscall.Errno) {
	owner, ok := fusecore.FlushOwner(ctx)
	ctx = detach(ctx)
	if ok {
		h.n.releasePOSIX(ctx, owner)
		h.mu.Lock()
		delete(h.owners, lockOwner{owner, false})
		h.mu.Unlock()
	} else {
		// The closing process unknown: every POSIX and OFD lock set
		// through h goes.
		h.releaseLocks(ctx, false)
	}
	// OFD locks and flocks belong to the open file description (h): a
	// close of one of its descriptors (a dup) keeps them; its last
	// close's RELEASE releases them (Release).
	if !h.write {
		return 0
	}
	defer h.n.fsys.Stats.Op("flush").Done(time.Now(), &eno)
	return h.n.flush(ctx, h.c)
}

// releasePOSIX releases owner's POSIX locks on n: the close (FLUSH) of
// any descriptor of the file by a process releases all the locks the
// process holds on it, as POSIX says, whichever descriptor set them. The
// owner of a FLUSH is the process's; an OFD lock's owner is its open
// file description, released at its last close (Release).
func (n *node) releasePOSIX(ctx context.Context, owner uint64) {
	n.mu.Lock()
	held := n.posix[owner]
	delete(n.posix, owner)
	n.mu.Unlock()
	if !held {
		return // the common close: no lock, no round trip
	}
	if err := n.fsys.sess.Unlock(ctx, nsapi.LockRequest{Path: n.path(), Kind: nsapi.LockPOSIX, Owner: owner}); err != nil {
		n.fsys.Stats.Counter("unlock_failed").Add(1)
	}
}

// releaseLocks releases the locks set through h: its POSIX and OFD ones,
// and with all its flocks too (the last close of h, RELEASE: what the
// description's owner holds, OFD locks and flocks, and POSIX locks of
// processes that never closed a descriptor of the file, whose FLUSH
// would have released them).
func (h *handle) releaseLocks(ctx context.Context, all bool) {
	h.mu.Lock()
	var rel []lockOwner
	for o := range h.owners {
		if all || !o.flock {
			rel = append(rel, o)
			delete(h.owners, o)
		}
	}
	h.mu.Unlock()
	h.n.mu.Lock()
	for _, o := range rel {
		if !o.flock {
			delete(h.n.posix, o.owner)
		}
	}
	h.n.mu.Unlock()
	for _, o := range rel {
		kind := nsapi.LockPOSIX
		if o.flock {
			kind = nsapi.LockFlock
		}
		if err := h.n.fsys.sess.Unlock(ctx, nsapi.LockRequest{Path: h.n.path(), Kind: kind, Owner: o.owner}); err != nil {
			h.n.fsys.Stats.Counter("unlock_failed").Add(1)
		}
	}
}

func (h *handle) Fsync(ctx context.Context, flags uint32) (eno syscall.Errno) {
	ctx = detach(ctx)
	if !h.write {
		return 0
	}
	defer h.n.fsys.Stats.Op("fsync").Done(time.Now(), &eno)
	return h.n.flush(ctx, h.c)
}

func (h *handle) Release(ctx context.Context) (eno syscall.Errno) {
	ctx = detach(ctx)
	h.releaseLocks(ctx, true)
	n := h.n
	if h.write {
		// A journal whose flush failed (close returned the error) is kept
		// for the next writer's flush to try again.
		eno = n.flush(ctx, h.c)
		n.mu.Lock()
		n.writers--
		if n.writers == 0 && n.jr != nil && (eno == 0 || n.unlinked) {
			n.jr.close()
			n.jr = nil
			n.creator = nil // closed: attributes go as changes of their own
		}
		n.mu.Unlock()
	}
	h.closeLocal()
	n.mu.Lock()
	n.opens--
	if h.pt {
		n.ptOpens--
	}
	retire := n.opens == 0 && n.stale
	n.mu.Unlock()
	if retire {
		// Changed elsewhere while open here, to a size the kernel would
		// not take: it forgets the file now.
		n.fsys.queue(func() { n.fsys.retire(n) })
	}
	n.fsys.sess.SetOpenFiles(n.fsys.openFiles(-1))
	return eno
}

// openFiles counts open handles for the session's heartbeats.
func (f *FS) openFiles(delta int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open += delta
	return f.open
}

// Locks are the namespace's: held across mounts, released when the
// session ends. The kernel's lock owner names the owner within the
// session (a process's POSIX locks, an open file's flock and OFD locks).

func lockRequest(p string, owner uint64, lk *fuse.FileLock, flags uint32) nsapi.LockRequest {
	r := nsapi.LockRequest{Path: p, Kind: nsapi.LockPOSIX, Owner: owner, Start: lk.Start, Pid: lk.Pid}
	if flags&fuse.FUSE_LK_FLOCK != 0 {
		r.Kind = nsapi.LockFlock
	}
	if lk.End != math.MaxInt64 && lk.End != math.MaxUint64 && lk.End >= lk.Start {
		r.Len = lk.End - lk.Start + 1
	}
	switch lk.Typ {
	case syscall.F_RDLCK:
		r.Type = nsapi.LockRead
	case syscall.F_WRLCK:
		r.Type = nsapi.LockWrite
	default:
		r.Type = nsapi.LockUnlock
	}
	return r
}

func (n *node) Getlk(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) (eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("getlk").Done(time.Now(), &eno)
	l, err := n.fsys.sess.GetLk(ctx, lockRequest(n.path(), owner, lk, flags))
	if err != nil {
		return errno(err)
	}
	if l == nil {
		*out = fuse.FileLock{Typ: syscall.F_UNLCK}
		return 0
	}
	*out = fuse.FileLock{Start: l.Start, End: math.MaxInt64, Pid: l.Pid, Typ: syscall.F_RDLCK}
	if l.Len > 0 {
		out.End = l.Start + l.Len - 1
	}
	if l.Type == nsapi.LockWrite {
		out.Typ = syscall.F_WRLCK
	}
	return 0
}

func (n *node) Setlk(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) (eno syscall.Errno) {
	ctx = detach(ctx)
	defer n.fsys.Stats.Op("setlk").Done(time.Now(), &eno)
	return n.setlk(ctx, f, owner, lk, flags, false)
}

func (n *node) Setlkw(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) (eno syscall.Errno) {
	defer n.fsys.Stats.Op("setlkw").Done(time.Now(), &eno)
	return n.setlk(ctx, f, owner, lk, flags, true)
}

func (n *node) setlk(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	r := lockRequest(n.path(), owner, lk, flags)
	r.Wait = wait && r.Type != nsapi.LockUnlock
	err := n.fsys.sess.Lock(ctx, r)
	if h := asHandle(f); h != nil && err == nil && r.Type != nsapi.LockUnlock {
		h.mu.Lock()
		if h.owners == nil {
			h.owners = map[lockOwner]bool{}
		}
		h.owners[lockOwner{owner, r.Kind == nsapi.LockFlock}] = true
		h.mu.Unlock()
		if r.Kind == nsapi.LockPOSIX {
			n.mu.Lock()
			if n.posix == nil {
				n.posix = map[uint64]bool{}
			}
			n.posix[owner] = true
			n.mu.Unlock()
		}
	}
	if kerr.Is(err, kerr.Aborted) && ctx.Err() != nil {
		return syscall.EINTR
	}
	return errno(err)
}

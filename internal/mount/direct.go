package mount

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// The direct path (Options.Direct). A read-only open of a file of a
// plain or replicated layout asks the namespace for the caller's read
// capability at the open (a refusal fails the open: EACCES, no
// descriptor), checks its scope as a storage server would (the file
// opened, read mode, not expired: capability.Parse; its signature is the
// namespace server's, which handed it to the daemon itself), and looks
// for a stripe it names that this host reaches itself: a filesystem
// whose registered directory (`kaon fs ls`: the same host's disk, or a
// CephFS tree mounted here at the path the filesystem names) holds the
// identity marker of that filesystem, with the stripe at the
// capability's data version and not marked damaged. Then the storage
// server is not asked for the data:
//
//   - passthrough: a stripe without block sums on a filesystem that keeps
//     none (fs config blocksums=off) is the file's bytes exactly, and no
//     update appends sums to it while it is read; its descriptor is
//     handed to the kernel (FUSE passthrough), which reads it without the
//     daemon;
//   - local: any other (sums and footer follow the data, which the
//     kernel would read too; or sums an update may append) is read by
//     the daemon, block sums verified where it has them, from the local
//     file.
//
// Anything else (an erasure-coded file, no stripe reachable here, a
// stale or damaged one, one behind the granted version — an update's
// journal not applied yet —, a local read error) reads through the
// storage server as before, with the capability already granted. An
// open handle reading locally looks at its stripe again after every
// change of the file (handle.current); a passthrough descriptor is only
// handed out for a stripe whose updates are applied before their commit
// returns (storage: applyNow). Writes always
// go through the journal and the storage servers (docs/DESIGN.md).

// Data paths of an open (node.datapath, kaon.datapath).
const (
	pathPassthrough = "passthrough"
	pathLocal       = "local"
	pathServer      = "server"
)

// listEvery is how often the filesystems are listed again (at an open):
// one that became reachable here, a changed setting, a moved path.
const listEvery = 30 * time.Second

// locals are the filesystems this host reaches itself, by id.
type locals struct {
	mu     sync.Mutex
	stores map[uint32]*posix.Store // nil value: listed, not reachable here
	noSums map[uint32]bool         // set to keep no block sums (fs config blocksums=off)
	listed time.Time
	failed string // why the last listing failed ("" if it did not)
	// lastWhy is the last reason an open read through the storage server
	// (its own lock: mu is held while listing, over the network).
	whyMu   sync.Mutex
	lastWhy string
}

// store is the local store of filesystem id, or nil and why not.
func (f *FS) store(ctx context.Context, id uint32) (*posix.Store, bool, string) {
	l := &f.locals
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.listed) < listEvery {
		if st := l.stores[id]; st != nil {
			return st, l.noSums[id], ""
		}
		if l.failed != "" {
			return nil, false, l.failed
		}
		return nil, false, "not reachable from this host"
	}
	l.listed = time.Now()
	// The paths are for the admin or a gateway host: the daemon's own
	// identity (root on the namespace's host, an admin token, or this
	// host's gateway key).
	fss, err := f.own.FilesystemPaths(ctx)
	if err != nil {
		why := "cannot list the filesystems: " + err.Error()
		if why != l.failed {
			log.Printf("kaon mount: direct path unavailable: %s", why)
		}
		l.failed = why
		return nil, false, why
	}
	l.failed = ""
	stores, noSums := map[uint32]*posix.Store{}, map[uint32]bool{}
	for _, fs := range fss {
		stores[fs.ID], noSums[fs.ID] = nil, fs.NoBlockSums
		if !filepath.IsAbs(fs.Path) {
			continue // RADOS
		}
		id, err := readIdentity(fs.Path)
		if err != nil || id.FsID != fs.ID || (fs.UUID != "" && id.UUID != fs.UUID) {
			continue // not here, or another filesystem is at that path
		}
		if old := l.stores[fs.ID]; old != nil && old.Root() == fs.Path {
			stores[fs.ID] = old
		} else {
			stores[fs.ID] = posix.New(fs.Path, posix.Options{})
			log.Printf("kaon mount: direct path: fs %d reached at %s", fs.ID, fs.Path)
		}
	}
	l.stores, l.noSums = stores, noSums
	if st := stores[id]; st != nil {
		return st, noSums[id], ""
	}
	return nil, false, "not reachable from this host"
}

// probeTimeout bounds the look at a filesystem's identity marker: a
// hung mount (a CephFS whose cluster does not answer) is not reachable,
// and never holds the opens waiting for the listing.
const probeTimeout = 2 * time.Second

// readIdentity reads the identity marker of the filesystem at root,
// giving up after probeTimeout (the read is left to finish on its own).
func readIdentity(root string) (backend.Identity, error) {
	type result struct {
		id  backend.Identity
		err error
	}
	ch := make(chan result, 1)
	go func() {
		id, err := posix.ReadIdentity(root)
		ch <- result{id, err}
	}()
	select {
	case r := <-ch:
		return r.id, r.err
	case <-time.After(probeTimeout):
		return backend.Identity{}, fmt.Errorf("%s: no answer within %v", root, probeTimeout)
	}
}

// grant is what a direct open found.
type grant struct {
	rd    *client.Reader // the caller's grant from the namespace (its capability)
	local backend.Reader // the local stripe, nil if none
	fsid  uint32
	st    *posix.Store // the local stripe's store, and the file's id
	fid   uint64
	// noSums: the stripe's filesystem keeps no block sums, so no update
	// ever appends any to it (passthrough is safe while it is read).
	noSums bool
	key    string // the file and data version read (passthrough opens of one inode share one)
	size   int64  // the file's size and data version as the namespace granted it
	ver    uint64
	why    string // why no local stripe
}

// passthrough reports whether g's stripe can be handed to the kernel:
// a local file whose bytes are the file's exactly.
func (g *grant) passthrough() (int, bool) {
	if g == nil || g.local == nil || !g.noSums || g.local.BlockSums() {
		return -1, false
	}
	of, ok := g.local.(backend.OSFile)
	if !ok {
		return -1, false
	}
	st, err := of.OSFile().Stat()
	if err != nil || st.Size() != g.local.Size() {
		return -1, false
	}
	return int(of.OSFile().Fd()), true
}

// openDirect asks the namespace for c's read capability of p and finds a
// stripe of it this host reaches. An error is the namespace's refusal
// (or a capability that does not allow this read): the open fails.
func (f *FS) openDirect(ctx context.Context, c *client.Client, p string) (*grant, error) {
	rd, err := c.OpenReader(ctx, p)
	if err != nil {
		return nil, err
	}
	g := &grant{rd: rd}
	cp, err := capability.Parse(rd.Capability(), time.Now(), capability.Access{Path: p})
	if err != nil {
		return nil, kerr.WithOp(err, "open")
	}
	g.key, g.size, g.ver = fmt.Sprintf("%d/%d", cp.Fid, cp.DataVersion), cp.Size, cp.DataVersion
	l, err := layout.Parse(cp.Layout)
	switch {
	case err != nil:
		g.why = err.Error()
		return g, nil
	case l.Kind == layout.EC:
		g.why = "erasure-coded layout"
		return g, nil
	case len(cp.Targets) == 0:
		g.why = "no stripes"
		return g, nil
	}
	var whys []string
	for i, t := range cp.Targets {
		if cp.IsStale(i) {
			continue
		}
		st, noSums, why := f.store(ctx, t.FsID)
		if st == nil {
			whys = append(whys, fmt.Sprintf("fs %d: %s", t.FsID, why))
			continue
		}
		r, why := f.localStripe(st, cp)
		if r == nil {
			whys = append(whys, fmt.Sprintf("fs %d: %s", t.FsID, why))
			continue
		}
		g.local, g.fsid, g.noSums, g.st, g.fid = r, t.FsID, noSums, st, cp.Fid
		return g, nil
	}
	g.why = strings.Join(whys, "; ")
	return g, nil
}

// localStripe opens cp's stripe in st if it is at the granted data
// version, not marked damaged and of the file's size; else nil and why.
// A stripe behind that version (its update's journal not applied yet:
// the applies follow the commit's reply) is read through the storage
// server, which rolls the journal forward first (storage.current).
func (f *FS) localStripe(st *posix.Store, cp *capability.Capability) (backend.Reader, string) {
	return f.openLocal(st, cp.Fid, func(m backend.Meta) (int64, bool) { return cp.Size, m.Version == cp.DataVersion },
		fmt.Sprintf("stripe not at data version %d", cp.DataVersion))
}

// openLocal opens the stripe of fid in st if its metadata passes at
// (which says the size the stripe must have), it is not marked damaged
// and of that size; else nil and why (notAt when at refused it). A
// backend that does not answer within the mount's timeout (a hung
// CephFS) is given up on: the storage server is asked instead.
func (f *FS) openLocal(st *posix.Store, fid uint64, at func(backend.Meta) (int64, bool), notAt string) (backend.Reader, string) {
	type result struct {
		r   backend.Reader
		why string
	}
	ch := make(chan result, 1)
	go func() {
		m, err := st.ReadMeta(fid)
		size, ok := at(m)
		if err != nil || !ok {
			ch <- result{why: notAt}
			return
		}
		r, err := st.Open(fid)
		if err != nil {
			ch <- result{why: err.Error()}
			return
		}
		if d := r.Damaged(); d != "" || r.Size() != size {
			r.Close()
			ch <- result{why: "stripe damaged or of another size"}
			return
		}
		ch <- result{r: r}
	}()
	select {
	case res := <-ch:
		return res.r, res.why
	case <-time.After(f.opts.Timeout):
		go func() {
			if res := <-ch; res.r != nil {
				res.r.Close()
			}
		}()
		return nil, fmt.Sprintf("no answer within %v", f.opts.Timeout)
	}
}

// newServerReason reports whether why differs from the last reason an
// open was read through the storage server (logged once per change).
func (f *FS) newServerReason(why string) bool {
	l := &f.locals
	l.whyMu.Lock()
	defer l.whyMu.Unlock()
	if why == l.lastWhy {
		return false
	}
	l.lastWhy = why
	return true
}

// SetPassthrough tells the file system whether the kernel took FUSE
// passthrough (fusecore's Mount.PassthroughActive): only then are local
// stripes handed to it.
func (f *FS) SetPassthrough(on bool) { f.passthrough.Store(on) }

// directStats is the direct path's part of kaon.stats.
func (f *FS) directStats() map[string]any {
	pt := f.passthrough.Load()
	mode := "off"
	if f.opts.Direct {
		mode = "auto"
	}
	return map[string]any{"mode": mode, "passthrough": pt}
}

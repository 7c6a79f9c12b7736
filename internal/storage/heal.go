package storage

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// Healing: a read that finds a bad copy (a block of a local stripe
// failing its crc32c, an erasure-coded stripe whose frames fail) has the
// client served from the good copies and the bad one repaired in the
// background, by the storage server holding it:
//
//   - a replica's bad blocks are rewritten in place (Store.Rewrite) with
//     the same bytes read, verified, from another copy; every block of
//     the stripe is checked, not only the one the read met. A block no
//     copy can give (a plain file has no other copy) leaves the stripe
//     marked damaged (Store.MarkDamaged), so that later reads fail at
//     once, naming the file, instead of in the middle of a transfer;
//   - an erasure-coded stripe is rebuilt from the file's other stripes
//     by the repair fsck uses (Server.Repair, rebuild.go), asked of the
//     peer holding it if it is not here.
//
// A repair acts on the capability of the read that found the damage and
// only on a stripe that is still there with the file's metadata: one
// moved or deleted since is left alone. One repair per stripe runs at a
// time, healParallel in all; a repair that cannot run now is dropped (the
// next read, or fsck, finds the damage again).

// bitrotCounters count, on one filesystem, the blocks found failing
// their checksum and the background repairs of its stripes.
type bitrotCounters struct {
	readBad, scrubBad         atomic.Int64
	repaired, damaged, failed atomic.Int64
}

// BitrotStats are a filesystem's bitrot counters since the server
// started.
type BitrotStats struct {
	FsID uint32
	// ReadBad counts reads of a stripe here that met bad bytes: a block
	// of a plain or replicated stripe failing its crc32c, or an
	// erasure-coded stripe a read found corrupt (counted when its
	// rebuild is asked).
	ReadBad int64
	// ScrubBad counts blocks (erasure-coded stripes: frames) scrubs found
	// failing their crc32c.
	ScrubBad int64
	// Background repairs of stripes here that a read found bad, by
	// result: mended, marked damaged beyond repair, failed to run.
	Repaired, Damaged, Failed int64
}

// BitrotStats returns the bitrot counters of the filesystems this server
// holds.
func (s *Server) BitrotStats() []BitrotStats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]BitrotStats, 0, len(s.fs))
	for id, f := range s.fs {
		b := &f.bitrot
		out = append(out, BitrotStats{FsID: id, ReadBad: b.readBad.Load(), ScrubBad: b.scrubBad.Load(),
			Repaired: b.repaired.Load(), Damaged: b.damaged.Load(), Failed: b.failed.Load()})
	}
	return out
}

// healParallel bounds the repairs a server runs at once.
const healParallel = 2

// healTimeout bounds one repair.
const healTimeout = 10 * time.Minute

// healPiece is what a replica's repair reads at once.
const healPiece = 1 << 20

type healer struct {
	mu    sync.Mutex
	busy  map[healKey]bool
	slots chan struct{}
	wg    sync.WaitGroup // repairs running (tests wait for them)
	ctx   context.Context
}

type healKey struct {
	fsid   uint32
	fid    uint64
	stripe int
}

func newHealer() *healer {
	return &healer{busy: map[healKey]bool{}, slots: make(chan struct{}, healParallel), ctx: context.Background()}
}

// start runs fn in the background unless a repair of k runs or no slot
// is free.
func (h *healer) start(k healKey, fn func(ctx context.Context)) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.busy[k] {
		return false
	}
	select {
	case h.slots <- struct{}{}:
	default:
		return false
	}
	h.busy[k] = true
	h.wg.Add(1)
	ctx := h.ctx
	go func() {
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(ctx, healTimeout)
		defer cancel()
		fn(ctx)
		h.mu.Lock()
		delete(h.busy, k)
		<-h.slots
		h.mu.Unlock()
	}()
	return true
}

// setContext makes ctx the parent of repairs started from now on (Run's:
// they end with the server).
func (h *healer) setContext(ctx context.Context) {
	h.mu.Lock()
	h.ctx = ctx
	h.mu.Unlock()
}

// openLocal opens stripe idx of the file c names, on f here, for
// reading: a copy at another data version than c's is refused (stale:
// it missed an update, storage.current), a copy marked damaged too
// (kerr.IO wrapping a *damagedError), and when a block of a plain or
// replicated file's stripe fails while it is read, the stripe is
// repaired in the background.
func (s *Server) openLocal(f *filesystem, c *capability.Capability, token string, idx int) (backend.Reader, error) {
	if err := s.current(f, c, idx); err != nil {
		return nil, err
	}
	r, err := f.store.Open(c.Fid)
	if err != nil {
		return nil, err
	}
	if why := r.Damaged(); why != "" {
		r.Close()
		return nil, kerr.Wrap(kerr.IO, "read", fmt.Sprintf("%s stripe %d on fs %d", c.Path, idx, f.id), &damagedError{why: why})
	}
	if l, _ := layout.Parse(c.Layout); l.Kind == layout.EC || !r.BlockSums() {
		return r, nil // erasure-coded stripes: the file's reader checks frames
	}
	return &healingReader{Reader: r, s: s, c: c, token: token, idx: idx}, nil
}

// healingReader is a local copy of a plain or replicated file whose bad
// blocks are repaired when a read meets them.
type healingReader struct {
	backend.Reader
	s     *Server
	c     *capability.Capability
	token string
	idx   int
}

func (r *healingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.Reader.ReadAt(p, off)
	if _, bad := checksum.AsBlockError(err); bad {
		r.s.healReplica(r.c, r.token, r.idx, err)
	}
	return n, err
}

// damagedError is a copy marked damaged.
type damagedError struct{ why string }

func (e *damagedError) Error() string { return "damaged: " + e.why }

// healReplica repairs, in the background, stripe idx of the plain or
// replicated file c names, held here, whose read failed with err.
func (s *Server) healReplica(c *capability.Capability, token string, idx int, err error) {
	f := s.local(c.Targets[idx].FsID)
	if f == nil {
		return
	}
	f.bitrot.readBad.Add(1)
	k := healKey{f.id, c.Fid, idx}
	if s.heal.start(k, func(ctx context.Context) { s.repairBlocks(ctx, c, token, idx, f) }) {
		s.log.Warn("bad block read; repairing the copy from another", "path", c.Path, "fid", c.Fid, "stripe", idx,
			"fsid", f.id, "err", err)
	}
}

// repairBlocks checks every block of stripe idx of c on f and rewrites
// those that fail with the bytes another copy has.
func (s *Server) repairBlocks(ctx context.Context, c *capability.Capability, token string, idx int, f *filesystem) {
	what := fmt.Sprintf("%s stripe %d on fs %d", c.Path, idx, f.id)
	if !s.stillThere(f, c, idx) {
		return
	}
	r, err := f.store.Open(c.Fid)
	if err != nil {
		f.bitrot.failed.Add(1)
		s.log.Warn("repair of bad blocks: cannot open the copy", "stripe", what, "err", err)
		return
	}
	defer r.Close()
	if !r.BlockSums() {
		return
	}
	buf := make([]byte, healPiece)
	var fixed, lost []string
	for off := int64(0); off < r.Size() && ctx.Err() == nil; {
		n, err := r.ReadAt(buf[:min(healPiece, r.Size()-off)], off)
		off += int64(n)
		if err == nil || err == io.EOF {
			continue
		}
		be, ok := checksum.AsBlockError(err)
		if !ok {
			f.bitrot.failed.Add(1)
			s.log.Warn("repair of bad blocks: cannot read the copy", "stripe", what, "err", err)
			return
		}
		off = be.Off + be.Len
		from, why := s.rewriteBlock(ctx, c, token, idx, f, be)
		if why != "" {
			lost = append(lost, fmt.Sprintf("%s: %s", be, why))
			continue
		}
		fixed = append(fixed, fmt.Sprintf("block %d from %s", be.Block, from))
	}
	if len(fixed) > 0 {
		s.log.Info("repaired bad blocks", "stripe", what, "fid", c.Fid, "blocks", strings.Join(fixed, ", "))
	}
	switch {
	case len(lost) > 0:
		why := strings.Join(lost, "; ")
		if err := f.store.MarkDamaged(c.Fid, why); err != nil {
			f.bitrot.failed.Add(1)
			s.log.Error("cannot mark a damaged copy", "stripe", what, "err", err)
		} else {
			f.bitrot.damaged.Add(1)
		}
		s.log.Error("copy damaged beyond repair: no good copy of its bad blocks", "stripe", what, "fid", c.Fid, "damage", why)
	case len(fixed) > 0:
		f.bitrot.repaired.Add(1)
	case ctx.Err() != nil:
		f.bitrot.failed.Add(1)
	}
}

// stillThere reports whether f holds stripe idx of the file c names, at
// c's data version: a repair never touches a stripe that has gone, is
// another's, or was updated since (the good bytes would be of the
// version before).
func (s *Server) stillThere(f *filesystem, c *capability.Capability, idx int) bool {
	m, err := f.store.ReadMeta(c.Fid)
	return err == nil && m.Fid == c.Fid && m.Stripe == idx && m.Layout == c.Layout && m.Size == c.Size &&
		m.Version == c.DataVersion
}

// rewriteBlock reads the bad block be from another copy of the file and
// writes it over stripe idx on f; it returns the copy it came from, or
// why no copy could give it.
func (s *Server) rewriteBlock(ctx context.Context, c *capability.Capability, token string, idx int, f *filesystem, be *checksum.BlockError) (string, string) {
	good := make([]byte, be.Len)
	var reasons []string
	for j, t := range c.Targets {
		if j == idx {
			continue
		}
		name := fmt.Sprintf("replica %d (fs %d)", j, t.FsID)
		if err := s.readCopy(ctx, c, token, j, good, be.Off); err != nil {
			reasons = append(reasons, name+": "+reason(err))
			continue
		}
		if why := s.rewrite(f, c, idx, be.Off, good); why != "" {
			return "", why
		}
		// Read back through a fresh reader (its sums as now on disk).
		r, err := f.store.Open(c.Fid)
		if err == nil {
			_, err = r.ReadAt(good, be.Off)
			r.Close()
		}
		if err != nil && err != io.EOF {
			return "", "rewritten, but it fails again: " + reason(err)
		}
		return name, ""
	}
	if len(reasons) == 0 {
		return "", "no other copy (layout " + c.Layout + ")"
	}
	return "", "no good copy (" + strings.Join(reasons, "; ") + ")"
}

// rewrite writes good, read from another copy at c's data version, over
// stripe idx of c on f at off, unless the stripe was updated (or has
// gone) meanwhile; it returns why not.
func (s *Server) rewrite(f *filesystem, c *capability.Capability, idx int, off int64, good []byte) string {
	defer f.lockStripe(c.Fid)()
	if !s.stillThere(f, c, idx) {
		return "the copy changed while the good bytes were read (updated, moved or removed)"
	}
	if err := f.store.Rewrite(c.Fid, off, good); err != nil {
		return "rewriting it: " + reason(err)
	}
	return ""
}

// readCopy reads len(p) bytes at off of copy j of c, verified: a local
// one through its store, another server's through that server (which
// verifies its blocks).
func (s *Server) readCopy(ctx context.Context, c *capability.Capability, token string, j int, p []byte, off int64) error {
	t := c.Targets[j]
	var r io.ReaderAt
	if f := s.local(t.FsID); f != nil {
		lr, err := s.openLocal(f, c, token, j)
		if err != nil {
			return err
		}
		defer lr.Close()
		r = lr
	} else {
		peers, err := s.peers("repair", c.Path)
		if err != nil {
			return err
		}
		r = peers.StripeReader(ctx, t.Addr, c.Fid, j, token)
	}
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// healEC repairs, in the background, stripe idx of the erasure-coded
// file c names, found damaged by a read (rebuilt here if it is here,
// else by the server holding it).
func (s *Server) healEC(c *capability.Capability, token string, idx int, why string) {
	t := c.Targets[idx]
	job := message.RepairJob{Fid: c.Fid, Token: token, Rebuild: []int{idx}, ReadDamage: true}
	k := healKey{t.FsID, c.Fid, idx}
	run := func(ctx context.Context) {
		var err error
		if s.local(t.FsID) != nil {
			err = s.Repair(ctx, job)
		} else if p, perr := s.peers("repair", c.Path); perr != nil {
			err = perr
		} else {
			err = p.Repair(ctx, t.Addr, job)
		}
		if err != nil {
			s.log.Error("cannot rebuild a damaged erasure-coded stripe", "path", c.Path, "fid", c.Fid, "stripe", idx,
				"fsid", t.FsID, "err", err)
		}
	}
	if s.heal.start(k, run) {
		s.log.Warn("damaged erasure-coded stripe read; rebuilding it", "path", c.Path, "fid", c.Fid, "stripe", idx,
			"fsid", t.FsID, "damage", why)
	}
}

// checkRebuild refuses to rebuild, for damage a read found, a stripe
// that is not where the capability says (moved or deleted since).
func (s *Server) checkRebuild(c *capability.Capability, idx int) error {
	f := s.local(c.Targets[idx].FsID)
	if f == nil || !s.stillThere(f, c, idx) {
		return kerr.New(kerr.NotFound, "repair", c.Path, fmt.Sprintf("stripe %d is no longer on fs %d", idx, c.Targets[idx].FsID))
	}
	return nil
}

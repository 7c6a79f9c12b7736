package storage

// Stripe journals on this server's filesystems (backend.Updater), for
// update sessions run here or by a peer, and the check every read makes:
// a stripe is read only at the data version its capability names.

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// updater is f's store as an Updater, or why it cannot be one.
func (f *filesystem) updater(path string) (backend.Updater, error) {
	u, ok := f.store.(backend.Updater)
	if !ok {
		return nil, kerr.New(kerr.Unsupported, "update", path, fmt.Sprintf("filesystem %d cannot change stripes in place", f.id))
	}
	return u, nil
}

// Prepare, Prepared, Apply and Discard run the store's journal calls
// under the guard (a store that is not an Updater refuses them).
func (s *guarded) Prepare(fid uint64, h backend.JournalHead, ops io.Reader) error {
	u, ok := s.Store.(backend.Updater)
	if !ok {
		return kerr.New(kerr.Unsupported, "update", s.g.root, "this store cannot change stripes in place")
	}
	return s.g.do("prepare", func() error { return u.Prepare(fid, h, ops) })
}

func (s *guarded) Prepared(fid uint64) (backend.JournalHead, error) {
	u, ok := s.Store.(backend.Updater)
	if !ok {
		return backend.JournalHead{}, kerr.New(kerr.NotFound, "update", s.g.root, "no prepared update")
	}
	var h backend.JournalHead
	ok, err := s.g.run("prepared", func() (err error) { h, err = u.Prepared(fid); return err }, nil)
	if !ok && err == nil {
		err = kerr.New(kerr.Unavailable, "update", s.g.root, "filesystem does not answer")
	}
	return h, err
}

func (s *guarded) Apply(fid uint64) error {
	u, ok := s.Store.(backend.Updater)
	if !ok {
		return kerr.New(kerr.NotFound, "update", s.g.root, "no prepared update")
	}
	return s.g.do("apply", func() error { return u.Apply(fid) })
}

func (s *guarded) Discard(fid uint64) error {
	u, ok := s.Store.(backend.Updater)
	if !ok {
		return nil
	}
	return s.g.do("discard", func() error { return u.Discard(fid) })
}

var _ backend.Updater = (*guarded)(nil)

// current checks that stripe idx of the file c names, on f, holds c's
// data version. A journal prepared for exactly that version is rolled
// forward first once the namespace confirms the version is durably the
// file's (committedDurably): the update it belongs to committed, and its
// entry server may not have applied it yet (it crashed, or is still at
// it).
func (s *Server) current(f *filesystem, c *capability.Capability, idx int) error {
	if c.IsStale(idx) {
		return kerr.New(kerr.IO, "open", c.Path, fmt.Sprintf("stripe %d is stale (it missed an update)", idx))
	}
	m, err := f.store.ReadMeta(c.Fid)
	if err != nil {
		return err
	}
	if m.Version == c.DataVersion {
		return s.overtaken(f, c, idx)
	}
	if u, ok := f.store.(backend.Updater); ok && m.Version < c.DataVersion {
		if h, err := u.Prepared(c.Fid); err == nil && h.Meta.Version == c.DataVersion && h.From == m.Version && s.committedDurably(c.Fid, h) {
			if err := f.apply(c.Fid); err == nil {
				return nil
			}
		}
		// The commit's own apply may have rolled it forward meanwhile.
		if m, err := f.store.ReadMeta(c.Fid); err == nil && m.Version == c.DataVersion {
			return nil
		}
	}
	return kerr.New(kerr.IO, "open", c.Path, fmt.Sprintf("stripe %d is at data version %d, the file at %d (stale)", idx, m.Version, c.DataVersion))
}

// overtaken checks that a stripe at c's data version does not hold the
// journal of a later commit the namespace recorded, its apply still to
// come (the applies follow the commit's reply): c, granted before that
// commit, would read the bytes it replaced. Such a journal is rolled
// forward and c refused as stale — a client asks the namespace again,
// as it does when the apply got there first. Only stripes given a
// journal since this server started are looked at (a journal left by a
// crash is found by readers at its version, as before).
func (s *Server) overtaken(f *filesystem, c *capability.Capability, idx int) error {
	mark, ok := f.unapplied.Load(c.Fid)
	if !ok {
		return nil
	}
	u, ok := f.store.(backend.Updater)
	if !ok {
		return nil
	}
	h, err := u.Prepared(c.Fid)
	switch {
	case kerr.Is(err, kerr.NotFound):
		f.unapplied.CompareAndDelete(c.Fid, mark) // not if a prepare marked it again meanwhile
		return nil
	case err != nil || h.From != c.DataVersion || !s.committedDurably(c.Fid, h):
		return nil // not committed (yet, or ever): the stripe is the file at c's version
	}
	_ = f.apply(c.Fid) // a failure leaves the journal for the next reader at its version
	return kerr.New(kerr.IO, "open", c.Path, fmt.Sprintf("stripe %d: the file changed since this capability was granted (data version %d, now %d)", idx, c.DataVersion, h.Meta.Version))
}

// unappliedMarks makes the marks of filesystem.unapplied: one per
// prepare, so that a look that found no journal never drops the mark of
// one prepared since.
var unappliedMarks atomic.Uint64

// committedDurably asks the namespace whether the commit journal h
// belongs to is durably the file's (nsserver's FileVersion answers once
// what it read is durable). A capability may carry a version the active
// namespace server has applied but not yet committed to its shared
// engine: rolling a stripe forward to it, a commit a failover then lost
// would leave the stripe ahead of the file — unreadable.
func (s *Server) committedDurably(fid uint64, h backend.JournalHead) bool {
	ns, ok := s.cfg.Namespace.(message.Updates)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), outcomeWait)
	defer cancel()
	fv, err := ns.FileVersion(ctx, fid)
	return err == nil && fv.DataVersion == h.Meta.Version && (h.Tag == 0 || fv.Tag == h.Tag)
}

// PrepareStripe stores the journal of an update of stripe idx held here,
// sent by the update session's entry server. The stripe must be at the
// session's base version: a journal that takes it there (its update
// committed, its entry server crashed before applying it) is applied
// first, never replaced. applyNow says the stripe may be read without a
// storage server (its filesystem keeps no block sums: a mount's
// passthrough descriptor), so its journal must be applied before the
// commit is acknowledged.
func (s *Server) PrepareStripe(token string, fid uint64, idx int, h backend.JournalHead, ops io.Reader) (applyNow bool, err error) {
	c, f, err := s.updateTarget(token, fid, idx)
	if err != nil {
		return false, err
	}
	if err := f.writable(); err != nil {
		return false, err
	}
	if err := s.current(f, c, idx); err != nil {
		return false, err // at another version, or a journal of the version before is rolled forward first
	}
	h.Meta.Fid, h.Meta.Path, h.Meta.Stripe = fid, c.Path, idx
	if err := f.prepare(fid, h, ops); err != nil {
		return false, journalError("prepare", c.Path, err)
	}
	return f.noSums.Load(), nil
}

// journalLock is the lock of one stripe's journal, with its holders and
// waiters counted so the map keeps only the ones in use.
type journalLock struct {
	sync.Mutex
	users int
}

// lockJournal holds the journal lock of the stripe of fid on f: taken by
// a prepare (which replaces the journal) and by dropObsoleteJournal.
func (f *filesystem) lockJournal(fid uint64) func() {
	f.journalMu.Lock()
	if f.journaling == nil {
		f.journaling = map[uint64]*journalLock{}
	}
	l := f.journaling[fid]
	if l == nil {
		l = &journalLock{}
		f.journaling[fid] = l
	}
	l.users++
	f.journalMu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		f.journalMu.Lock()
		if l.users--; l.users == 0 {
			delete(f.journaling, fid)
		}
		f.journalMu.Unlock()
	}
}

// journalInFlight is how long a journal of another commit over the same
// data version is taken for one under way — prepared, its namespace
// commit perhaps made (an answer lost is asked for up to outcomeWait),
// its apply to come — and refused to replace. One older than this was
// left by a session that died before it committed or discarded it.
const journalInFlight = 2 * time.Minute

// onConcurrentPrepare, when set (tests), is called when a prepare is
// refused because another commit's journal is in flight.
var onConcurrentPrepare func()

// prepare stores the journal of an update of the stripe of fid on f. A
// stripe has one journal: a prepare over the same base version while
// another commit's journal is in flight is refused (Busy) rather than
// replacing it — that commit may be recorded by the namespace already,
// and its apply would then roll forward the other session's operations,
// or find none, losing its own acknowledged writes.
func (f *filesystem) prepare(fid uint64, h backend.JournalHead, ops io.Reader) error {
	defer f.lockJournal(fid)()
	u := f.store.(backend.Updater)
	if old, err := u.Prepared(fid); err == nil && old.Tag != 0 && old.Tag != h.Tag && old.From == h.From &&
		time.Since(time.Unix(0, old.At)) < journalInFlight {
		if onConcurrentPrepare != nil {
			onConcurrentPrepare()
		}
		return kerr.New(kerr.Busy, "update", h.Meta.Path, fmt.Sprintf("stripe %d: another session's update of this file is being committed", h.Meta.Stripe))
	}
	h.At = time.Now().UnixNano()
	if err := u.Prepare(fid, h, ops); err != nil {
		return err
	}
	f.unapplied.Store(fid, unappliedMarks.Add(1))
	return nil
}

// dropObsoleteJournal removes a journal beside the stripe of c's file on
// f that can never apply: it takes the stripe to a version at or below
// the one the file has (c's), which the stripe holds by then — a session
// whose commit was refused or never made, its server gone before it
// discarded it. A journal of a later version may be a commit under way
// and stays.
func (s *Server) dropObsoleteJournal(f *filesystem, c *capability.Capability) {
	u, ok := f.store.(backend.Updater)
	if !ok {
		return
	}
	defer f.lockJournal(c.Fid)()
	h, err := u.Prepared(c.Fid)
	if err != nil || h.Meta.Version > c.DataVersion {
		return
	}
	if err := u.Discard(c.Fid); err != nil {
		s.log.Warn("fsck: an obsolete update journal could not be dropped", "path", c.Path, "fid", c.Fid, "fs", f.id, "err", err)
		return
	}
	s.log.Info("fsck: dropped an obsolete update journal", "path", c.Path, "fid", c.Fid, "fs", f.id, "journal_version", h.Meta.Version, "file_version", c.DataVersion)
}

// ApplyStripe rolls forward the prepared journal of stripe idx.
func (s *Server) ApplyStripe(token string, fid uint64, idx int) error {
	c, f, err := s.updateTarget(token, fid, idx)
	if err != nil {
		return err
	}
	return journalError("apply", c.Path, f.applyUpdate(fid, c.DataVersion))
}

// apply rolls the prepared update of the stripe of fid on f forward,
// under the stripe's change lock (a repair of it waits).
func (f *filesystem) apply(fid uint64) error {
	defer f.lockStripe(fid)()
	return f.store.(backend.Updater).Apply(fid)
}

// applyUpdate applies the prepared update of the stripe of fid on f,
// which the namespace committed over data version base. A reader or a
// later prepare that opened the stripe since the commit has rolled that
// journal forward already (current): the stripe past base is the update
// applied, not a stripe that missed it — and a journal found then is a
// later commit's, prepared and perhaps not yet recorded, never applied
// here (the applies run after the commit's reply,
// so the session's next commit or another session's may be prepared by
// then).
func (f *filesystem) applyUpdate(fid, base uint64) (err error) {
	defer f.lockStripe(fid)()
	if mark, ok := f.unapplied.Load(fid); ok {
		defer func() {
			if err == nil {
				f.unapplied.CompareAndDelete(fid, mark)
			}
		}()
	}
	u := f.store.(backend.Updater)
	h, err := u.Prepared(fid)
	if err != nil || h.From != base || h.Meta.Version != base+1 {
		if m, merr := f.store.ReadMeta(fid); merr == nil && m.Version > base {
			return nil
		}
		if err != nil {
			return err
		}
		return kerr.New(kerr.IO, "update", h.Meta.Path, fmt.Sprintf("stripe %d: the journal there takes it from version %d to %d, not from %d", h.Meta.Stripe, h.From, h.Meta.Version, base))
	}
	err = u.Apply(fid)
	if kerr.Is(err, kerr.NotFound) {
		if m, merr := f.store.ReadMeta(fid); merr == nil && m.Version > base {
			return nil
		}
	}
	return err
}

// DiscardStripe drops the prepared journal of stripe idx.
func (s *Server) DiscardStripe(token string, fid uint64, idx int) error {
	c, f, err := s.updateTarget(token, fid, idx)
	if err != nil {
		return err
	}
	return journalError("discard", c.Path, f.store.(backend.Updater).Discard(fid))
}

// journalError names the file a journal call failed for (nil: none).
func journalError(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return stripeError(op, path, err)
}

func (s *Server) updateTarget(token string, fid uint64, idx int) (*capability.Capability, *filesystem, error) {
	c, f, err := s.stripeTarget(token, fid, idx, true)
	if err != nil {
		return nil, nil, err
	}
	if !c.Update {
		return nil, nil, kerr.New(kerr.Permission, "update", c.Path, "capability is not for an update")
	}
	if _, err := f.updater(c.Path); err != nil {
		return nil, nil, err
	}
	return c, f, nil
}

// TruncateFile runs an update session of one truncation (a truncation by
// path, asked by the namespace server).
func (s *Server) TruncateFile(ctx context.Context, token string, size int64) error {
	c, err := s.Verify(token, capability.Access{Write: true})
	if err != nil {
		return err
	}
	u, err := s.NewUpdate(ctx, c, token)
	if err != nil {
		return err
	}
	if err := u.Truncate(size); err != nil {
		u.Abort()
		return err
	}
	return u.Commit(ctx)
}

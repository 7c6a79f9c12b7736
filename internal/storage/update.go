package storage

// Update sessions: a committed file changed in place (root://
// kXR_open_updt or kXR_open_apnd, an HTTP PUT with Content-Range, a
// truncation by path).
//
// A session runs on one storage server, its entry. Writes and
// truncations are appended to a spool (the operations of a journal,
// backend/journal.go) and indexed, so the session reads its own writes;
// nothing of the file changes until a commit (kXR_sync, the close). A
// commit is two-phase, the namespace deciding:
//
//  1. every current stripe gets its journal, durable beside it and not
//     yet applied (replicas: the session's operations as they are;
//     erasure-coded files: the frames of every row the session touched,
//     re-encoded from the row's new content, read-modify-write);
//     a stripe that cannot take it is reported stale;
//  2. the namespace records the file's next data version
//     (message.Updates.CommitUpdate) — the commit point;
//  3. the journals are rolled forward; one that cannot be is marked stale.
//
// A crash before 2 leaves journals the namespace never recorded (dropped
// when found); after 2, journals that roll forward when found (a read at
// the new version applies it first, storage.current). Each stripe is
// thus at the old version or the new one, and a read is served only from
// stripes at the version the namespace holds: written ranges are all-old
// or all-new, never a mix of replicas that disagree unnoticed.
//
// Two sessions of one file may run at once (from any clients): each
// commits what it wrote over the newest version (a commit the namespace
// refuses because another came first is prepared again from the newer
// version), so overlapping ranges are last-committer-wins and a reader
// sees a session's writes once it committed and the reader opened after
// (close-to-open, as NFS).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/erasure"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// Update is an update session of one committed file at this server.
type Update struct {
	s     *Server
	l     layout.Layout
	path  string
	store message.Updates

	mu       sync.Mutex
	cap      *capability.Capability // the session's, re-signed at each commit
	token    string
	baseSize int64 // size of the committed content
	cut      int64 // committed bytes below cut are still the file's
	size     int64
	trunc    int64 // size of the session's last truncation, -1 without one
	endAfter int64 // end of the furthest write after it (or of any write)
	low      int64 // offset of the lowest write since the last commit
	ext      []extent
	spool    *os.File
	buf      *bufio.Writer
	spoolLen int64
	spoolCRC uint32 // crc32c of the spool's spoolLen bytes
	changed  bool
	base     File // the committed content, opened on first read
	failed   error
	closed   bool
}

// castagnoli sums the spool (backend.SpooledOps).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// extent is a written range: n bytes at logical offset off, their data at
// spool offset at.
type extent struct{ off, n, at int64 }

// NewUpdate starts an update session for an update capability.
func (s *Server) NewUpdate(ctx context.Context, c *capability.Capability, token string) (*Update, error) {
	if !c.Update || !c.Write {
		return nil, kerr.New(kerr.Permission, "update", c.Path, "capability is not for an update")
	}
	ns, ok := s.cfg.Namespace.(message.Updates)
	if !ok {
		return nil, kerr.New(kerr.Unsupported, "update", c.Path, "this storage server's namespace does not take updates")
	}
	l, err := layout.Parse(c.Layout)
	if err != nil {
		return nil, err
	}
	if len(c.Targets) != l.Stripes() {
		return nil, kerr.New(kerr.Invalid, "update", c.Path, "capability targets do not match the layout")
	}
	if c.Fresh && c.DataVersion != 0 {
		return nil, kerr.New(kerr.Unsupported, "update", c.Path, "a file without stripes past data version 0")
	}
	for i, t := range c.Targets {
		if f := s.local(t.FsID); f != nil && !c.IsStale(i) {
			if _, err := f.updater(c.Path); err != nil {
				return nil, err
			}
		}
	}
	sp, err := os.CreateTemp("", "kaon-update-*")
	if err != nil {
		return nil, kerr.Wrap(kerr.IO, "update", c.Path, err)
	}
	os.Remove(sp.Name()) // unnamed: gone with the process
	return &Update{s: s, l: l, path: c.Path, store: ns, cap: c, token: token,
		baseSize: c.Size, cut: c.Size, size: c.Size, trunc: -1, low: math.MaxInt64, spool: sp, buf: bufio.NewWriterSize(sp, 1<<20)}, nil
}

// Size is the file's size with the session's changes.
func (u *Update) Size() int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.size
}

// DataVersion is the data version the session writes over (that of its
// last commit).
func (u *Update) DataVersion() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.cap.DataVersion
}

func (u *Update) usable() error {
	switch {
	case u.failed != nil:
		return u.failed
	case u.closed:
		return kerr.New(kerr.Invalid, "update", u.path, "file closed")
	}
	return nil
}

// WriteAt writes p at off.
func (u *Update) WriteAt(p []byte, off int64) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.usable(); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, kerr.New(kerr.Invalid, "write", u.path, "negative offset")
	}
	for done := 0; done < len(p); {
		n := min(len(p)-done, backend.MaxOpData)
		if err := u.spoolWrite(p[done:done+n], off+int64(done)); err != nil {
			u.failed = kerr.Wrap(kerr.IO, "write", u.path, err)
			return done, u.failed
		}
		done += n
	}
	return len(p), nil
}

// WriteFrom writes what r delivers from offset off on, in full 1 MiB
// pieces; only r's clean end (io.EOF) ends it without an error.
func (u *Update) WriteFrom(r io.Reader, off int64) (int64, error) {
	return copyFull(io.NewOffsetWriter(u, off), r)
}

func (u *Update) spoolWrite(p []byte, off int64) error {
	op := backend.EncodeWriteHeader(nil, off, len(p))
	if _, err := u.buf.Write(op); err != nil {
		return err
	}
	at := u.spoolLen + int64(len(op))
	if _, err := u.buf.Write(p); err != nil {
		return err
	}
	u.spoolCRC = crc32.Update(crc32.Update(u.spoolCRC, castagnoli, op), castagnoli, p)
	u.spoolLen = at + int64(len(p))
	u.insert(extent{off: off, n: int64(len(p)), at: at})
	end := off + int64(len(p))
	u.size = max(u.size, end)
	u.endAfter = max(u.endAfter, end)
	u.low = min(u.low, off)
	u.changed = true
	return nil
}

// insert adds e to the written ranges, over what it overlaps.
func (u *Update) insert(e extent) {
	end := e.off + e.n
	i := sort.Search(len(u.ext), func(i int) bool { return u.ext[i].off+u.ext[i].n > e.off })
	var keep []extent
	j := i
	for ; j < len(u.ext) && u.ext[j].off < end; j++ {
		x := u.ext[j]
		if x.off < e.off {
			keep = append(keep, extent{x.off, e.off - x.off, x.at})
		}
		if xe := x.off + x.n; xe > end {
			keep = append(keep, extent{end, xe - end, x.at + (end - x.off)})
		}
	}
	repl := append(keep, e)
	sort.Slice(repl, func(a, b int) bool { return repl[a].off < repl[b].off })
	u.ext = slices.Replace(u.ext, i, j, repl...)
}

// Truncate sets the file's size (cut, or extended with zeros).
func (u *Update) Truncate(size int64) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.usable(); err != nil {
		return err
	}
	if size < 0 {
		return kerr.New(kerr.Invalid, "truncate", u.path, "negative size")
	}
	op := backend.EncodeTruncate(nil, size)
	if _, err := u.buf.Write(op); err != nil {
		u.failed = kerr.Wrap(kerr.IO, "truncate", u.path, err)
		return u.failed
	}
	u.spoolCRC = crc32.Update(u.spoolCRC, castagnoli, op)
	u.spoolLen += 9
	u.cut = min(u.cut, size)
	var ext []extent
	for _, x := range u.ext {
		if x.off >= size {
			break
		}
		x.n = min(x.n, size-x.off)
		ext = append(ext, x)
	}
	u.ext = ext
	u.size, u.trunc, u.endAfter = size, size, 0
	u.changed = true
	return nil
}

// ReadAt reads the file as the session sees it: its writes over the
// committed content.
func (u *Update) ReadAt(p []byte, off int64) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.usable(); err != nil {
		return 0, err
	}
	return u.readLocked(context.Background(), p, off)
}

func (u *Update) readLocked(ctx context.Context, p []byte, off int64) (int, error) {
	if off >= u.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), u.size-off))
	q := p[:n]
	clear(q)
	if end := min(off+int64(n), u.cut, u.baseSize); end > off {
		if u.base == nil {
			rc := *u.cap
			rc.Write, rc.Size = false, u.baseSize
			f, err := u.s.Open(ctx, &rc, u.token, httpWait)
			if err != nil {
				return 0, err
			}
			u.base = f
		}
		if m, err := u.base.ReadAt(q[:end-off], off); err != nil && !(errors.Is(err, io.EOF) && int64(m) == end-off) {
			return 0, kerr.Wrap(kerr.IO, "read", u.path, err)
		}
	}
	if err := u.buf.Flush(); err != nil {
		return 0, kerr.Wrap(kerr.IO, "read", u.path, err)
	}
	i := sort.Search(len(u.ext), func(i int) bool { return u.ext[i].off+u.ext[i].n > off })
	for ; i < len(u.ext) && u.ext[i].off < off+int64(n); i++ {
		x := u.ext[i]
		from, to := max(x.off, off), min(x.off+x.n, off+int64(n))
		if _, err := u.spool.ReadAt(q[from-off:to-off], x.at+(from-x.off)); err != nil {
			return 0, kerr.Wrap(kerr.IO, "read", u.path, err)
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// httpWait is how long opening the committed content waits for memory.
const httpWait = 2 * time.Minute

// Sync commits what the session wrote so far: the file's next data
// version. The session goes on from it.
func (u *Update) Sync(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.usable(); err != nil {
		return err
	}
	return u.commitLocked(ctx)
}

// Commit commits what the session wrote and ends it.
func (u *Update) Commit(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return u.failed
	}
	err := u.failed
	if err == nil {
		err = u.commitLocked(ctx)
	}
	u.endLocked()
	return err
}

// Abort ends the session: nothing it wrote since its last commit is kept.
func (u *Update) Abort() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.closed {
		u.endLocked()
	}
}

func (u *Update) endLocked() {
	u.closed = true
	if u.base != nil {
		u.base.Close()
		u.base = nil
	}
	u.spool.Close()
}

// maxRebase bounds how often a commit is prepared again because other
// sessions committed first.
const maxRebase = 8

// errConcurrentCommit: another session's commit over the same version
// held a stripe's journal; concurrentWait bounds how long a commit waits
// for it (its prepare, namespace commit and apply) before giving up Busy.
var errConcurrentCommit = kerr.New(kerr.Busy, "commit", "", "another session's update of this file is being committed")

const concurrentWait = time.Minute

func (u *Update) commitLocked(ctx context.Context) error {
	if !u.changed {
		return nil
	}
	if err := u.buf.Flush(); err != nil {
		u.failed = kerr.Wrap(kerr.IO, "commit", u.path, err)
		return u.failed
	}
	waitUntil := time.Now().Add(concurrentWait)
	for try, waits := 0, 0; ; {
		v, err := u.commitOnce(ctx)
		if err == nil {
			u.committed(v)
			return nil
		}
		// Refused because another session committed first (Busy), or
		// failed reading rows that session changed meanwhile (an
		// erasure-coded file's stripes at its version): go on from the
		// file's version. Another commit still under way: wait for it.
		fv, verr := u.store.FileVersion(ctx, u.cap.Fid)
		if err == errConcurrentCommit && verr == nil && fv.DataVersion == u.cap.DataVersion && time.Now().Before(waitUntil) {
			waits++
			t := time.NewTimer(rand.N(time.Duration(min(waits, 7)) * 15 * time.Millisecond))
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return kerr.Wrap(kerr.Aborted, "commit", u.path, ctx.Err())
			}
		}
		if err == errConcurrentCommit {
			err = kerr.New(kerr.Busy, "commit", u.path, "another session's update of this file is being committed")
		}
		if try == maxRebase {
			return err
		}
		try++
		if verr != nil || fv.DataVersion == u.cap.DataVersion {
			return err
		}
		u.rebase(fv)
	}
}

// newSize is the file's size once the session's operations are applied
// to committed content of baseSize bytes.
func (u *Update) newSize() int64 {
	if u.trunc >= 0 {
		return max(u.trunc, u.endAfter)
	}
	return max(u.baseSize, u.endAfter)
}

// rebase makes the session go on from the file's version fv.
func (u *Update) rebase(fv message.FileVersion) {
	c := *u.cap
	c.DataVersion, c.Size, c.Stale, c.Fresh = fv.DataVersion, fv.Size, fv.Stale, len(fv.Locations) == 0 && c.Fresh
	u.cap, u.token = &c, u.s.cfg.Key.Sign(&c)
	if u.base != nil {
		u.base.Close()
		u.base = nil
	}
	if u.cut == u.baseSize {
		u.cut = fv.Size
	}
	u.baseSize = fv.Size
	u.size = u.newSize()
}

// committed makes the session go on from version v, its own commit.
func (u *Update) committed(v message.FileVersion) {
	c := *u.cap
	c.DataVersion, c.Size, c.Stale, c.Fresh = v.DataVersion, v.Size, v.Stale, false
	u.cap, u.token = &c, u.s.cfg.Key.Sign(&c)
	if u.base != nil {
		u.base.Close()
		u.base = nil
	}
	u.baseSize, u.cut, u.size, u.trunc, u.endAfter, u.low = v.Size, v.Size, v.Size, -1, 0, math.MaxInt64
	u.ext, u.spoolLen, u.spoolCRC, u.changed = nil, 0, 0, false
	err := u.spool.Truncate(0)
	if err == nil {
		_, err = u.spool.Seek(0, io.SeekStart)
	}
	if err != nil {
		u.failed = kerr.Wrap(kerr.IO, "commit", u.path, err) // committed; what follows cannot be
	}
	u.buf.Reset(u.spool)
}

// stripeJob is one stripe's part in a commit.
type stripeJob struct {
	idx      int
	f        *filesystem // local, or nil
	ops      func() io.Reader
	prepared bool
	applyNow bool // its journal is applied before the reply (PrepareStripe)
	err      error
}

func (u *Update) commitOnce(ctx context.Context) (message.FileVersion, error) {
	c := u.cap
	size := u.newSize()
	var jobs []*stripeJob
	for i, t := range c.Targets {
		if !c.IsStale(i) {
			jobs = append(jobs, &stripeJob{idx: i, f: u.s.local(t.FsID)})
		}
	}
	var cleanup func()
	if u.l.Kind == layout.EC {
		files, err := u.ecJournals(ctx, size)
		if err != nil {
			return message.FileVersion{}, err
		}
		cleanup = func() {
			for _, f := range files {
				f.Close()
			}
		}
		for _, j := range jobs {
			f := files[j.idx]
			j.ops = func() io.Reader { st, _ := f.Stat(); return io.NewSectionReader(f, 0, st.Size()) }
		}
	} else {
		for _, j := range jobs {
			j.ops = func() io.Reader { return &backend.SpooledOps{F: u.spool, N: u.spoolLen, CRC: u.spoolCRC} }
		}
	}
	if cleanup != nil {
		defer cleanup()
	}
	if c.Fresh {
		u.createStripes(ctx, jobs)
	}
	meta := backend.Meta{Fid: c.Fid, Layout: c.Layout, Size: size, Path: c.Path, Version: c.DataVersion + 1}
	// An append (every write at or past the committed end, no
	// truncation): a replica's store may write it straight into the
	// stripe past its end and journal the new length alone.
	extends := u.l.Kind != layout.EC && u.trunc < 0 && u.low >= u.baseSize
	tag := rand.Uint64() | 1 // never 0: a journal without a tag is an older server's
	u.eachStripe(jobs, func(j *stripeJob) error {
		if j.err != nil {
			return j.err
		}
		m := meta
		m.Stripe = j.idx
		h := backend.JournalHead{From: c.DataVersion, Meta: m, Extends: extends, Tag: tag}
		if j.f != nil {
			if err := j.f.writable(); err != nil {
				return err
			}
			if err := u.s.current(j.f, c, j.idx); err != nil {
				return err
			}
			j.applyNow = j.f.noSums.Load()
			return j.f.prepare(c.Fid, h, j.ops())
		}
		p, err := u.s.peers("update", c.Path)
		if err != nil {
			return err
		}
		j.applyNow, err = p.PrepareStripe(context.WithoutCancel(ctx), c.Targets[j.idx].Addr, c.Fid, j.idx, u.token, h, j.ops())
		return err
	})
	if slices.ContainsFunc(jobs, func(j *stripeJob) bool { return kerr.Is(j.err, kerr.Busy) }) {
		// Another session's commit over this version holds a stripe's
		// journal: this attempt is withdrawn whole (a stripe is not made
		// stale for it) and made again once that commit is through.
		u.discard(ctx, jobs)
		return message.FileVersion{}, errConcurrentCommit
	}
	stale := slices.Clone(c.Stale)
	var reasons []string
	for _, j := range jobs {
		j.prepared = j.err == nil
		if !j.prepared {
			stale = append(stale, j.idx)
			reasons = append(reasons, fmt.Sprintf("stripe %d: %v", j.idx, j.err))
		}
	}
	if len(reasons) > 0 {
		u.s.log.Warn("update: stripes missed it and will be stale", "path", c.Path, "fid", c.Fid, "why", reasons)
	}
	locs := make([]uint32, len(c.Targets))
	for i, t := range c.Targets {
		locs[i] = t.FsID
	}
	res, err := u.store.CommitUpdate(ctx, message.UpdateCommit{Fid: c.Fid, Base: c.DataVersion, Tag: tag, Size: size, Locations: locs, Stale: stale})
	if err != nil {
		// Refused, or not answered (the namespace server crashed or
		// failed over with the commit applied or not): the file's version
		// says whether this commit went through. Until that is known the
		// journals stay: dropping those of a commit that went through
		// would leave no stripe at the file's version.
		fv, known := u.outcome(ctx, c.Fid)
		switch {
		case known && fv.DataVersion == meta.Version && fv.Tag == tag:
			res, err = fv, nil
		case !known:
			if ke, ok := err.(*kerr.Error); ok {
				ke.Path = c.Path
			}
			return message.FileVersion{}, kerr.Wrap(kerr.KindOf(err), "commit", c.Path,
				fmt.Errorf("the namespace server did not answer, and whether the update committed is not known: %w", err))
		}
	}
	if err != nil {
		u.discard(ctx, jobs)
		if ke, ok := err.(*kerr.Error); ok {
			ke.Path = c.Path
		}
		return message.FileVersion{}, err
	}
	// The commit point is passed: every prepared stripe holds its journal
	// durably and the namespace recorded the version, so every open of a
	// stripe through a storage server rolls its journal forward first
	// (current) and a crash from here on leaves the new version. The
	// journals are applied after the reply (random 4 KiB writes 0.39 ->
	// 0.78 of xrootd, DESIGN-NOTES); a reader granted the version before
	// is refused as stale meanwhile (current), and kaon mount's direct
	// path reads a stripe only at the version it knows. Unless a stripe
	// may be read through a passthrough descriptor (applyNow), which
	// nobody can revoke and which saw the new bytes once the commit
	// returned when every apply came before the reply: then they are
	// applied first.
	token := u.token
	ctx = context.WithoutCancel(ctx)
	u.s.applying.Add(1)
	run := func() {
		defer u.s.applying.Done()
		if hook := beforeApply.Load(); hook != nil && !(*hook)() {
			return
		}
		u.apply(ctx, c, token, jobs, meta.Version)
	}
	if !slices.ContainsFunc(jobs, func(j *stripeJob) bool { return j.prepared && j.applyNow }) {
		go run()
	} else {
		run()
	}
	return res, nil
}

// beforeApply, when set (tests), runs before a commit's journals are
// applied (after its reply unless a stripe's applyNow); false leaves them
// unapplied (as a crash of the entry server there would). Atomic: an earlier test's applies may
// still run when a test sets it.
var beforeApply atomic.Pointer[func() bool]

// apply rolls the journals of a commit to version v, which the
// namespace recorded, forward on the stripes that prepared them (jobs);
// c and token are the session's at its base version. A stripe that
// cannot take it is marked stale.
func (u *Update) apply(ctx context.Context, c *capability.Capability, token string, jobs []*stripeJob, v uint64) {
	u.eachStripe(jobs, func(j *stripeJob) error {
		if !j.prepared {
			return nil
		}
		var err error
		if j.f != nil {
			err = j.f.applyUpdate(c.Fid, c.DataVersion)
		} else if p, perr := u.s.peers("update", c.Path); perr != nil {
			err = perr
		} else {
			err = p.ApplyStripe(ctx, c.Targets[j.idx].Addr, c.Fid, j.idx, token)
		}
		switch {
		case err == nil:
		case j.f == nil && kerr.Is(err, kerr.Unavailable):
			// The peer is away (crashed, restarting, cut off): its journal
			// is durable there and takes the stripe to this version, which
			// every open of it there rolls forward first (storage.current)
			// — not stale. Marking it stale would lose it for good: an
			// erasure-coded file whose server held more than M stripes
			// would be left with fewer than K current ones.
			u.s.log.Warn("update: a stripe's server did not answer the apply; its journal rolls forward when the stripe is next opened",
				"path", c.Path, "fid", c.Fid, "stripe", j.idx, "err", err)
		default:
			u.s.log.Warn("update: a stripe could not take the committed update; marking it stale", "path", c.Path,
				"fid", c.Fid, "stripe", j.idx, "err", err)
			if merr := u.store.MarkStale(ctx, c.Fid, v, j.idx); merr != nil {
				u.s.log.Warn("update: a stripe that missed a committed update could not be marked stale; fsck will find it",
					"path", c.Path, "fid", c.Fid, "stripe", j.idx, "err", merr)
			}
		}
		return nil
	})
}

// discard drops the journals this attempt prepared.
func (u *Update) discard(ctx context.Context, jobs []*stripeJob) {
	c := u.cap
	u.eachStripe(jobs, func(j *stripeJob) error {
		if j.err != nil {
			return nil
		}
		if j.f != nil {
			return j.f.store.(backend.Updater).Discard(c.Fid)
		}
		p, err := u.s.peers("update", c.Path)
		if err != nil {
			return err
		}
		return p.DiscardStripe(context.WithoutCancel(ctx), c.Targets[j.idx].Addr, c.Fid, j.idx, u.token)
	})
}

// outcomeWait bounds how long a commit whose answer was lost asks the
// namespace server (restarting, failing over) what became of it.
const outcomeWait = 30 * time.Second

// outcome asks the file's version after a commit failed; known is false
// when the namespace server did not answer within outcomeWait.
func (u *Update) outcome(ctx context.Context, fid uint64) (fv message.FileVersion, known bool) {
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(outcomeWait)
	for {
		fv, err := u.store.FileVersion(ctx, fid)
		switch {
		case err == nil:
			return fv, true
		case !kerr.Is(err, kerr.Busy) && !kerr.Is(err, kerr.Unavailable) && !kerr.Is(err, kerr.Down) && !kerr.Is(err, kerr.Aborted):
			return message.FileVersion{}, true // answered: the file is gone (or never was)
		case time.Now().After(deadline):
			return message.FileVersion{}, false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// eachStripe runs fn for every job at once and records its error.
func (u *Update) eachStripe(jobs []*stripeJob, fn func(j *stripeJob) error) {
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(j); err != nil && j.err == nil {
				j.err = err
			}
		}()
	}
	wg.Wait()
}

// createStripes makes the empty stripes of a file that has none (Fresh).
func (u *Update) createStripes(ctx context.Context, jobs []*stripeJob) {
	c := u.cap
	u.eachStripe(jobs, func(j *stripeJob) error {
		var w backend.Writer
		var err error
		if j.f != nil {
			w, err = j.f.create(c.Fid, backend.CreateOptions{})
		} else if p, perr := u.s.peers("update", c.Path); perr != nil {
			err = perr
		} else {
			w, err = p.CreateStripe(context.WithoutCancel(ctx), c.Targets[j.idx].Addr, c.Fid, j.idx, u.token)
		}
		if err != nil {
			return err
		}
		if err := w.Finish(backend.Meta{Fid: c.Fid, Stripe: j.idx, Layout: c.Layout, Path: c.Path}); err != nil && !kerr.Is(err, kerr.Exists) {
			return err
		}
		return nil
	})
}

// ecJournals builds the journal of every stripe of an erasure-coded
// file: each row the session touched (written, or between the committed
// content's end and the new end) read as the session sees it, encoded
// again and written whole into every stripe's frame; then each stripe
// cut or extended to its new length.
func (u *Update) ecJournals(ctx context.Context, size int64) ([]*os.File, error) {
	el := ecLayout(u.l)
	rs, fs := el.RowSize(), el.FrameSize()
	rows := map[int64]bool{}
	for _, x := range u.ext {
		for r := x.off / rs; r <= (x.off+x.n-1)/rs; r++ {
			rows[r] = true
		}
	}
	if z := min(u.cut, u.baseSize); z < size {
		for r := z / rs; r <= (size-1)/rs; r++ {
			rows[r] = true
		}
	}
	order := make([]int64, 0, len(rows))
	for r := range rows {
		if r < el.Rows(size) {
			order = append(order, r)
		}
	}
	slices.Sort(order)
	files := make([]*os.File, el.Shards())
	bufs := make([]*bufio.Writer, el.Shards())
	fail := func(err error) ([]*os.File, error) {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
		return nil, kerr.Wrap(kerr.KindOf(err), "commit", u.path, err)
	}
	for i := range files {
		f, err := os.CreateTemp("", "kaon-journal-*")
		if err != nil {
			return fail(err)
		}
		os.Remove(f.Name())
		files[i], bufs[i] = f, bufio.NewWriterSize(f, 256<<10)
	}
	row := make([]byte, rs)
	frames := make([][]byte, el.Shards())
	for i := range frames {
		frames[i] = make([]byte, fs)
	}
	saved := u.size
	u.size = size // rows read as the file will be
	defer func() { u.size = saved }()
	var op []byte
	for _, r := range order {
		n, err := u.readLocked(ctx, row, r*rs)
		if err != nil && !errors.Is(err, io.EOF) {
			return fail(err)
		}
		clear(row[n:])
		if err := erasure.EncodeRow(el, row, frames); err != nil {
			return fail(err)
		}
		for i, b := range bufs {
			op = backend.EncodeWrite(op[:0], r*fs, frames[i])
			if _, err := b.Write(op); err != nil {
				return fail(err)
			}
		}
	}
	for _, b := range bufs {
		if _, err := b.Write(backend.EncodeTruncate(nil, el.ShardSize(size))); err != nil {
			return fail(err)
		}
		if err := b.Flush(); err != nil {
			return fail(err)
		}
	}
	return files, nil
}

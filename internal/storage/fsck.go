package storage

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// fsck on a storage server: every filesystem is scanned (scan.go)
// every scan_disk_interval, or when the namespace asks (fsck run), and
// what the scans find is sent to the namespace server in batches; every
// scaninterval a scan re-reads the data (scrub). Repairs the namespace
// server asks for are run here, on the filesystems holding the stripes
// to rebuild.

// scanState is one filesystem's scan schedule.
type scanState struct {
	mu        sync.Mutex
	set       message.FsckSettings // resolved; zero until assigned
	running   bool
	first     time.Time // the first scan after start (spread over the interval)
	lastDisk  time.Time // start of the last scan that completed
	lastScrub time.Time // start of the last scrub that completed
	lastRun   int64     // the last requested scan started
	retry     time.Time // a failed scan is tried again from then
}

// ScanStats are a filesystem's scan counters since the server started.
type ScanStats struct {
	FsID     uint32
	Scans    int64 // completed
	Failed   int64
	Stripes  int64 // walked
	Bytes    int64 // re-read by scrubs
	Running  bool
	LastDone time.Time
}

func (f *filesystem) setFsck(set *message.FsckSettings) {
	if set == nil {
		return
	}
	r := set.Resolved()
	f.scan.mu.Lock()
	if f.scan.set.DiskInterval == 0 { // first assignment: the first scan comes at a random point of the interval
		f.scan.first = time.Now().Add(time.Duration(rand.Int64N(int64(r.DiskInterval))))
	}
	f.scan.set = r
	f.scan.mu.Unlock()
}

// due says whether f should be scanned now, asked for by request run and
// whether the scan re-reads the data.
func (f *filesystem) due(now, started time.Time) (ok bool, run int64, scrub bool) {
	st := &f.scan
	st.mu.Lock()
	defer st.mu.Unlock()
	set := st.set
	if set.DiskInterval == 0 || st.running || now.Before(st.retry) {
		return false, 0, false
	}
	if set.ScrubInterval > 0 {
		last := st.lastScrub
		if last.IsZero() {
			last = started
		}
		scrub = now.Sub(last) >= set.ScrubInterval
	}
	switch {
	case set.Run != 0 && set.Run != st.lastRun:
		run, scrub = set.Run, scrub || set.RunScrub
	case st.lastDisk.IsZero() && now.Before(st.first):
		return false, 0, false
	case !st.lastDisk.IsZero() && now.Sub(st.lastDisk) < set.DiskInterval:
		return false, 0, false
	}
	st.running, st.lastRun = true, max(st.lastRun, run)
	return true, run, scrub
}

// fsckLoop starts the scans that are due until ctx ends.
func (s *Server) fsckLoop(ctx context.Context, ns message.Fsck) {
	started := time.Now()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.RLock()
		var fss []*filesystem
		for _, f := range s.fs {
			if f.offlineReason() == "" && f.configStatus() != "off" {
				fss = append(fss, f)
			}
		}
		s.mu.RUnlock()
		now := time.Now()
		for _, f := range fss {
			if ok, run, scrub := f.due(now, started); ok {
				go s.scan(ctx, ns, f, run, scrub)
			}
		}
	}
}

// scan walks f once and reports it to the namespace server.
func (s *Server) scan(ctx context.Context, ns message.Fsck, f *filesystem, run int64, scrub bool) {
	start := time.Now()
	f.scan.mu.Lock()
	set := f.scan.set
	f.scan.mu.Unlock()
	msg := message.FsckScan{Node: s.cfg.Node, FsID: f.id, Start: start, Run: run, Scrub: scrub, Total: f.files.Load()}
	s.log.Info("fsck scan started", "fsid", f.id, "path", f.root, "scrub", scrub, "stripes", msg.Total)
	o := scanOptions{Rate: set.NSRate, Scrub: scrub, ScrubRate: set.ScrubRate, Skip: func(fid uint64) bool { return fid == ProbeFid },
		AddSums: f.configStatus() == "rw", Bad: &f.bitrot.scrubBad}
	err := walkStore(ctx, f.store, &o, func(batch []message.FsckStripe, seen, read int64) error {
		m := msg
		m.Stripes, m.Seen, m.Bytes = batch, seen, read
		f.scanned.Store(seen)
		f.scrubbed.Store(read)
		if err := ns.FsckScan(ctx, m); err != nil {
			return fmt.Errorf("reporting to the namespace server: %w", err)
		}
		msg.Seen, msg.Bytes = seen, read
		return nil
	})
	if err == nil {
		msg.Done = true
		err = ns.FsckScan(ctx, msg)
	} else if ctx.Err() == nil {
		msg.Failed = reason(err)
		_ = ns.FsckScan(ctx, msg)
	}
	f.scan.mu.Lock()
	f.scan.running = false
	if err == nil {
		f.scan.lastDisk = start
		if scrub {
			f.scan.lastScrub = start
		}
	} else {
		f.scan.retry = time.Now().Add(time.Minute)
	}
	f.scan.mu.Unlock()
	f.stripesWalked.Add(msg.Seen)
	f.bytesScrubbed.Add(msg.Bytes)
	f.scanned.Store(0)
	f.scrubbed.Store(0)
	if err != nil {
		f.scansFailed.Add(1)
		if ctx.Err() == nil {
			s.log.Warn("fsck scan failed", "fsid", f.id, "path", f.root, "err", err)
		}
		return
	}
	f.scansDone.Add(1)
	f.lastScanDone.Store(time.Now().UnixNano())
	s.log.Info("fsck scan done", "fsid", f.id, "path", f.root, "scrub", scrub, "stripes", msg.Seen, "bytes", msg.Bytes,
		"block_sums_added", o.Added, "took", time.Since(start).Round(time.Millisecond))
}

// ScanStats returns the scan counters of the filesystems this server holds.
func (s *Server) ScanStats() []ScanStats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]ScanStats, 0, len(s.fs))
	for id, f := range s.fs {
		f.scan.mu.Lock()
		running := f.scan.running
		f.scan.mu.Unlock()
		st := ScanStats{FsID: id, Scans: f.scansDone.Load(), Failed: f.scansFailed.Load(), Running: running,
			Stripes: f.stripesWalked.Load() + f.scanned.Load(), Bytes: f.bytesScrubbed.Load() + f.scrubbed.Load()}
		if t := f.lastScanDone.Load(); t != 0 {
			st.LastDone = time.Unix(0, t)
		}
		out = append(out, st)
	}
	return out
}

// Repair rebuilds stripes job.Rebuild of the file job.Token names (a read
// capability) on this server's filesystems, from the file's other
// stripes wherever they are (rebuild.go).
func (s *Server) Repair(ctx context.Context, job message.RepairJob) error {
	c, err := s.Verify(job.Token, capability.Access{Fid: job.Fid})
	if err != nil {
		return err
	}
	l, err := layout.Parse(c.Layout)
	if err != nil {
		return err
	}
	f := &stripedFile{Fid: c.Fid, Path: c.Path, Layout: c.Layout, Size: c.Size, Checksums: c.Sums, Version: c.DataVersion}
	for _, t := range c.Targets {
		f.Locations = append(f.Locations, t.FsID)
	}
	for _, i := range job.Rebuild {
		if i < 0 || i >= len(c.Targets) || s.local(c.Targets[i].FsID) == nil {
			return kerr.New(kerr.Invalid, "repair", c.Path, fmt.Sprintf("stripe %d is not on a filesystem of this storage server", i))
		}
		if job.ReadDamage {
			if err := s.checkRebuild(c, i); err != nil {
				return err
			}
		}
	}
	// A stripe behind the file's version whose journal the namespace
	// recorded is rolled forward, not rebuilt (its update's apply never
	// ran: the entry server crashed after the commit). Not so for damage
	// a read found: those bytes are bad whatever their version.
	rebuild := job.Rebuild
	if !job.ReadDamage {
		rebuild = slices.DeleteFunc(slices.Clone(rebuild), func(i int) bool { return s.rolledForward(s.local(c.Targets[i].FsID), c, i) })
	}
	dropObsolete := func() {
		for _, i := range job.Rebuild {
			if fs := s.local(c.Targets[i].FsID); fs != nil {
				s.dropObsoleteJournal(fs, c)
			}
		}
	}
	if len(rebuild) == 0 {
		dropObsolete()
		s.log.Info("fsck repaired by rolling update journals forward", "path", c.Path, "fid", c.Fid, "stripes", job.Rebuild)
		return nil
	}
	mem := int64(transfer.PieceSize * 4)
	if l.Kind == layout.EC {
		mem = 2 * int64(l.Stripes()) * int64(l.Unit+4)
	}
	release, err := s.budget.acquire(ctx, mem, internalAdmitWait, "repair", c.Path)
	if err != nil {
		return err
	}
	defer release()
	t0 := time.Now()
	err = rebuildStripes(ctx, f, rebuild, &repairStripes{s: s, c: c, token: job.Token})
	failed, done := "fsck repair failed", "fsck repaired"
	if job.ReadDamage {
		failed, done = "rebuild of a stripe a read found damaged failed", "rebuilt a stripe a read found damaged"
		for _, i := range job.Rebuild {
			fs := s.local(c.Targets[i].FsID)
			if fs == nil {
				continue // released meanwhile
			}
			fs.bitrot.readBad.Add(1)
			if err != nil {
				fs.bitrot.failed.Add(1)
			} else {
				fs.bitrot.repaired.Add(1)
			}
		}
	}
	if err != nil {
		s.log.Warn(failed, "path", c.Path, "fid", c.Fid, "stripes", job.Rebuild, "err", err)
		return err
	}
	dropObsolete()
	s.log.Info(done, "path", c.Path, "fid", c.Fid, "stripes", job.Rebuild, "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// rolledForward reports whether stripe idx on f is a journal's business:
// behind the file's data version and taken there by the journal the
// namespace recorded, or at the version with a journal beside it (an
// obsolete one, which the repair drops). A stripe at the version with no
// journal is not: what fsck found wrong with it (bytes, size, checksums,
// index) is damage a rebuild mends — as is damage beside an obsolete
// journal, found again by the next scan once the journal is gone.
func (s *Server) rolledForward(f *filesystem, c *capability.Capability, idx int) bool {
	m, err := f.store.ReadMeta(c.Fid)
	if err != nil {
		return false
	}
	if m.Version >= c.DataVersion {
		u, ok := f.store.(backend.Updater)
		if !ok {
			return false
		}
		_, err := u.Prepared(c.Fid)
		return err == nil && m.Version == c.DataVersion
	}
	return s.current(f, c, idx) == nil
}

// repairStripes are a file's stripes as a repair reaches them: local ones
// through their store, others through the peers with the capability.
type repairStripes struct {
	s     *Server
	c     *capability.Capability
	token string
}

var _ stripeSet = (*repairStripes)(nil)

func (r *repairStripes) Open(ctx context.Context, i int) (io.ReaderAt, func(), error) {
	t := r.c.Targets[i]
	if f := r.s.local(t.FsID); f != nil {
		rd, err := r.s.openLocal(f, r.c, r.token, i)
		if err != nil {
			return nil, nil, err
		}
		return rd, func() { rd.Close() }, nil
	}
	p, err := r.s.peers("repair", r.c.Path)
	if err != nil {
		return nil, nil, err
	}
	// Read through in one streamed request (the decoder and the mover
	// read a stripe from its start to its end).
	st, err := openPeerStream(ctx, p, t.Addr, r.c.Fid, i, r.token)
	if err != nil {
		return nil, nil, fmt.Errorf("fs %d on %s: %w", t.FsID, t.Addr, err)
	}
	return st, func() { st.Close() }, nil
}

func (r *repairStripes) Replace(_ context.Context, i int) (backend.Writer, error) {
	f := r.s.local(r.c.Targets[i].FsID)
	if f == nil {
		return nil, kerr.New(kerr.Invalid, "repair", r.c.Path, fmt.Sprintf("stripe %d is on another storage server", i))
	}
	if err := f.writable(); err != nil {
		return nil, err
	}
	if err := f.store.Remove(r.c.Fid); err != nil && !kerr.Is(err, kerr.NotFound) {
		return nil, err
	}
	o := framed(r.c.Layout)
	o.Overlap = false
	return f.create(r.c.Fid, o)
}

package movement

// Drains: `fs config ID configstatus=drain` moves every stripe and
// replica off the filesystem to others of its group. The intent is the
// filesystem's record (configstatus drain, drain "draining"), so a drain
// resumes after a restart; what is left is always found again by
// scanning the namespace, the one truth about where stripes are. A pass
// moves every stripe found (drain.parallel at once, drain.rate shared
// among them); stripes that could not move are retried in the next pass,
// after a pause that grows while passes make no progress. The drain ends
// when a scan finds nothing left and no move from the filesystem is in
// flight: the record says "drained". It holds nothing of any file then
// (leftOn): no upload placed on it is pending and the stripes moved away
// are deleted, which their storage server acknowledged.
//
// A rebuild is the drain of a lost filesystem (configstatus lost, set by
// an operator or by the service once it was unreadable for longer than
// the grace, declareLost): every stripe it held is recreated on the
// others of its group, from the file's surviving replicas or by EC
// reconstruction (the storage server is told which stripes not to read),
// the files with the fewest surviving stripes beyond what they need
// first (rank). It ends "empty" once no file has a stripe on it and no
// upload placed on it is pending, without waiting for its storage server
// to delete the old stripes (a dead disk never would; they stay queued
// for deletion in case it comes back). Its settings are rebuild.rate
// (default: giving way to client streams) and rebuild.parallel.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// DrainProgress is where the drain or the rebuild of one filesystem
// stands.
type DrainProgress struct {
	FsID   uint32
	Kind   string // "drain" or "rebuild" (of a lost filesystem)
	Status string // DrainDraining or DrainDrained; DrainRebuilding or DrainEmpty
	// Phase says what the drain does now: "scanning", "moving",
	// "waiting to retry", "waiting for ..." what is still on the
	// filesystem besides registered stripes (leftOn), "done".
	Phase      string
	Started    time.Time
	FilesLeft  int64 // stripes still on the filesystem (last scan, less those moved since)
	BytesLeft  int64
	FilesMoved int64 // since the drain started in this process
	BytesMoved int64
	Rate       float64       // bytes per second over the last minute
	ETA        time.Duration // BytesLeft at Rate; 0 when unknown
	InFlight   int
	Parallel   int   // stripes moved at once
	RateLimit  int64 // bytes per second cap (0: none)
	Failures   []MoveFailure
	Failed     int64 // failures counted since start (retries included)
	// A rebuild's: why and when the filesystem was declared lost; its
	// files at risk as the last scan found them, less those rebuilt
	// since (FileCount of the stripes: unreadable, one failure from
	// loss, degraded); since when none of its stripes is one failure
	// from loss (zero: not yet, or none ever was).
	LostWhy string
	LostAt  time.Time
	Risk    RiskCounts
	SafeAt  time.Time
}

// drainJob drains one filesystem, or rebuilds a lost one.
type drainJob struct {
	job
	id      uint32
	lost    bool // a rebuild
	done    chan struct{}
	started time.Time

	filesLeft int64 // under job.mu
	bytesLeft int64
	risk      RiskCounts
	critical  bool // stripes one failure from loss were found in this run
	safeAt    time.Time
}

func (j *drainJob) ended() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

func (m *Service) startDrain(ctx context.Context, id uint32) *drainJob {
	ctx, cancel := context.WithCancel(ctx)
	now := time.Now()
	f, _ := m.reg.Filesystem(id)
	lost := f.ConfigStatus == "lost"
	kind := "drain"
	if lost {
		kind = "rebuild"
	}
	j := &drainJob{job: newJob(kind, "scanning", cancel, now), id: id, lost: lost, done: make(chan struct{}), started: now}
	if lost {
		m.log.Warn("rebuild started: recreating every stripe of the lost filesystem on the others of its group", "fsid", id,
			"group", f.Group, "why", f.LostWhy, "lost_at", f.LostAt.Format(time.RFC3339))
	} else {
		m.log.Info("drain started", "fsid", id)
	}
	go func() {
		defer close(j.done)
		m.runDrain(ctx, j)
	}()
	return j
}

// drainSettings are the filesystem's drain.parallel and drain.rate, or
// for a rebuild its rebuild.parallel and rebuild.rate, and the pace of
// each move.
func (m *Service) drainSettings(id uint32, lost bool) (parallel int, p pace, group string) {
	f, _ := m.reg.Filesystem(id)
	if !lost {
		parallel = cmp.Or(f.DrainParallel, DefaultDrainParallel)
		return parallel, pace{rate: f.DrainRate / int64(parallel)}, f.Group
	}
	parallel = cmp.Or(f.RebuildParallel, DefaultRebuildParallel)
	switch {
	case f.RebuildRate == 0:
		return parallel, pace{yield: true}, f.Group
	case f.RebuildRate > 0:
		return parallel, pace{rate: f.RebuildRate / int64(parallel)}, f.Group
	}
	return parallel, pace{}, f.Group
}

// stripe is one stripe found on a filesystem; margin is how many of its
// file's stripes beyond those it needs are readable (rank).
type stripe struct {
	f       *namespace.Inode
	idx     int
	bytes   int64
	margin  int
	missing int // stripes of its file that cannot be read
}

// stripesOn scans the namespace for the stripes on fs id.
func (m *Service) stripesOn(id uint32) ([]stripe, error) {
	var out []stripe
	err := m.eachFile(func(f *namespace.Inode) {
		for i, loc := range f.Locations {
			if loc == id {
				out = append(out, stripe{f: f, idx: i, bytes: stripeBytes(f)})
			}
		}
	})
	return out, err
}

// eachFile calls fn with every committed file (recycled ones included),
// read in batches (namespace.ScanFiles); fn runs outside the namespace's
// lock, so it may call the namespace. A file changed during the scan may
// be seen before or after the change.
func (m *Service) eachFile(fn func(f *namespace.Inode)) error {
	var from []byte
	for {
		var batch []*namespace.Inode
		next, err := m.ns.ScanFiles(from, 1000, func(f *namespace.Inode) { batch = append(batch, f) })
		if err != nil {
			return err
		}
		for _, f := range batch {
			fn(f)
		}
		if next == nil {
			return nil
		}
		from = next
	}
}

// movesFrom counts the moves in flight off fs id.
func (m *Service) movesFrom(id uint32) (int, error) {
	ms, err := m.ns.PendingMoves()
	n := 0
	for _, mv := range ms {
		if mv.From == id {
			n++
		}
	}
	return n, err
}

func (m *Service) runDrain(ctx context.Context, j *drainJob) {
	pause := 2 * time.Second
	for ctx.Err() == nil {
		j.setPhase("scanning")
		items, err := m.stripesOn(j.id)
		if err != nil {
			m.log.Error(j.kind+": cannot scan the namespace", "fsid", j.id, "err", err)
			sleepCtx(ctx, pause)
			continue
		}
		items, stuck, risk := rank(items, m.reg.List())
		var bytes int64
		for _, it := range items {
			bytes += it.bytes
		}
		for _, it := range stuck {
			bytes += it.bytes
		}
		j.mu.Lock()
		j.filesLeft, j.bytesLeft, j.risk = int64(len(items)+len(stuck)), bytes, risk
		j.critical = j.critical || risk.Critical.Files > 0
		j.mu.Unlock()
		for _, it := range stuck {
			m.failedOne(&j.job, j.id, it.f.ID, it.idx, fmt.Sprintf("no readable copy: %s", unrecoverable(it)))
		}
		if len(items) == 0 && len(stuck) > 0 {
			j.setPhase(fmt.Sprintf("%d stripe(s) cannot be moved: their files have too few readable stripes (failures list them); bring their filesystems back or remove the files", len(stuck)))
			sleepCtx(ctx, pause)
			pause = min(2*pause, time.Minute)
			continue
		}
		if len(items) == 0 {
			if n, err := m.movesFrom(j.id); err != nil || n > 0 {
				sleepCtx(ctx, time.Second) // moves of another job (a balancer) end first
				continue
			}
			if why, err := m.leftOn(j.id, j.lost); err != nil || why != "" {
				if err != nil {
					m.log.Error(j.kind+": cannot read what is left on the filesystem", "fsid", j.id, "err", err)
					why = "scanning"
				}
				j.setPhase(why)
				sleepCtx(ctx, time.Second)
				continue
			}
			if m.finishDrain(j) {
				return
			}
			sleepCtx(ctx, pause)
			continue
		}
		j.setPhase("moving")
		if m.drainPass(ctx, j, items) && len(stuck) == 0 {
			pause = 2 * time.Second
			continue
		}
		if ctx.Err() != nil {
			break
		}
		j.setPhase("waiting to retry")
		sleepCtx(ctx, pause)
		pause = min(2*pause, time.Minute)
	}
}

// rank orders the stripes found on a filesystem by the risk their files
// run, as Ceph's recovery does: the files with the fewest readable
// stripes beyond what they need first (an ec:4+2 file missing two
// stripes before one missing one, a replica:2 file with one readable
// copy before a replica:3 file with two). Stripes whose files have fewer
// readable stripes than they need cannot be moved now (stuck). risk
// counts the files by class. fss is the registry's list, by id.
func rank(items []stripe, fss []fleet.FsState) (movable, stuck []stripe, risk RiskCounts) {
	readable := readableSet(fss)
	for _, it := range items {
		it.margin, it.missing = margin(it.f, readable)
		risk.add(it.margin, it.missing, it.f.Size)
		if it.margin < 0 {
			stuck = append(stuck, it)
		} else {
			movable = append(movable, it)
		}
	}
	sort.SliceStable(movable, func(a, b int) bool { return movable[a].margin < movable[b].margin })
	return movable, stuck, risk
}

// unrecoverable says why stripe it cannot be moved now.
func unrecoverable(it stripe) string {
	l, _ := layout.Parse(it.f.Layout)
	if l.Kind == layout.EC {
		return fmt.Sprintf("%d of its %d stripes are readable, layout %s needs %d", l.K+it.margin, len(it.f.Locations), it.f.Layout, l.K)
	}
	if len(it.f.Locations) == 1 {
		return "its only copy is on this filesystem"
	}
	return fmt.Sprintf("none of its %d copies is readable", len(it.f.Locations))
}

// leftOn says what, besides registered stripes, keeps fs id from being
// drained ("" when nothing does): an upload placed there before the drain
// may still commit a stripe on it, and the stripes moved away stay on its
// disk until their deletion is due (reads granted before a move finish
// first) and its storage server acknowledges it. A drained filesystem
// holds nothing of any file: its disk can be pulled.
//
// A lost filesystem (lost) waits only for the uploads: the stripes moved
// off it stay queued for deletion, for the day it comes back.
func (m *Service) leftOn(id uint32, lost bool) (string, error) {
	l, err := m.ns.LeftOn(id)
	switch {
	case err != nil:
		return "", err
	case l.Pending > 0 && lost:
		return fmt.Sprintf("waiting for %d upload(s) placed on it before it was lost to end", l.Pending), nil
	case l.Pending > 0:
		return fmt.Sprintf("waiting for %d upload(s) placed on it before the drain to end", l.Pending), nil
	case l.Queued > 0 && !lost:
		why := fmt.Sprintf("waiting for its storage server to delete %d stripe(s) moved away", l.Queued)
		if d := l.Due.Sub(m.now()); d > 0 {
			why += fmt.Sprintf(" (due in %s: reads granted before the moves finish first)", d.Round(time.Second))
		}
		if _, ok := m.reg.Readable(id); !ok {
			why += fmt.Sprintf("; it cannot be read now: `fs config %d configstatus=lost` ends the drain without them", id)
		}
		return why, nil
	}
	return "", nil
}

// finishDrain records that fs id is drained, if it is still in drain.
func (m *Service) finishDrain(j *drainJob) bool {
	draining, err := m.reg.MarkDrained(j.id)
	if err != nil {
		m.log.Error("drain: cannot record the end", "fsid", j.id, "err", err)
		return false
	}
	if !draining {
		return true // changed meanwhile: nothing to record
	}
	j.mu.Lock()
	j.phase, j.filesLeft, j.bytesLeft, j.risk = "done", 0, 0, RiskCounts{}
	moved, bytes := j.moved, j.bytes
	j.mu.Unlock()
	if j.lost {
		m.log.Warn("rebuild ended: no file has a stripe on the lost filesystem any more; it is empty and out of placement", "fsid", j.id,
			"stripes_rebuilt", moved, "bytes_rebuilt", bytes, "took", time.Since(j.started).Round(time.Second))
		return true
	}
	m.log.Info("filesystem drained", "fsid", j.id, "stripes_moved", moved, "bytes_moved", bytes)
	return true
}

// drainPass moves items off the filesystem, drain.parallel at once (read
// again before each move, so a change applies at once). It reports
// whether any stripe left the filesystem.
func (m *Service) drainPass(ctx context.Context, j *drainJob, items []stripe) (progress bool) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, it := range items {
		parallel, p, group := m.drainSettings(j.id, j.lost)
		if !j.acquire(ctx, parallel) {
			wg.Wait()
			return progress
		}
		if ctx.Err() != nil {
			j.mu.Lock()
			j.inflight--
			j.mu.Unlock()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			left := m.drainOne(ctx, j, it, group, p)
			if left {
				j.mu.Lock()
				j.filesLeft--
				j.bytesLeft -= it.bytes
				j.risk.sub(it.margin, it.missing, it.f.Size)
				safe := j.critical && j.safeAt.IsZero() && j.risk.Critical.Files == 0
				if safe {
					j.safeAt = time.Now()
				}
				j.mu.Unlock()
				if safe && j.lost {
					m.log.Warn("rebuild: no file with a stripe on the lost filesystem is one failure from loss any more", "fsid", j.id,
						"after", time.Since(j.started).Round(time.Second))
				}
				mu.Lock()
				progress = true
				mu.Unlock()
			}
			j.endMove()
		}()
	}
	wg.Wait()
	return progress
}

// drainOne moves one stripe off the filesystem to another of its group,
// trying further targets while the chosen one cannot take a stripe of
// this file now. left reports whether the stripe is off the filesystem
// (moved, or its file gone or changed).
func (m *Service) drainOne(ctx context.Context, j *drainJob, it stripe, group string, p pace) (left bool) {
	exclude := map[uint32]bool{}
	fail := func(why string) bool {
		m.failedOne(&j.job, j.id, it.f.ID, it.idx, why)
		return false
	}
	for range 4 {
		to, why := m.target(it.f, it.idx, j.id, group, it.bytes, exclude)
		if to == 0 {
			return fail(why)
		}
		release := m.reserve(to, it.bytes)
		res, out, err := m.moveStripe(ctx, it.f.ID, it.idx, j.id, to, p)
		release()
		switch out {
		case moved:
			m.movedOne(&j.job, j.id, it.f.ID, it.idx, res)
			if res.Tried != "" && !j.lost {
				m.log.Warn("drain: stripe moved after trying other sources", "fsid", j.id, "fid", it.f.ID,
					"stripe", it.idx, "how", res.How, "tried", res.Tried)
			}
			return true
		case gone:
			if kerr.Is(err, kerr.NotFound) && res.How != "" {
				m.count(j.kind, func(c *MoveCounters) { c.Dropped++ })
			}
			j.mu.Lock()
			j.fails.clear(it.f.ID, it.idx)
			j.mu.Unlock()
			return true
		case busy:
			exclude[to] = true
		default:
			if ctx.Err() != nil {
				return false
			}
			return fail(fmt.Sprintf("to fs %d: %s", to, reasonOf(err)))
		}
	}
	return fail("no target filesystem could take it (all busy with stripes of the file)")
}

// reasonOf is err's message without the operation prefix kerr adds.
func reasonOf(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) && ke.Err == nil && ke.Msg != "" {
		if ke.Path != "" {
			return ke.Path + ": " + ke.Msg
		}
		return ke.Msg
	}
	return err.Error()
}

func (j *drainJob) progress() DrainProgress {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := time.Now()
	p := DrainProgress{FsID: j.id, Kind: j.kind, Status: DrainDraining, Phase: j.phase, Started: j.started, FilesLeft: max(j.filesLeft, 0),
		BytesLeft: max(j.bytesLeft, 0), FilesMoved: j.moved, BytesMoved: j.bytes, Rate: j.window.rate(now),
		InFlight: j.inflight, Failures: j.fails.list(), Failed: j.fails.total, Risk: j.risk, SafeAt: j.safeAt}
	switch {
	case j.phase == "done" && j.lost:
		p.Status = DrainEmpty
	case j.phase == "done":
		p.Status = DrainDrained
	case j.lost:
		p.Status = DrainRebuilding
	}
	if p.Rate > 0 {
		p.ETA = time.Duration(float64(p.BytesLeft) / p.Rate * float64(time.Second))
	}
	return p
}

// DrainProgress is fs f's drain or rebuild progress, nil when it is
// neither draining nor lost.
func (m *Service) DrainProgress(f fleet.FsState) *DrainProgress {
	lost := f.ConfigStatus == "lost"
	if (f.ConfigStatus != "drain" && !lost) || f.Drain == "" {
		return nil
	}
	m.mu.Lock()
	j := m.drains[f.ID]
	m.mu.Unlock()
	var p DrainProgress
	if j != nil && j.lost == lost {
		p = j.progress()
	} else {
		p = DrainProgress{FsID: f.ID, Kind: "drain", Status: f.Drain, Phase: "starting"}
		if lost {
			p.Kind = "rebuild"
		}
	}
	if f.Drain == DrainDrained || f.Drain == DrainEmpty {
		p.Status, p.Phase, p.FilesLeft, p.BytesLeft, p.ETA, p.Risk = f.Drain, "done", 0, 0, 0, RiskCounts{}
	}
	p.Parallel, p.RateLimit = cmp.Or(f.DrainParallel, DefaultDrainParallel), f.DrainRate
	if lost {
		p.Parallel, p.RateLimit, p.LostWhy, p.LostAt = cmp.Or(f.RebuildParallel, DefaultRebuildParallel), f.RebuildRate, f.LostWhy, f.LostAt
	}
	return &p
}

// drainKeys are drain's keys of `fs config`.
var drainKeys = []fleet.FsKey{
	{Name: "drain.rate", Set: func(c *namespace.Filesystem, v string) (err error) {
		c.DrainRate, err = parseRate(v)
		return err
	}},
	{Name: "drain.parallel", Set: func(c *namespace.Filesystem, v string) (err error) {
		c.DrainParallel, err = parseParallel(v)
		return err
	}},
}

// rebuildKeys are the rebuild's keys of `fs config`.
var rebuildKeys = []fleet.FsKey{
	{Name: "rebuild.rate", Set: func(c *namespace.Filesystem, v string) (err error) {
		switch v {
		case "default", "auto":
			c.RebuildRate = 0
		case "0":
			c.RebuildRate = -1
		default:
			c.RebuildRate, err = parseRate(v)
			if err != nil {
				err = fmt.Errorf("%v; default gives way to client streams", err)
			}
		}
		return err
	}},
	{Name: "rebuild.parallel", Set: func(c *namespace.Filesystem, v string) (err error) {
		c.RebuildParallel, err = parseParallel(v)
		return err
	}},
}

// parseRate reads a byte rate per second: "0" (no cap) or a size with
// K, M, G (100M is 100 MiB/s); at least 1 MiB/s.
func parseRate(v string) (int64, error) {
	n, err := nsapi.ParseSize(v)
	if err != nil {
		return 0, fmt.Errorf("bad rate %q (bytes per second, e.g. 100M; 0 = no cap)", v)
	}
	if n != 0 && n < 1<<20 {
		return 0, fmt.Errorf("rate %q is below 1M (bytes per second; 0 = no cap)", v)
	}
	return n, nil
}

// parseParallel reads a number of moves at once (1..64).
func parseParallel(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxParallel {
		return 0, fmt.Errorf("bad parallel %q (1 to %d moves at once)", v, maxParallel)
	}
	return n, nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

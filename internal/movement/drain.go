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

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// DrainProgress is where the drain of one filesystem stands.
type DrainProgress struct {
	FsID   uint32
	Status string // DrainDraining or DrainDrained
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
}

// drainJob drains one filesystem.
type drainJob struct {
	job
	id      uint32
	done    chan struct{}
	started time.Time

	filesLeft int64 // under job.mu
	bytesLeft int64
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
	j := &drainJob{job: newJob("drain", "scanning", cancel, now), id: id, done: make(chan struct{}), started: now}
	m.log.Info("drain started", "fsid", id)
	go func() {
		defer close(j.done)
		m.runDrain(ctx, j)
	}()
	return j
}

// drainSettings are the filesystem's drain.parallel and drain.rate.
func (m *Service) drainSettings(id uint32) (parallel int, rate int64, group string) {
	f, _ := m.reg.Filesystem(id)
	parallel = f.DrainParallel
	if parallel <= 0 {
		parallel = DefaultDrainParallel
	}
	return parallel, f.DrainRate, f.Group
}

// stripe is one stripe found on a filesystem.
type stripe struct {
	f     *namespace.Inode
	idx   int
	bytes int64
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
			m.log.Error("drain: cannot scan the namespace", "fsid", j.id, "err", err)
			sleepCtx(ctx, pause)
			continue
		}
		var bytes int64
		for _, it := range items {
			bytes += it.bytes
		}
		j.mu.Lock()
		j.filesLeft, j.bytesLeft = int64(len(items)), bytes
		j.mu.Unlock()
		if len(items) == 0 {
			if n, err := m.movesFrom(j.id); err != nil || n > 0 {
				sleepCtx(ctx, time.Second) // moves of another job (a balancer) end first
				continue
			}
			if why, err := m.leftOn(j.id); err != nil || why != "" {
				if err != nil {
					m.log.Error("drain: cannot read what is left on the filesystem", "fsid", j.id, "err", err)
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
		if m.drainPass(ctx, j, items) {
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

// leftOn says what, besides registered stripes, keeps fs id from being
// drained ("" when nothing does): an upload placed there before the drain
// may still commit a stripe on it, and the stripes moved away stay on its
// disk until their deletion is due (reads granted before a move finish
// first) and its storage server acknowledges it. A drained filesystem
// holds nothing of any file: its disk can be pulled.
func (m *Service) leftOn(id uint32) (string, error) {
	l, err := m.ns.LeftOn(id)
	switch {
	case err != nil:
		return "", err
	case l.Pending > 0:
		return fmt.Sprintf("waiting for %d upload(s) placed on it before the drain to end", l.Pending), nil
	case l.Queued > 0:
		why := fmt.Sprintf("waiting for its storage server to delete %d stripe(s) moved away", l.Queued)
		if d := l.Due.Sub(m.now()); d > 0 {
			why += fmt.Sprintf(" (due in %s: reads granted before the moves finish first)", d.Round(time.Second))
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
	j.phase, j.filesLeft, j.bytesLeft = "done", 0, 0
	moved, bytes := j.moved, j.bytes
	j.mu.Unlock()
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
		parallel, rate, group := m.drainSettings(j.id)
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
			left := m.drainOne(ctx, j, it, group, rate/int64(parallel))
			if left {
				j.mu.Lock()
				j.filesLeft--
				j.bytesLeft -= it.bytes
				j.mu.Unlock()
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
func (m *Service) drainOne(ctx context.Context, j *drainJob, it stripe, group string, rate int64) (left bool) {
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
		res, out, err := m.moveStripe(ctx, it.f.ID, it.idx, j.id, to, rate)
		release()
		switch out {
		case moved:
			m.movedOne(&j.job, j.id, it.f.ID, it.idx, res)
			if res.Tried != "" {
				m.log.Warn("drain: stripe moved after trying other sources", "fsid", j.id, "fid", it.f.ID,
					"stripe", it.idx, "how", res.How, "tried", res.Tried)
			}
			return true
		case gone:
			if kerr.Is(err, kerr.NotFound) && res.How != "" {
				m.count("drain", func(c *MoveCounters) { c.Dropped++ })
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
	p := DrainProgress{FsID: j.id, Status: DrainDraining, Phase: j.phase, Started: j.started, FilesLeft: max(j.filesLeft, 0),
		BytesLeft: max(j.bytesLeft, 0), FilesMoved: j.moved, BytesMoved: j.bytes, Rate: j.window.rate(now),
		InFlight: j.inflight, Failures: j.fails.list(), Failed: j.fails.total}
	if j.phase == "done" {
		p.Status = DrainDrained
	}
	if p.Rate > 0 {
		p.ETA = time.Duration(float64(p.BytesLeft) / p.Rate * float64(time.Second))
	}
	return p
}

// DrainProgress is fs f's drain progress, nil when it is not draining.
func (m *Service) DrainProgress(f fleet.FsState) *DrainProgress {
	if f.ConfigStatus != "drain" || f.Drain == "" {
		return nil
	}
	m.mu.Lock()
	j := m.drains[f.ID]
	m.mu.Unlock()
	var p DrainProgress
	if j != nil {
		p = j.progress()
	} else {
		p = DrainProgress{FsID: f.ID, Status: f.Drain, Phase: "starting"}
	}
	if f.Drain == DrainDrained {
		p.Status, p.Phase, p.FilesLeft, p.BytesLeft, p.ETA = DrainDrained, "done", 0, 0, 0
	}
	p.Parallel, p.RateLimit = f.DrainParallel, f.DrainRate
	if p.Parallel <= 0 {
		p.Parallel = DefaultDrainParallel
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

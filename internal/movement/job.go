package movement

import (
	"context"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster/message"
)

// job is one drain or balancer: its phase, what it moved, its moves in
// flight and the stripes that failed. Both move stripes one at a time
// through moveStripe, a bounded number at once, and keep the same books
// of each move (moved, failed).
type job struct {
	kind   string // "drain" or "balance": the counters and reports it feeds
	cancel context.CancelFunc

	mu       sync.Mutex
	phase    string
	moved    int64 // stripes moved since the job started in this process
	bytes    int64
	inflight int
	window   rateWindow
	fails    failures
	slot     chan struct{} // a move finished
}

func newJob(kind, phase string, cancel context.CancelFunc, now time.Time) job {
	return job{kind: kind, cancel: cancel, phase: phase, window: rateWindow{start: now}, slot: make(chan struct{}, 1)}
}

func (j *job) setPhase(p string) {
	j.mu.Lock()
	j.phase = p
	j.mu.Unlock()
}

// endMove ends one move in flight and wakes whoever waits for a slot.
func (j *job) endMove() {
	j.mu.Lock()
	j.inflight--
	j.mu.Unlock()
	select {
	case j.slot <- struct{}{}:
	default:
	}
}

// acquire counts one more move in flight once fewer than parallel are;
// false when ctx ended first.
func (j *job) acquire(ctx context.Context, parallel int) bool {
	for {
		j.mu.Lock()
		n := j.inflight
		if n < parallel {
			j.inflight++
		}
		j.mu.Unlock()
		if n < parallel {
			return true
		}
		select {
		case <-j.slot:
		case <-ctx.Done():
			return false
		}
	}
}

// waitSlot waits until a move ends, d passes or ctx ends.
func (j *job) waitSlot(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-j.slot:
	case <-t.C:
	case <-ctx.Done():
	}
}

// movedOne books stripe idx of file fid moved off fs from.
func (m *Service) movedOne(j *job, from uint32, fid uint64, idx int, res message.MoveResult) {
	j.mu.Lock()
	j.moved++
	j.bytes += res.Bytes
	j.window.add(time.Now(), res.Bytes)
	j.fails.clear(fid, idx)
	j.mu.Unlock()
	m.count(j.kind, func(c *MoveCounters) { c.Stripes++; c.Bytes += res.Bytes })
	m.moved(j.kind, from, res.Bytes, true)
}

// failedOne books stripe idx of file fid not moved off fs from, and why.
func (m *Service) failedOne(j *job, from uint32, fid uint64, idx int, why string) {
	path := m.pathOfID(fid)
	j.mu.Lock()
	j.fails.add(MoveFailure{Path: path, Fid: fid, Stripe: idx, Reason: why, Time: time.Now()})
	j.mu.Unlock()
	m.count(j.kind, func(c *MoveCounters) { c.Failures++ })
	m.moved(j.kind, from, 0, false)
}

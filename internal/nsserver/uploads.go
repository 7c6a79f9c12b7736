package nsserver

import (
	"context"
	"sync"
	"time"
)

// Pending uploads nobody will commit. An upload is pending from the moment
// its client is sent to a storage server until that server commits or
// aborts it. It is never committed when the client dies before it reaches
// the storage server, or the storage server dies while writing it; a
// restart used to be the only thing that aborted such uploads, and a
// replicated namespace handed over cleanly is never restarted. So the
// service aborts, every sweep.every, each pending upload that is older
// than the capability lifetime plus sweep.grace (its capability expired:
// no storage server can start writing it any more) and that no storage
// server reported writing within the last sweep.grace (heartbeats list
// the uploads a storage server writes, however long they take). The grace
// covers clocks that differ between servers and heartbeats that are late;
// the first sweep waits as long after the start, so that every storage
// server has reported to a server that just took over.

// sweepTiming is the sweeper's timing (tests shorten it).
type sweepTiming struct {
	every time.Duration // how often pending uploads are checked
	grace time.Duration // margin above the capability lifetime, and how long a report of an upload counts
}

var defaultSweep = sweepTiming{every: 10 * time.Second, grace: 30 * time.Second}

// writers are the uploads storage servers reported writing, by node.
type writers struct {
	mu     sync.Mutex
	byNode map[string]writerReport
}

type writerReport struct {
	fids map[uint64]bool
	at   time.Time
}

// note records node's report.
func (w *writers) note(node string, fids []uint64, now time.Time) {
	r := writerReport{fids: make(map[uint64]bool, len(fids)), at: now}
	for _, fid := range fids {
		r.fids[fid] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byNode == nil {
		w.byNode = map[string]writerReport{}
	}
	w.byNode[node] = r
}

// writing reports whether a storage server reported writing fid since t.
func (w *writers) writing(fid uint64, since time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.byNode {
		if r.fids[fid] && !r.at.Before(since) {
			return true
		}
	}
	return false
}

// sweepUploads aborts pending uploads nobody writes until ctx ends; the
// service started at start.
func (s *Server) sweepUploads(ctx context.Context, start time.Time) {
	t := time.NewTicker(s.sweep.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.now().Sub(start) < s.sweep.grace {
			continue
		}
		if n, err := s.abortUnwritten(); err != nil {
			s.log.Warn("aborting pending uploads nobody writes", "err", err)
		} else if n > 0 {
			s.log.Info("aborted pending uploads nobody writes (capability expired, no storage server writing them)", "count", n)
		}
	}
}

// abortUnwritten aborts the pending uploads whose capability expired more
// than the grace ago and that no storage server reported writing within
// the grace; it returns how many.
func (s *Server) abortUnwritten() (int, error) {
	now := s.now()
	old, err := s.ns.PendingUploads(now.Add(-s.ttl - s.sweep.grace))
	if err != nil {
		return 0, err
	}
	var drop []uint64
	for _, fid := range old {
		if !s.writers.writing(fid, now.Add(-s.sweep.grace)) {
			drop = append(drop, fid)
		}
	}
	return s.ns.AbortUploads(drop)
}

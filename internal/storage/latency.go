package storage

import (
	"context"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// I/O statistics of one filesystem. Every call the I/O guard runs is
// timed: counters and latency histograms per operation (for metrics), and
// a sliding window of the latencies of small operations (metadata, and
// transfers under SmallIO) and large ones, whose percentiles every
// heartbeat reports. The namespace server compares them across a
// scheduling group to find filesystems that are slow (the CephFS+EOS
// paper saw one disk answering small I/Os in over 2 s throttle a whole
// cluster's writes, unnoticed). An idle filesystem is probed: every
// LatencyProbe a small stripe (ProbeFid) is written, read back and
// removed, so its latency is known, and a slow one can be seen to recover.

// SmallIO is the size below which a transfer counts as a small operation.
const SmallIO = 64 << 10

// ProbeFid is the file id of the latency probe's stripe; namespaces never
// hand it out (ids start above the root's), and fsck ignores it.
const ProbeFid = 0

// Defaults of the window and the probe period.
const (
	DefaultLatencyWindow = time.Minute
	DefaultLatencyProbe  = 5 * time.Second
)

// Latency buckets: LatencyBucketsPerDoubling per doubling from
// LatencyBase up to LatencyBase<<24 (about 4.5 minutes); the last bucket
// holds everything longer.
const (
	LatencyBase               = 16 * time.Microsecond
	LatencyBucketsPerDoubling = 4
	LatencyBuckets            = 24*LatencyBucketsPerDoubling + 1
)

// LatencyUpper is the upper bound of bucket i (+Inf for the last).
func LatencyUpper(i int) time.Duration {
	if i >= LatencyBuckets-1 {
		return math.MaxInt64
	}
	return time.Duration(float64(LatencyBase) * math.Exp2(float64(i)/LatencyBucketsPerDoubling))
}

func latencyBucket(d time.Duration) int {
	if d <= LatencyBase {
		return 0
	}
	i := int(math.Ceil(math.Log2(float64(d)/float64(LatencyBase)) * LatencyBucketsPerDoubling))
	// Float rounding may put d one bucket low.
	if i < LatencyBuckets-1 && LatencyUpper(i) < d {
		i++
	}
	return min(i, LatencyBuckets-1)
}

// OpStats are the counters of one operation on one filesystem since the
// storage server started.
type OpStats struct {
	Count, Errors int64
	Bytes         int64 // moved by reads and writes
	Untimed       bool  // counted without latencies (sendfile)
	Sum           time.Duration
	Hist          [LatencyBuckets]uint64 // latencies per bucket (LatencyUpper)
}

// window slots: the window is split in slots; the oldest is reused.
const windowSlots = 6

type slot struct {
	epoch int64 // which slot-length period of time it holds
	hist  [2][LatencyBuckets]uint32
	n     [2]int64
}

// ioStats are one filesystem's statistics.
type ioStats struct {
	slotLen time.Duration

	mu    sync.Mutex
	ops   map[string]*OpStats
	slots [windowSlots]slot
}

func newIOStats(window time.Duration) *ioStats {
	if window <= 0 {
		window = DefaultLatencyWindow
	}
	return &ioStats{slotLen: max(window/windowSlots, time.Millisecond), ops: map[string]*OpStats{}}
}

// record notes one operation that moved n bytes (0 for metadata
// operations) and took d.
func (s *ioStats) record(op string, n int64, d time.Duration, failed bool) {
	if s == nil {
		return
	}
	b := latencyBucket(d)
	class := 0
	if n >= SmallIO {
		class = 1
	}
	epoch := time.Now().UnixNano() / int64(s.slotLen)
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.ops[op]
	if o == nil {
		o = &OpStats{}
		s.ops[op] = o
	}
	o.Count++
	if failed {
		o.Errors++
	}
	if op == "read" || op == "write" {
		o.Bytes += n // other operations pass n only to be classed
	}
	o.Sum += d
	o.Hist[b]++
	sl := &s.slots[epoch%windowSlots]
	if sl.epoch != epoch {
		*sl = slot{epoch: epoch}
	}
	sl.hist[class][b]++
	sl.n[class]++
}

// sent counts n bytes the kernel sent from a stripe file (sendfile): an
// operation "sendfile", not timed (the time is the network's).
func (s *ioStats) sent(n int64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.ops["sendfile"]
	if o == nil {
		o = &OpStats{Untimed: true}
		s.ops["sendfile"] = o
	}
	o.Count++
	o.Bytes += n
}

// latency returns the percentiles over the window (nil without samples).
func (s *ioStats) latency() *message.Latency {
	if s == nil {
		return nil
	}
	now := time.Now().UnixNano() / int64(s.slotLen)
	var hist [2][LatencyBuckets]uint64
	var n [2]int64
	s.mu.Lock()
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.epoch <= now-windowSlots {
			continue
		}
		for c := range 2 {
			n[c] += sl.n[c]
			for b, v := range sl.hist[c] {
				hist[c][b] += uint64(v)
			}
		}
	}
	s.mu.Unlock()
	if n[0]+n[1] == 0 {
		return nil
	}
	return &message.Latency{
		SmallN: n[0], SmallP50: quantile(hist[0][:], n[0], 0.5), SmallP90: quantile(hist[0][:], n[0], 0.9),
		SmallP99: quantile(hist[0][:], n[0], 0.99),
		LargeN:   n[1], LargeP50: quantile(hist[1][:], n[1], 0.5), LargeP90: quantile(hist[1][:], n[1], 0.9),
		LargeP99: quantile(hist[1][:], n[1], 0.99),
	}
}

// quantile is the upper bound of the bucket holding quantile q of n
// samples (0 without samples); the last bucket reports its lower bound.
func quantile(hist []uint64, n int64, q float64) time.Duration {
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var c uint64
	for b, v := range hist {
		c += v
		if c >= rank {
			return LatencyUpper(min(b, LatencyBuckets-2))
		}
	}
	return LatencyUpper(LatencyBuckets - 2)
}

func (s *ioStats) snapshot() map[string]OpStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]OpStats, len(s.ops))
	for k, v := range s.ops {
		out[k] = *v
	}
	return out
}

// FsIOStats are the I/O statistics of one filesystem.
type FsIOStats struct {
	FsID    uint32
	Path    string
	Ops     map[string]OpStats
	Latency *message.Latency // over the recent window; nil without samples
}

// IOStats returns the I/O statistics of the filesystems this server
// holds, by id.
func (s *Server) IOStats() []FsIOStats {
	s.mu.RLock()
	out := make([]FsIOStats, 0, len(s.fs))
	for id, f := range s.fs {
		m := s.mounts[f.root]
		if m == nil || m.g.io == nil {
			continue
		}
		out = append(out, FsIOStats{FsID: id, Path: f.root, Ops: m.g.io.snapshot(), Latency: m.g.io.latency()})
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].FsID < out[j].FsID })
	return out
}

// nodeIO is the server's I/O on all its filesystems (heartbeats).
func (s *Server) nodeIO() message.NodeIO {
	var io message.NodeIO
	for _, fs := range s.IOStats() {
		for op, o := range fs.Ops {
			io.Ops += o.Count
			switch op {
			case "read":
				io.ReadBytes += o.Bytes
			case "write":
				io.WriteBytes += o.Bytes
			}
		}
	}
	return io
}

// probeLatency writes, reads back and removes a small stripe on every
// writable filesystem each period, so that the latency of idle
// filesystems is known too. A slow filesystem is probed again only once
// its last probe has ended, and delays no other.
func (s *Server) probeLatency(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	var mu sync.Mutex
	busy := map[*filesystem]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.RLock()
		var fss []*filesystem
		for _, f := range s.fs {
			if f.writable() == nil {
				fss = append(fss, f)
			}
		}
		s.mu.RUnlock()
		for _, f := range fss {
			mu.Lock()
			if busy[f] {
				mu.Unlock()
				continue
			}
			busy[f] = true
			mu.Unlock()
			go func() {
				probe(f.store)
				mu.Lock()
				delete(busy, f)
				mu.Unlock()
			}()
		}
	}
}

// probe is one small write, read and remove; errors only show in the
// statistics (and a hang in the guard).
func probe(st backend.Store) {
	buf := make([]byte, 4096)
	w, err := st.Create(ProbeFid, backend.CreateOptions{})
	if kerr.Is(err, kerr.Exists) { // left by a crash
		_ = st.Remove(ProbeFid)
		w, err = st.Create(ProbeFid, backend.CreateOptions{})
	}
	if err != nil {
		return
	}
	if _, err := w.Write(buf); err != nil {
		w.Abort()
		return
	}
	if err := w.Finish(backend.Meta{Fid: ProbeFid, Layout: "plain", Size: int64(len(buf)), Path: "(latency probe)"}); err != nil {
		w.Abort()
		return
	}
	if r, err := st.Open(ProbeFid); err == nil {
		r.ReadAt(make([]byte, len(buf)), 0)
		r.Close()
	}
	_ = st.Remove(ProbeFid)
}

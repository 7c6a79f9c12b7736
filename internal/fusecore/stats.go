package fusecore

import (
	"encoding/json"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Latency histogram: bucket i covers [2^(i/4), 2^((i+1)/4)) ns, i.e. four
// buckets per power of two, enough for percentiles within ~19%.
const (
	histBuckets = 160 // up to 2^40 ns ~ 18 min
	ringSlots   = 64  // seconds of per-second counts kept for rates
)

// OpStats accumulates one operation's counters. All methods are safe for
// concurrent use and lock-free.
type OpStats struct {
	name   string
	count  atomic.Int64
	errors atomic.Int64
	nanos  atomic.Int64
	hist   [histBuckets]atomic.Int64
	ring   [ringSlots]struct{ sec, n atomic.Int64 }
}

func bucketOf(ns int64) int {
	if ns < 1 {
		ns = 1
	}
	b := int(math.Log2(float64(ns)) * 4)
	if b >= histBuckets {
		b = histBuckets - 1
	}
	return b
}

// Done records one call that started at start; errno is the result (0 on
// success). Designed for `defer op.Done(time.Now(), &errno)`.
func (o *OpStats) Done(start time.Time, errno *syscall.Errno) {
	now := time.Now()
	d := now.Sub(start).Nanoseconds()
	o.count.Add(1)
	if errno != nil && *errno != 0 {
		o.errors.Add(1)
	}
	o.nanos.Add(d)
	o.hist[bucketOf(d)].Add(1)
	sec := now.Unix()
	s := &o.ring[sec%ringSlots]
	if old := s.sec.Load(); old != sec && s.sec.CompareAndSwap(old, sec) {
		s.n.Store(0)
	}
	s.n.Add(1)
}

// rate is the mean calls/s over the last `window` complete seconds.
func (o *OpStats) rate(now int64, window int64) float64 {
	var sum int64
	for sec := now - window; sec < now; sec++ {
		s := &o.ring[((sec%ringSlots)+ringSlots)%ringSlots]
		if s.sec.Load() == sec {
			sum += s.n.Load()
		}
	}
	return float64(sum) / float64(window)
}

func (o *OpStats) percentile(p float64) float64 {
	var counts [histBuckets]int64
	var total int64
	for i := range o.hist {
		counts[i] = o.hist[i].Load()
		total += counts[i]
	}
	if total == 0 {
		return 0
	}
	want := int64(math.Ceil(p * float64(total)))
	var acc int64
	for i, c := range counts {
		acc += c
		if acc >= want {
			// upper edge of the bucket, in microseconds
			return math.Pow(2, float64(i+1)/4) / 1e3
		}
	}
	return 0
}

// Stats is a set of per-operation counters plus data volume.
type Stats struct {
	start    time.Time
	mu       sync.Mutex
	ops      map[string]*OpStats
	BytesIn  atomic.Int64 // written by clients through the daemon
	BytesOut atomic.Int64 // read by clients through the daemon
}

// NewStats returns empty statistics.
func NewStats() *Stats { return &Stats{start: time.Now(), ops: map[string]*OpStats{}} }

// Op returns the counters for name, creating them on first use. Callers
// on hot paths should keep the pointer.
func (s *Stats) Op(name string) *OpStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.ops[name]
	if o == nil {
		o = &OpStats{name: name}
		s.ops[name] = o
	}
	return o
}

// OpSnapshot is one operation in the JSON document.
type OpSnapshot struct {
	Count  int64   `json:"count"`
	Errors int64   `json:"errors"`
	Rate1  float64 `json:"rate_1s"`
	Rate10 float64 `json:"rate_10s"`
	Rate60 float64 `json:"rate_60s"`
	MeanUs float64 `json:"mean_us"`
	P50Us  float64 `json:"p50_us"`
	P90Us  float64 `json:"p90_us"`
	P99Us  float64 `json:"p99_us"`
	P999Us float64 `json:"p999_us"`
}

// Snapshot is the stats.json document.
type Snapshot struct {
	UptimeS  float64               `json:"uptime_s"`
	BytesIn  int64                 `json:"bytes_in"`
	BytesOut int64                 `json:"bytes_out"`
	Ops      map[string]OpSnapshot `json:"ops"`
	Extra    map[string]any        `json:"extra,omitempty"`
}

// Snapshot captures the current counters.
func (s *Stats) Snapshot() Snapshot {
	s.mu.Lock()
	names := make([]string, 0, len(s.ops))
	for n := range s.ops {
		names = append(names, n)
	}
	s.mu.Unlock()
	sort.Strings(names)
	now := time.Now().Unix()
	snap := Snapshot{
		UptimeS:  time.Since(s.start).Seconds(),
		BytesIn:  s.BytesIn.Load(),
		BytesOut: s.BytesOut.Load(),
		Ops:      map[string]OpSnapshot{},
	}
	for _, n := range names {
		o := s.Op(n)
		c := o.count.Load()
		if c == 0 {
			continue
		}
		snap.Ops[n] = OpSnapshot{
			Count: c, Errors: o.errors.Load(),
			Rate1: o.rate(now, 1), Rate10: o.rate(now, 10), Rate60: o.rate(now, 60),
			MeanUs: float64(o.nanos.Load()) / float64(c) / 1e3,
			P50Us:  o.percentile(0.50), P90Us: o.percentile(0.90),
			P99Us: o.percentile(0.99), P999Us: o.percentile(0.999),
		}
	}
	return snap
}

// JSON renders the snapshot with extra top-level fields (e.g. the
// passthrough mode) merged in.
func (s *Stats) JSON(extra map[string]any) []byte {
	snap := s.Snapshot()
	snap.Extra = extra
	b, _ := json.MarshalIndent(snap, "", "  ")
	return append(b, '\n')
}

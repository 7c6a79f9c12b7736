package fusecore

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
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
// success). Designed for `defer op.Done(time.Now(), &errno)` in a node
// tree's methods.
func (o *OpStats) Done(start time.Time, errno *syscall.Errno) {
	o.record(start, errno != nil && *errno != 0)
}

// DoneStatus is Done for a raw file system's methods:
// `defer op.DoneStatus(time.Now(), &status)`.
func (o *OpStats) DoneStatus(start time.Time, st *fuse.Status) {
	o.record(start, st != nil && *st != fuse.OK)
}

// DoneErr is Done for code outside FUSE (a non-nil err is a failure):
// `defer op.DoneErr(time.Now(), &err)`.
func (o *OpStats) DoneErr(start time.Time, err *error) {
	o.record(start, err != nil && *err != nil)
}

// Count is the number of calls recorded.
func (o *OpStats) Count() int64 { return o.count.Load() }

// Errors is the number of calls recorded as failed.
func (o *OpStats) Errors() int64 { return o.errors.Load() }

func (o *OpStats) record(start time.Time, failed bool) {
	now := time.Now()
	o.add(now, now.Sub(start), failed)
}

// add records one call that took d and ended at now.
func (o *OpStats) add(now time.Time, dur time.Duration, failed bool) {
	d := dur.Nanoseconds()
	o.count.Add(1)
	if failed {
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

// Stats is what one mount counts: per-operation counters and latencies,
// data volume, and named event counters for what is no operation (cache
// hits, refusals, reloads). Every Kaon mount keeps one and reports it the
// same way: JSON (a control file) and Summary (logs).
type Stats struct {
	start    time.Time
	mu       sync.Mutex
	ops      map[string]*OpStats
	counters map[string]*atomic.Int64
	BytesIn  atomic.Int64 // written by clients through the daemon
	BytesOut atomic.Int64 // read by clients through the daemon
}

// NewStats returns empty statistics.
func NewStats() *Stats {
	return &Stats{start: time.Now(), ops: map[string]*OpStats{}, counters: map[string]*atomic.Int64{}}
}

// Counter returns the event counter name, creating it on first use.
// Callers on hot paths should keep the pointer.
func (s *Stats) Counter(name string) *atomic.Int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counters[name]
	if c == nil {
		c = new(atomic.Int64)
		s.counters[name] = c
	}
	return c
}

// Op returns the counters for name, creating them on first use. Callers
// on hot paths should keep the pointer.
func (s *Stats) Op(name string) *OpStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.ops[name]
	if o == nil {
		o = &OpStats{}
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
	Counters map[string]int64      `json:"counters,omitempty"`
	Extra    map[string]any        `json:"extra,omitempty"`
}

// Snapshot captures the current counters.
func (s *Stats) Snapshot() Snapshot {
	s.mu.Lock()
	ops := maps.Clone(s.ops)
	counters := map[string]int64{}
	for n, c := range s.counters {
		counters[n] = c.Load()
	}
	s.mu.Unlock()
	now := time.Now().Unix()
	snap := Snapshot{
		UptimeS:  time.Since(s.start).Seconds(),
		BytesIn:  s.BytesIn.Load(),
		BytesOut: s.BytesOut.Load(),
		Ops:      map[string]OpSnapshot{},
		Counters: counters,
	}
	for n, o := range ops {
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

// Summary renders the snapshot as one line for logs: every operation
// used with its count, errors and p50/p99 latency, the data volume and
// the counters, e.g.
//
//	up 12s; lookup 40 (2 failed) p50 11us p99 90us, read 8 p50 35us p99 50us; bytes in 0 out 65536; reloads 1
func (s *Stats) Summary() string {
	snap := s.Snapshot()
	var b strings.Builder
	fmt.Fprintf(&b, "up %.0fs;", snap.UptimeS)
	sep := " "
	for _, n := range slices.Sorted(maps.Keys(snap.Ops)) {
		o := snap.Ops[n]
		fmt.Fprintf(&b, "%s%s %d", sep, n, o.Count)
		if o.Errors > 0 {
			fmt.Fprintf(&b, " (%d failed)", o.Errors)
		}
		fmt.Fprintf(&b, " p50 %.0fus p99 %.0fus", o.P50Us, o.P99Us)
		sep = ", "
	}
	if len(snap.Ops) == 0 {
		b.WriteString(" no operations")
	}
	fmt.Fprintf(&b, "; bytes in %d out %d", snap.BytesIn, snap.BytesOut)
	sep = "; "
	for _, n := range slices.Sorted(maps.Keys(snap.Counters)) {
		fmt.Fprintf(&b, "%s%s %d", sep, n, snap.Counters[n])
		sep = ", "
	}
	return b.String()
}

package fusecore

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

func TestStatsCountsErrorsPercentiles(t *testing.T) {
	s := NewStats()
	op := s.Op("lookup")
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 250; i++ {
				var e syscall.Errno
				if i%50 == 0 {
					e = syscall.ENOENT
				}
				// Durations given, not measured: the test must not
				// depend on how loaded the machine is.
				op.add(time.Now(), time.Duration(i)*time.Microsecond, e != 0)
			}
		}()
	}
	wg.Wait()
	s.BytesIn.Add(10)
	snap := s.Snapshot()
	l := snap.Ops["lookup"]
	if l.Count != 1000 || l.Errors != 20 {
		t.Fatalf("count %d errors %d", l.Count, l.Errors)
	}
	// Latencies are spread uniformly over 0..249 µs.
	if l.P50Us < 100 || l.P50Us > 160 || l.P99Us < 230 || l.P99Us > 300 || l.P50Us > l.P99Us {
		t.Errorf("percentiles p50 %.1f p99 %.1f", l.P50Us, l.P99Us)
	}
	if _, ok := snap.Ops["never"]; ok {
		t.Errorf("unused op listed")
	}
	var doc map[string]any
	if err := json.Unmarshal(s.JSON(map[string]any{"passthrough": true}), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["bytes_in"].(float64) != 10 || doc["extra"].(map[string]any)["passthrough"] != true {
		t.Errorf("json: %v", doc)
	}
}

func TestStatsRates(t *testing.T) {
	o := &OpStats{}
	now := time.Now().Unix()
	// Fill the ring by hand: 5 calls in each of the last 10 seconds.
	for sec := now - 10; sec < now; sec++ {
		s := &o.ring[sec%ringSlots]
		s.sec.Store(sec)
		s.n.Store(5)
	}
	if r := o.rate(now, 1); r != 5 {
		t.Errorf("rate 1s = %v", r)
	}
	if r := o.rate(now, 10); r != 5 {
		t.Errorf("rate 10s = %v", r)
	}
	if r := o.rate(now, 60); r < 0.83 || r > 0.84 {
		t.Errorf("rate 60s = %v, want 50/60", r)
	}
	// Stale slots from a previous lap are ignored.
	o.ring[(now-1)%ringSlots].sec.Store(now - 1 - ringSlots)
	if r := o.rate(now, 1); r != 0 {
		t.Errorf("stale slot counted: %v", r)
	}
}

// TestStatsSummaryAndCounters: the log line and the JSON document carry
// the operations of all three recording styles, with failures, and the
// named counters; unused operations stay out.
func TestStatsSummaryAndCounters(t *testing.T) {
	s := NewStats()
	st := fuse.ENOENT
	s.Op("lookup").DoneStatus(time.Now(), &st)
	st = fuse.OK
	s.Op("lookup").DoneStatus(time.Now(), &st)
	var errno syscall.Errno
	s.Op("read").Done(time.Now(), &errno)
	err := errors.New("changed below")
	s.Op("fill").DoneErr(time.Now(), &err)
	s.Op("unused")
	s.Counter("reloads").Add(2)
	s.Counter("refused").Add(1)
	s.BytesOut.Add(4096)
	sum := s.Summary()
	for _, w := range []string{"up ", "fill 1 (1 failed) p50 ", "lookup 2 (1 failed) p50 ", "read 1 p50 ", "bytes in 0 out 4096", "refused 1, reloads 2"} {
		if !strings.Contains(sum, w) {
			t.Errorf("summary lacks %q: %s", w, sum)
		}
	}
	if strings.Contains(sum, "unused") || strings.Contains(sum, "\n") {
		t.Errorf("summary: %q", sum)
	}
	var doc struct {
		Ops      map[string]OpSnapshot `json:"ops"`
		Counters map[string]int64      `json:"counters"`
	}
	if err := json.Unmarshal(s.JSON(nil), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Ops["lookup"].Errors != 1 || doc.Ops["fill"].Errors != 1 || doc.Counters["reloads"] != 2 {
		t.Errorf("json: %+v", doc)
	}
	if _, ok := doc.Ops["unused"]; ok {
		t.Errorf("unused op in json")
	}
}

// BenchmarkOpStatsDone is the cost a counted operation adds to a FUSE
// request (two clock reads and four atomic adds), from all CPUs at once.
func BenchmarkOpStatsDone(b *testing.B) {
	op := NewStats().Op("lookup")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			st := fuse.OK
			op.DoneStatus(time.Now(), &st)
		}
	})
}

package fusecore

import (
	"encoding/json"
	"sync"
	"syscall"
	"testing"
	"time"
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
				op.Done(time.Now().Add(-time.Duration(i)*time.Microsecond), &e)
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

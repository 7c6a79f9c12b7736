package storage

import (
	"testing"
	"time"
)

// TestLatencyBuckets: every duration falls in the bucket whose upper
// bound is the first at or above it.
func TestLatencyBuckets(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond, LatencyBase, LatencyBase + 1, 100 * time.Microsecond, time.Millisecond,
		3 * time.Millisecond, time.Second, 2 * time.Second, time.Minute, time.Hour} {
		b := latencyBucket(d)
		if LatencyUpper(b) < d {
			t.Errorf("%v in bucket %d with upper bound %v", d, b, LatencyUpper(b))
		}
		if b > 0 && b < LatencyBuckets-1 && LatencyUpper(b-1) >= d {
			t.Errorf("%v in bucket %d, but bucket %d (upper %v) holds it", d, b, b-1, LatencyUpper(b-1))
		}
	}
	if latencyBucket(time.Hour) != LatencyBuckets-1 {
		t.Error("an hour is not in the last bucket")
	}
}

// TestLatencyWindow: percentiles per size class over the window; old
// samples age out; operation counters keep everything.
func TestLatencyWindow(t *testing.T) {
	s := newIOStats(600 * time.Millisecond)
	if s.latency() != nil {
		t.Fatal("latency without samples")
	}
	for range 98 {
		s.record("open", 0, time.Millisecond, false)
	}
	s.record("read", 4096, 2*time.Second, false)
	s.record("read", 4096, 2*time.Second, false)
	s.record("write", 1<<20, 50*time.Millisecond, true)
	l := s.latency()
	if l.SmallN != 100 || l.LargeN != 1 {
		t.Fatalf("samples: %+v", l)
	}
	if l.SmallP50 < time.Millisecond || l.SmallP50 > 2*time.Millisecond || l.SmallP99 < 2*time.Second || l.SmallP99 > 3*time.Second {
		t.Fatalf("small percentiles: %+v", l)
	}
	if l.LargeP99 < 50*time.Millisecond || l.LargeP99 > 60*time.Millisecond {
		t.Fatalf("large percentiles: %+v", l)
	}
	ops := s.snapshot()
	if ops["read"].Count != 2 || ops["read"].Bytes != 8192 || ops["write"].Errors != 1 || ops["open"].Bytes != 0 {
		t.Fatalf("counters: %+v", ops)
	}
	time.Sleep(700 * time.Millisecond)
	if l := s.latency(); l != nil {
		t.Fatalf("samples older than the window still count: %+v", l)
	}
	if s.snapshot()["open"].Count != 98 {
		t.Fatal("counters lost with the window")
	}
}

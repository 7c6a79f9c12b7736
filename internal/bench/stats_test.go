package bench

import (
	"os"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ds := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}
	s := Summarize(ds, 1<<20, 4*time.Second)
	if s.Mean != 2500*time.Millisecond || s.Max != 4*time.Second || s.P99 != 4*time.Second {
		t.Fatalf("%+v", s)
	}
	// sigma of 1,2,3,4 (population) = sqrt(1.25)
	if s.Sigma < 1118*time.Millisecond || s.Sigma > 1119*time.Millisecond {
		t.Fatalf("sigma %v", s.Sigma)
	}
	// mean of 1, 1/2, 1/3, 1/4 MiB/s
	if want := (1 + 0.5 + 1.0/3 + 0.25) / 4; s.MeanMiBs < want-1e-9 || s.MeanMiBs > want+1e-9 {
		t.Fatalf("mean rate %v want %v", s.MeanMiBs, want)
	}
	if s.AggregateMiBs != 1 {
		t.Fatalf("aggregate %v", s.AggregateMiBs)
	}
}

func TestRSSOfSelf(t *testing.T) {
	if RSS(os.Getpid()) <= 0 {
		t.Fatal("no RSS for this process")
	}
	s := SampleRSS(os.Getpid())
	time.Sleep(150 * time.Millisecond)
	if s.Stop() <= 0 {
		t.Fatal("sampler saw nothing")
	}
}

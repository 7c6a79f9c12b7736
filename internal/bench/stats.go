// Package bench holds Kaon's benchmark drivers: streaming throughput through
// the real HTTP path beside the raw disk, and namespace metadata rates.
// Results are tables; nothing here asserts a speed.
package bench

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Summary describes a set of per-stream durations for streams of one size.
type Summary struct {
	N              int
	Mean, Sigma    time.Duration
	P99, Max       time.Duration
	MeanMiBs       float64 // mean of per-stream MiB/s
	AggregateMiBs  float64 // total bytes / wall time
	Wall           time.Duration
	BytesPerStream int64
}

// Summarize computes the field's table row from per-stream durations.
func Summarize(ds []time.Duration, bytesPerStream int64, wall time.Duration) Summary {
	s := Summary{N: len(ds), BytesPerStream: bytesPerStream, Wall: wall}
	if len(ds) == 0 {
		return s
	}
	sorted := append([]time.Duration(nil), ds...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var sum, rate float64
	for _, d := range ds {
		sum += d.Seconds()
		rate += float64(bytesPerStream) / (1 << 20) / d.Seconds()
	}
	mean := sum / float64(len(ds))
	var v float64
	for _, d := range ds {
		v += (d.Seconds() - mean) * (d.Seconds() - mean)
	}
	s.Mean = time.Duration(mean * float64(time.Second))
	s.Sigma = time.Duration(math.Sqrt(v/float64(len(ds))) * float64(time.Second))
	s.P99 = sorted[int(math.Ceil(0.99*float64(len(sorted))))-1]
	s.Max = sorted[len(sorted)-1]
	s.MeanMiBs = rate / float64(len(ds))
	if wall > 0 {
		s.AggregateMiBs = float64(bytesPerStream) * float64(len(ds)) / (1 << 20) / wall.Seconds()
	}
	return s
}

// RSSSampler records the peak resident set of a process while running.
type RSSSampler struct {
	pid  int
	peak atomic.Int64
	stop chan struct{}
	done chan struct{}
}

// RSS returns the resident set size of pid in bytes.
func RSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// SampleRSS starts sampling pid every 100 ms until Stop.
func SampleRSS(pid int) *RSSSampler {
	s := &RSSSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if r := RSS(pid); r > s.peak.Load() {
				s.peak.Store(r)
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the peak RSS in bytes.
func (s *RSSSampler) Stop() int64 {
	close(s.stop)
	<-s.done
	return s.peak.Load()
}

// Package bench holds Kaon's benchmark drivers: streaming throughput through
// the real HTTP path beside the raw disk, and namespace metadata rates.
// Results are tables (and plots of the stream tails); nothing here asserts
// a speed.
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

// Summary describes a set of per-stream durations for streams of one size:
// the columns of the field's stream tables (average, sigma, rate, p99 and
// maximum per stream).
type Summary struct {
	N              int
	Mean, Sigma    time.Duration
	Min            time.Duration
	P99, Max       time.Duration
	MeanMiBs       float64 // mean of per-stream MiB/s
	AggregateMiBs  float64 // total bytes / wall time
	Wall           time.Duration
	BytesPerStream int64
}

// Summarize computes the field's table row from per-stream durations.
// Sigma is the population standard deviation; P99 is interpolated between
// the closest ranks (numpy's default), so with fewer than 100 streams it
// still tells the slowest stream from the next slowest ones.
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
	s.Min = sorted[0]
	s.P99 = Percentile(sorted, 0.99)
	s.Max = sorted[len(sorted)-1]
	s.MeanMiBs = rate / float64(len(ds))
	if wall > 0 {
		s.AggregateMiBs = float64(bytesPerStream) * float64(len(ds)) / (1 << 20) / wall.Seconds()
	}
	return s
}

// Percentile returns the q-quantile (0 <= q <= 1) of sorted durations,
// linearly interpolated between the closest ranks.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	pos := q * float64(len(sorted)-1)
	i := int(pos)
	if i >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	f := pos - float64(i)
	return sorted[i] + time.Duration(f*float64(sorted[i+1]-sorted[i]))
}

// Tail is p99 over average: how much longer the slowest streams take than
// a typical one (1 when every stream takes as long as the others).
func (s Summary) Tail() float64 {
	if s.Mean <= 0 {
		return 0
	}
	return float64(s.P99) / float64(s.Mean)
}

// medianSummary is the summary whose every field is the median of that
// field over rounds (each column on its own: a round that was slow in one
// column does not decide the others).
func medianSummary(rs []Summary) Summary {
	if len(rs) == 0 {
		return Summary{}
	}
	d := func(f func(Summary) time.Duration) time.Duration {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = float64(f(r))
		}
		return time.Duration(Median(v))
	}
	x := func(f func(Summary) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return Median(v)
	}
	return Summary{
		N:              rs[0].N,
		BytesPerStream: rs[0].BytesPerStream,
		Mean:           d(func(s Summary) time.Duration { return s.Mean }),
		Sigma:          d(func(s Summary) time.Duration { return s.Sigma }),
		Min:            d(func(s Summary) time.Duration { return s.Min }),
		P99:            d(func(s Summary) time.Duration { return s.P99 }),
		Max:            d(func(s Summary) time.Duration { return s.Max }),
		Wall:           d(func(s Summary) time.Duration { return s.Wall }),
		MeanMiBs:       x(func(s Summary) float64 { return s.MeanMiBs }),
		AggregateMiBs:  x(func(s Summary) float64 { return s.AggregateMiBs }),
	}
}

// CPUTime is the user plus system CPU time pid has used (all its threads,
// not its children), from /proc/PID/stat; 0 when it cannot be read.
func CPUTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	return parseStatCPU(string(b))
}

// clockTick is USER_HZ, the unit of /proc/PID/stat times (100 on every
// Linux architecture Kaon runs on).
const clockTick = 10 * time.Millisecond

func parseStatCPU(stat string) time.Duration {
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start behind its last ')', with the state (field 3).
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64) // utime, field 14
	s, err2 := strconv.ParseInt(f[12], 10, 64) // stime, field 15
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+s) * clockTick
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

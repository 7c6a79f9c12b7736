// Package cputime reports benchmark throughput per CPU-second of the whole
// process ("MB/cpu-s"): on a shared, oversubscribed box wall-clock MB/s
// swings with the neighbours' load, CPU time does not (much).
package cputime

import (
	"syscall"
	"testing"
	"time"
)

// Meter remembers the process CPU time at its start.
type Meter struct{ start time.Duration }

func now() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Start begins measuring.
func Start() Meter { return Meter{now()} }

// Report adds the MB/cpu-s metric; call it after the timed loop, with
// bytesPerOp as given to b.SetBytes.
func (m Meter) Report(b *testing.B, bytesPerOp int64) {
	if d := now() - m.start; d > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)/1e6/d.Seconds(), "MB/cpu-s")
	}
}

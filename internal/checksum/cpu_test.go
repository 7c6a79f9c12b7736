package checksum

import (
	"syscall"
	"testing"
	"time"
)

// cpuMeter reports throughput per CPU-second of the whole process
// ("MB/cpu-s"): on a shared, oversubscribed box wall-clock MB/s swings
// with the neighbours' load, CPU time does not (much).
type cpuMeter struct{ start time.Duration }

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuMeter { return cpuMeter{cpuNow()} }

// report must be called after the b.Loop loop; bytesPerOp as in SetBytes.
func (m cpuMeter) report(b *testing.B, bytesPerOp int64) {
	if d := cpuNow() - m.start; d > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)/1e6/d.Seconds(), "MB/cpu-s")
	}
}

package bench

import (
	"math"
	"os"
	"testing"
	"time"
)

func secs(v ...float64) []time.Duration {
	ds := make([]time.Duration, len(v))
	for i, s := range v {
		ds[i] = time.Duration(s * float64(time.Second))
	}
	return ds
}

func near(a, b time.Duration) bool { return (a - b).Abs() <= time.Microsecond }

func TestSummarize(t *testing.T) {
	s := Summarize(secs(4, 2, 1, 3), 1<<20, 4*time.Second)
	if s.Mean != 2500*time.Millisecond || s.Max != 4*time.Second || s.Min != time.Second {
		t.Fatalf("%+v", s)
	}
	// p99 of 1,2,3,4 interpolated: 3 + 0.97*(4-3)
	if !near(s.P99, 3970*time.Millisecond) {
		t.Fatalf("p99 %v", s.P99)
	}
	// sigma of 1,2,3,4 (population) = sqrt(1.25)
	if s.Sigma < 1118*time.Millisecond || s.Sigma > 1119*time.Millisecond {
		t.Fatalf("sigma %v", s.Sigma)
	}
	// mean of 1, 1/2, 1/3, 1/4 MiB/s
	if want := (1 + 0.5 + 1.0/3 + 0.25) / 4; math.Abs(s.MeanMiBs-want) > 1e-9 {
		t.Fatalf("mean rate %v want %v", s.MeanMiBs, want)
	}
	if s.AggregateMiBs != 1 {
		t.Fatalf("aggregate %v", s.AggregateMiBs)
	}
	if math.Abs(s.Tail()-3.97/2.5) > 1e-6 {
		t.Fatalf("tail %v", s.Tail())
	}
}

func TestPercentile(t *testing.T) {
	// 100 streams of 1..100 s: p99 lies between the 99th and 100th.
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(i + 1)
	}
	sorted := secs(v...)
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0, time.Second}, {1, 100 * time.Second}, {0.5, 50500 * time.Millisecond}, {0.99, 99010 * time.Millisecond}} {
		if got := Percentile(sorted, c.q); !near(got, c.want) {
			t.Errorf("q=%v: %v, want %v", c.q, got, c.want)
		}
	}
	// One slow stream in 32 shows in the p99, not only in the max.
	ds := make([]float64, 32)
	for i := range ds {
		ds[i] = 10
	}
	ds[31] = 30
	s := Summarize(secs(ds...), 1<<20, 30*time.Second)
	if s.P99 <= 10*time.Second || s.P99 >= 30*time.Second {
		t.Fatalf("p99 %v of 31x10s and 1x30s", s.P99)
	}
	if Percentile(nil, 0.99) != 0 || Percentile(secs(7), 0.99) != 7*time.Second {
		t.Fatal("p99 of no or one value")
	}
}

func TestMedians(t *testing.T) {
	if Median([]float64{3, 1, 2}) != 2 || Median([]float64{4, 1, 3, 2}) != 2.5 || Median(nil) != 0 {
		t.Fatal("median")
	}
	in := []float64{5, 1, 3}
	Median(in)
	if in[0] != 5 {
		t.Fatal("Median sorted its argument")
	}
	// Each column is the median of its own values.
	rs := []Summary{
		{Mean: 1 * time.Second, P99: 9 * time.Second, AggregateMiBs: 30},
		{Mean: 3 * time.Second, P99: 4 * time.Second, AggregateMiBs: 10},
		{Mean: 2 * time.Second, P99: 5 * time.Second, AggregateMiBs: 20},
	}
	m := medianSummary(rs)
	if m.Mean != 2*time.Second || m.P99 != 5*time.Second || m.AggregateMiBs != 20 {
		t.Fatalf("%+v", m)
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a parenthesis; utime 250, stime 50 ticks.
	stat := "1234 (ceph fuse) x) S 1 1234 1234 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 30 0 100 200000 3000 18446744073709551615"
	if got := parseStatCPU(stat); got != 3*time.Second {
		t.Fatalf("cpu %v, want 3s", got)
	}
	if parseStatCPU("garbage") != 0 {
		t.Fatal("garbage parsed")
	}
	if CPUTime(os.Getpid()) < 0 || CPUTime(-1) != 0 {
		t.Fatal("CPUTime")
	}
}

func TestTargetsAndComparison(t *testing.T) {
	cfg := StreamConfig{
		RawDirs: []RawDir{{"rep-4M", "/m/rep4"}, {"ec-4M", "/m/ec4"}},
		Spaces:  []string{"cephfs-rep-4M", "rados-ec-4M", "other"},
		Layouts: []string{"plain"},
	}
	ts := targets(cfg)
	// each raw target first, then the ones compared with it
	want := []struct{ name, ref string }{{"raw:rep-4M", ""}, {"cephfs-rep-4M", "raw:rep-4M"}, {"other", "raw:rep-4M"},
		{"raw:ec-4M", ""}, {"rados-ec-4M", "raw:ec-4M"}}
	if len(ts) != len(want) {
		t.Fatalf("%d targets: %+v", len(ts), ts)
	}
	for i, w := range want {
		if ts[i].name != w.name || ts[i].rawRef != w.ref {
			t.Errorf("target %d: %s against %q, want %s against %q", i, ts[i].name, ts[i].rawRef, w.name, w.ref)
		}
	}
	if ts[1].dir != "/bench-stream/cephfs-rep-4M" || ts[1].space != "cephfs-rep-4M" {
		t.Errorf("space target %+v", ts[1])
	}
	// Without raw dirs: raw-direct and raw beside the data, layouts as rows.
	ts = targets(StreamConfig{RawDir: "/d/raw", Layouts: []string{"plain", "ec:4+2"}})
	if len(ts) != 4 || ts[0].name != "raw-direct" || !ts[0].direct || ts[1].name != "raw" || ts[3].name != "ec:4+2" || ts[3].rawRef != "raw" || ts[3].dir != "/bench-stream/ec-4-2" {
		t.Fatalf("%+v", ts)
	}

	sum := func(mean, p99 float64, agg float64) Summary {
		return Summary{Mean: secs(mean)[0], P99: secs(p99)[0], AggregateMiBs: agg}
	}
	rows := []Row{
		{Target: "raw:rep-4M", Raw: true, Op: "write", Summary: sum(10, 12, 100)},
		{Target: "cephfs-rep-4M", Op: "write", Summary: sum(10, 18, 50), rawRef: "raw:rep-4M"},
		{Target: "cephfs-rep-4M", Op: "read", Summary: sum(1, 1, 50), rawRef: "raw:rep-4M"}, // no raw read row
	}
	compareWithRaw(rows)
	if rows[0].Ratio != 1 || math.Abs(rows[0].TailVsRaw-1) > 1e-9 {
		t.Errorf("raw row against itself: %+v", rows[0])
	}
	if rows[1].Ratio != 0.5 || math.Abs(rows[1].TailVsRaw-1.5) > 1e-9 {
		t.Errorf("kaon row: ratio %v tail vs raw %v, want 0.5 and 1.5", rows[1].Ratio, rows[1].TailVsRaw)
	}
	if rows[2].Ratio != 0 || rows[2].TailVsRaw != 0 {
		t.Errorf("row without a raw row compared: %+v", rows[2])
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

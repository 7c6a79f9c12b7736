package health

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/kaon-storage/kaon/integration/harness"
)

// scrape reads url/metrics with Prometheus' own text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("scrape %s: HTTP %d", url, resp.StatusCode)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse metrics of %s: %v", url, err)
	}
	return fams
}

// value sums the samples of family name whose labels include want
// (counters, gauges, untyped; histograms: their count).
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	sum, found := 0.0, false
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, found
}

// TestMetrics scrapes both endpoints of `kaon up` with Prometheus' parser
// and checks that counters move with an HTTP upload and read, a root://
// upload, and an fsck scan; per-filesystem I/O histograms and every fsck
// class are there.
func TestMetrics(t *testing.T) {
	k := harness.Up(t, "--latency-probe", "0")
	k.MustKaon("mkdir", "/r")
	k.MustKaon("attr", "set", "/r", "sys.forced.layout=replica:2")
	ns0, fst0 := scrape(t, k.EP.HTTP), scrape(t, k.EP.FSTHTTP)

	data := randomBytes(t, 3<<20)
	put(t, k, "/r/f", data)
	if b, ok := get(t, k, "/r/f"); !ok || len(b) != len(data) {
		t.Fatalf("GET /r/f: ok=%v %d bytes", ok, len(b))
	}
	local := filepath.Join(t.TempDir(), "x")
	os.WriteFile(local, data[:1<<20], 0o644)
	if out, err := exec.Command("xrdcp", "-s", local, k.EP.XRootD+"//r/x").CombinedOutput(); err != nil {
		t.Fatalf("xrdcp: %v %s", err, out)
	}
	k.MustKaon("fsck", "run", "--wait", "--timeout", "1m")
	ns1, fst1 := scrape(t, k.EP.HTTP), scrape(t, k.EP.FSTHTTP)

	grew := func(name string, before, after map[string]*dto.MetricFamily, labels map[string]string, by float64) {
		t.Helper()
		a, _ := value(before, name, labels)
		b, ok := value(after, name, labels)
		if !ok || b-a < by {
			t.Errorf("%s%v: %v -> %v (present %v), want it to grow by %v", name, labels, a, b, ok, by)
		}
	}
	grew("kaon_http_requests_total", ns0, ns1, map[string]string{"role": "mgm", "route": "dav", "method": "PUT", "code": "307"}, 1)
	grew("kaon_http_requests_total", ns0, ns1, map[string]string{"role": "mgm", "route": "dav", "method": "GET", "code": "307"}, 1)
	grew("kaon_http_request_duration_seconds", ns0, ns1, map[string]string{"route": "api"}, 1)
	grew("kaon_http_requests_total", fst0, fst1, map[string]string{"role": "fst", "route": "data", "method": "PUT", "code": "201"}, 1)
	grew("kaon_http_sent_bytes_total", fst0, fst1, map[string]string{"route": "data"}, float64(len(data)))
	grew("kaon_http_received_bytes_total", fst0, fst1, map[string]string{"route": "data"}, float64(len(data)))
	grew("kaon_xrootd_requests_total", ns0, ns1, map[string]string{"role": "mgm"}, 1)
	grew("kaon_xrootd_received_bytes_total", fst0, fst1, map[string]string{"role": "fst"}, 1<<20)
	// Two replicas of each file were written to filesystems.
	grew("kaon_fst_io_bytes_total", fst0, fst1, map[string]string{"op": "write"}, float64(2*(len(data)+1<<20)))
	// A replica with block sums is read (and verified) by the server, not
	// handed to the kernel.
	grew("kaon_fst_io_bytes_total", fst0, fst1, map[string]string{"op": "read"}, float64(len(data)))
	grew("kaon_fst_io_duration_seconds", fst0, fst1, map[string]string{"op": "create"}, 4)
	grew("kaon_fsck_scans_total", fst0, fst1, map[string]string{"result": "done"}, 6)
	grew("kaon_fsck_scanned_stripes_total", fst0, fst1, nil, 4)
	grew("kaon_fsck_stripes_checked_total", ns0, ns1, nil, 4)
	for _, c := range []string{"blockxs_err", "stripe_err", "d_mem_sz_diff", "m_mem_sz_diff", "d_cx_diff", "m_cx_diff",
		"unreg_n", "rep_missing_n", "rep_diff_n", "orphans_n"} {
		if v, ok := value(ns1, "kaon_fsck_findings", map[string]string{"class": c}); !ok || v != 0 {
			t.Errorf("kaon_fsck_findings{class=%q} = %v (present %v), want 0", c, v, ok)
		}
	}
	for _, name := range []string{"kaon_fs_up", "kaon_fs_slow", "kaon_fs_used_bytes", "go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := value(ns1, name, nil); !ok {
			t.Errorf("namespace server has no %s", name)
		}
	}
	if v, _ := value(ns1, "kaon_fs_up", nil); v != 6 {
		t.Errorf("kaon_fs_up sums to %v, want 6", v)
	}
	if f := fst1["kaon_fst_io_duration_seconds"]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM || len(f.Metric[0].Histogram.Bucket) < 10 {
		t.Errorf("kaon_fst_io_duration_seconds is not a histogram with buckets: %v", f)
	}
	// GET /metrics is the endpoint's, even with a file of that name in
	// the namespace (reachable over root://).
	put(t, k, "/metrics", []byte("not metrics\n"))
	if fams := scrape(t, k.EP.HTTP); fams["kaon_fs_up"] == nil {
		t.Error("a file named /metrics hides the metrics")
	}
	got := filepath.Join(t.TempDir(), "m")
	if out, err := exec.Command("xrdcp", "-s", k.EP.XRootD+"//metrics", got).CombinedOutput(); err != nil {
		t.Fatalf("xrdcp /metrics: %v %s", err, out)
	}
	if b, _ := os.ReadFile(got); string(b) != "not metrics\n" {
		t.Errorf("the file /metrics over root:// reads %q", b)
	}
}

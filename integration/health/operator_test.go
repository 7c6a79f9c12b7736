package health

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/kaon-storage/kaon/integration/harness"
)

// promtoolAllowed are the findings of promtool check metrics that Kaon
// accepts: the names issue 26 fixed (kaon_ns_files, ...) read "ns" as
// nanoseconds (docs/DESIGN-NOTES.md).
var promtoolAllowed = regexp.MustCompile(`^kaon_ns_[a-z_]+ metric names should not contain abbreviated units$`)

// promtoolCheck runs promtool check metrics on text and fails the test on
// any finding but promtoolAllowed.
func promtoolCheck(t *testing.T, text []byte) {
	t.Helper()
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = bytes.NewReader(text)
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" && !promtoolAllowed.MatchString(l) {
			t.Errorf("promtool check metrics: %s", l)
		}
	}
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 3) {
		t.Fatalf("promtool check metrics: %v\n%s", err, out) // 3: lint findings only
	}
}

// scrapeText reads url/metrics as text and parses it.
func scrapeText(t *testing.T, url string) ([]byte, map[string]*dto.MetricFamily) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape %s: HTTP %d %v", url, resp.StatusCode, err)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse metrics of %s: %v", url, err)
	}
	return body, fams
}

// holdOpen opens url over root:// with Python's XRootD client (mode "w":
// a new file, a few bytes written; "r": for reading) and keeps it open
// until the returned function is called, which closes it.
func holdOpen(t *testing.T, url, mode string) func() {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", `
import sys
from XRootD import client
from XRootD.client.flags import OpenFlags
f = client.File()
st, _ = f.open(sys.argv[1], OpenFlags.NEW if sys.argv[2] == "w" else OpenFlags.READ)
assert st.ok, st.message
if sys.argv[2] == "w":
    st, _ = f.write(b"held" * 1000, 0)
    assert st.ok, st.message
print("open", flush=True)
sys.stdin.readline()
st, _ = f.close()
assert st.ok, st.message
`, url, mode)
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	opened := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(outp).ReadString('\n')
		opened <- l
	}()
	select {
	case l := <-opened:
		if strings.TrimSpace(l) != "open" {
			cmd.Wait()
			t.Fatalf("python XRootD open %s (%s): %q %s", url, mode, l, stderr.String())
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatalf("python XRootD open %s (%s) hung", url, mode)
	}
	var once sync.Once
	closeIt := func() {
		once.Do(func() {
			in.Write([]byte("\n"))
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("python XRootD close %s: %v %s", url, err, stderr.String())
				}
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				t.Errorf("python XRootD close %s hung", url)
			}
		})
	}
	t.Cleanup(closeIt)
	return closeIt
}

// TestOperatorMetrics scrapes the namespace port of a real `kaon up`
// (every role's metrics there) before and after real traffic — curl and
// xrdcp uploads and reads, a read of a missing file, HTTP third-party
// copies in both directions and one that fails, a refused bearer token,
// files held open by Python's XRootD, a quota — checks the text with
// promtool and asserts that the named series move.
func TestOperatorMetrics(t *testing.T) {
	payload := bytes.Repeat([]byte("remote-bytes"), 100000) // 1.2 MB
	var pushed bytes.Buffer
	var mu sync.Mutex
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut:
			mu.Lock()
			defer mu.Unlock()
			io.Copy(&pushed, r.Body)
			w.WriteHeader(http.StatusCreated)
		case r.URL.Path == "/src":
			w.Write(payload)
		default:
			http.NotFound(w, r)
		}
	}))
	defer remote.Close()
	// Probes give every filesystem latency percentiles (gauges promtool
	// once refused for their "quantile" label).
	k := harness.Up(t, "--latency-probe", "100ms", "--tpc-allow-loopback", "--auth", "unix,token")
	for _, path := range []string{"/healthz", "/readyz"} { // an embedded namespace is always ready
		if code := statusOf(t, k.EP.HTTP+path, "Accept: */*"); code != 200 {
			t.Errorf("GET %s of kaon up: %d, want 200", path, code)
		}
	}
	k.MustKaon("mkdir", "-p", "/q")
	k.MustKaon("quota", "set", "--path", "/q", "-u", "0", "--bytes", "1G", "--files", "1000")
	text0, m0 := scrapeText(t, k.EP.HTTP)
	promtoolCheck(t, text0)

	data := randomBytes(t, 2<<20)
	put(t, k, "/q/f", data)
	if b, ok := get(t, k, "/q/f"); !ok || !bytes.Equal(b, data) {
		t.Fatalf("GET /q/f: ok=%v, %d bytes", ok, len(b))
	}
	local := filepath.Join(t.TempDir(), "x")
	os.WriteFile(local, data[:1<<20], 0o644)
	if out, err := exec.Command("xrdcp", "-s", local, k.EP.XRootD+"//q/x").CombinedOutput(); err != nil {
		t.Fatalf("xrdcp upload: %v %s", err, out)
	}
	if out, err := exec.Command("xrdcp", "-s", "-f", k.EP.XRootD+"//q/x", local+".back").CombinedOutput(); err != nil {
		t.Fatalf("xrdcp read: %v %s", err, out)
	}
	if out, err := exec.Command("xrdcp", "-s", "-f", k.EP.XRootD+"//q/missing", local+".no").CombinedOutput(); err == nil {
		t.Fatalf("xrdcp of a missing file succeeded: %s", out)
	}
	copyTo := func(step string, args ...string) string {
		out, err := exec.Command("curl", append([]string{"-sS", "-L", "-X", "COPY"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v %s", step, err, out)
		}
		return string(out)
	}
	if out := copyTo("COPY pull", "-H", "Source: "+remote.URL+"/src", k.EP.HTTP+"/q/pulled"); !strings.Contains(out, "success") {
		t.Fatalf("COPY pull: %s", out)
	}
	if out := copyTo("COPY push", "-H", "Destination: "+remote.URL+"/dst", k.EP.HTTP+"/q/f"); !strings.Contains(out, "success") {
		t.Fatalf("COPY push: %s", out)
	}
	if out := copyTo("COPY pull of a missing source", "-H", "Source: "+remote.URL+"/none", k.EP.HTTP+"/q/none"); !strings.Contains(out, "failure") {
		t.Fatalf("COPY of a missing source: %s", out)
	}
	if code := statusOf(t, k.EP.HTTP+"/q/f", "Authorization: Bearer not.a.token"); code != 401 {
		t.Fatalf("a bogus bearer token: HTTP %d, want 401", code)
	}

	// Files held open are in flight, and no longer once closed.
	inflight := func(name string) float64 {
		_, m := scrapeText(t, k.EP.HTTP)
		v, ok := value(m, name, nil)
		if !ok {
			t.Fatalf("no %s on the namespace port", name)
		}
		return v
	}
	closeW := holdOpen(t, k.EP.XRootD+"//q/held", "w")
	closeR := holdOpen(t, k.EP.XRootD+"//q/x", "r")
	if up, down := inflight("kaon_fst_uploads_in_flight"), inflight("kaon_fst_downloads_in_flight"); up != 1 || down != 1 {
		t.Errorf("with one upload and one read open: uploads_in_flight %v, downloads_in_flight %v; want 1 and 1", up, down)
	}
	closeW()
	closeR()
	harness.WaitFor(t, 10*time.Second, "uploads and reads in flight to be 0 once closed", func() bool {
		return inflight("kaon_fst_uploads_in_flight") == 0 && inflight("kaon_fst_downloads_in_flight") == 0
	})

	var text1 []byte
	var m1 map[string]*dto.MetricFamily
	harness.WaitFor(t, 30*time.Second, "latency percentiles of the filesystems in the metrics", func() bool {
		text1, m1 = scrapeText(t, k.EP.HTTP)
		_, ns := value(m1, "kaon_fs_io_latency_seconds", nil)
		_, fst := value(m1, "kaon_fst_io_latency_seconds", nil)
		return ns && fst
	})
	promtoolCheck(t, text1)
	grew := func(name string, labels map[string]string, by float64) {
		t.Helper()
		a, _ := value(m0, name, labels)
		b, ok := value(m1, name, labels)
		if !ok || b-a < by {
			t.Errorf("%s%v: %v -> %v (present %v), want it to grow by %v", name, labels, a, b, ok, by)
		}
	}
	grew("kaon_xrootd_requests_total", map[string]string{"role": "mgm", "request": "open", "code": "kXR_redirect"}, 2)
	grew("kaon_xrootd_requests_total", map[string]string{"role": "mgm", "request": "open", "code": "kXR_NotFound"}, 1)
	grew("kaon_xrootd_requests_total", map[string]string{"role": "fst", "request": "open", "code": "ok"}, 2)
	grew("kaon_xrootd_request_duration_seconds", map[string]string{"role": "fst", "request": "open"}, 2)
	grew("kaon_xrootd_received_bytes_total", map[string]string{"role": "fst"}, 1<<20)
	if f := m1["kaon_xrootd_request_duration_seconds"]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("kaon_xrootd_request_duration_seconds is not a histogram: %v", f)
	}
	// The storage server's own metrics, on the namespace server's port.
	grew("kaon_http_requests_total", map[string]string{"role": "fst", "route": "data", "method": "PUT", "code": "201"}, 1)
	grew("kaon_fst_io_bytes_total", map[string]string{"op": "write"}, float64(len(data)))
	grew("kaon_tpc_transfers_total", map[string]string{"protocol": "http", "direction": "pull", "result": "done"}, 1)
	grew("kaon_tpc_transfers_total", map[string]string{"protocol": "http", "direction": "push", "result": "done"}, 1)
	grew("kaon_tpc_transfers_total", map[string]string{"protocol": "http", "direction": "pull", "result": "failed"}, 1)
	grew("kaon_tpc_bytes_total", map[string]string{"protocol": "http", "direction": "pull"}, float64(len(payload)))
	grew("kaon_tpc_bytes_total", map[string]string{"protocol": "http", "direction": "push"}, float64(len(data)))
	grew("kaon_auth_refused_total", map[string]string{"method": "token", "reason": "unauthenticated"}, 1)
	grew("kaon_ns_files", nil, 4) // f, x, pulled, held, and nothing of the failed copy
	grew("kaon_ns_bytes", nil, float64(len(data)+1<<20+len(payload)))
	if v, _ := value(m1, "kaon_ns_directories", nil); v != 1 {
		t.Errorf("kaon_ns_directories = %v, want 1 (/q; the root is not counted)", v)
	}
	q := map[string]string{"path": "/q", "kind": "user", "id": "0"}
	grew("kaon_quota_used_files", q, 4)
	grew("kaon_quota_used_bytes", q, float64(len(data)+1<<20+len(payload)))
	if v, _ := value(m1, "kaon_quota_limit_bytes", q); v != 1<<30 {
		t.Errorf("kaon_quota_limit_bytes%v = %v, want 1 GiB", q, v)
	}
	if pushed.Len() != len(data) {
		t.Errorf("the push delivered %d bytes, want %d", pushed.Len(), len(data))
	}

	// Every metric the Grafana dashboard queries is in a real scrape (a
	// drain gives the movement series; kaon_ha_* are a replicated
	// server's, checked in integration/ha), and every query parses.
	k.MustKaon("fs", "config", stripes(t, k, "/q/f")[0].fsid, "configstatus=drain")
	exprs, families := harness.DashboardQueries(t)
	var m2 map[string]*dto.MetricFamily
	harness.WaitFor(t, 60*time.Second, "the drain to move /q/f's stripe (kaon_move_files_total)", func() bool {
		_, m2 = scrapeText(t, k.EP.HTTP)
		v, _ := value(m2, "kaon_move_files_total", map[string]string{"kind": "drain", "result": "done"})
		return v >= 1
	})
	for _, name := range families {
		if m2[name] == nil && !strings.HasPrefix(name, "kaon_ha_") {
			t.Errorf("the dashboard queries %s, which kaon up does not serve", name)
		}
	}
	promqlCheck(t, exprs)
}

// promqlCheck parses every expression with promtool (as recording rules).
func promqlCheck(t *testing.T, exprs []string) {
	t.Helper()
	var rules strings.Builder
	rules.WriteString("groups:\n- name: dashboard\n  rules:\n")
	for i, e := range exprs {
		fmt.Fprintf(&rules, "  - record: dashboard:query%d\n    expr: %q\n", i, e)
	}
	f := filepath.Join(t.TempDir(), "rules.yml")
	os.WriteFile(f, []byte(rules.String()), 0o644)
	if out, err := exec.Command("promtool", "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules of the dashboard's queries: %v\n%s", err, out)
	}
}

// statusOf is the HTTP status of a GET of url with header.
func statusOf(t *testing.T, url, header string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	name, value, _ := strings.Cut(header, ": ")
	req.Header.Set(name, value)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

package metrics

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/ha"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// value is the value of a collector with one series (counter or gauge).
func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// TestInstrument: requests are counted by route, method and status, with
// the bytes both ways; /metrics is served beside the handler.
func TestInstrument(t *testing.T) {
	reg := NewRegistry()
	h := NewHTTP(reg, "mgm", NamespaceRoute)
	srv := httptest.NewServer(Serve(h.Instrument(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPut {
			w.WriteHeader(http.StatusCreated)
		}
		w.Write(b)
	})), reg, nil))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/data/f", strings.NewReader("hello"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp, err := http.Get(srv.URL + "/api/v1/stat"); err == nil {
		resp.Body.Close()
	}
	if v := value(t, h.requests.WithLabelValues("mgm", "dav", "PUT", "201")); v != 1 {
		t.Errorf("PUT counted %v times", v)
	}
	if v := value(t, h.requests.WithLabelValues("mgm", "api", "GET", "200")); v != 1 {
		t.Errorf("GET counted %v times", v)
	}
	if in, out := value(t, h.in.WithLabelValues("mgm", "dav")), value(t, h.out.WithLabelValues("mgm", "dav")); in != 5 || out != 5 {
		t.Errorf("bytes in %v out %v, want 5 and 5", in, out)
	}
	resp, err = http.Get(srv.URL + Path)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `kaon_http_requests_total{code="201",method="PUT",role="mgm",route="dav"} 1`) {
		t.Errorf("/metrics does not show the request:\n%s", body)
	}
}

// TestMovement: the hook sets what drain and balance report; a nil one
// ignores every call.
func TestMovement(t *testing.T) {
	var none *Movement
	none.Progress("drain", "3", 1, 2, true)
	none.Moved("drain", "3", 10, true)
	reg := prometheus.NewRegistry()
	m := NewMovement(reg)
	m.Progress("drain", "3", 7, 700, true)
	m.Moved("drain", "3", 100, true)
	m.Moved("drain", "3", 50, false)
	if v := value(t, m.Remaining.WithLabelValues("drain", "3")); v != 7 {
		t.Errorf("files remaining %v", v)
	}
	if v := value(t, m.Bytes.WithLabelValues("drain", "3")); v != 100 {
		t.Errorf("bytes moved %v (a failed move counts no bytes)", v)
	}
	if v := value(t, m.Files.WithLabelValues("drain", "3", "failed")); v != 1 {
		t.Errorf("failed moves %v", v)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		n += len(f.Metric)
	}
	if n != 6 {
		t.Errorf("%d series, want 6", n)
	}
}

// TestAccess: --metrics-access open serves every client, loopback only
// clients connected from this host (403 otherwise), admin whoever the
// admin check lets through; the rest of the endpoint is not affected.
func TestAccess(t *testing.T) {
	reg := NewRegistry()
	admin := func(r *http.Request) error {
		if r.Header.Get("X-Admin") == "" {
			return kerr.New(kerr.Unauthenticated, r.Method, Path, "admin only")
		}
		return nil
	}
	get := func(access, remote string, hdr bool, path string) int {
		t.Helper()
		allow, err := Allow(access, admin)
		if err != nil {
			t.Fatal(err)
		}
		h := Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }), reg, allow)
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = remote
		if hdr {
			r.Header.Set("X-Admin", "1")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for _, c := range []struct {
		access, remote string
		admin          bool
		path           string
		want           int
	}{
		{Open, "192.0.2.7:4000", false, Path, 200},
		{Loopback, "127.0.0.1:4000", false, Path, 200},
		{Loopback, "[::1]:4000", false, Path, 200},
		{Loopback, "192.0.2.7:4000", false, Path, 403},
		{Loopback, "192.0.2.7:4000", false, "/data/f", http.StatusTeapot},
		{Admin, "127.0.0.1:4000", false, Path, 401},
		{Admin, "192.0.2.7:4000", true, Path, 200},
	} {
		if got := get(c.access, c.remote, c.admin, c.path); got != c.want {
			t.Errorf("%s access, %s from %s (admin %v): %d, want %d", c.access, c.path, c.remote, c.admin, got, c.want)
		}
	}
	if _, err := Allow("everyone", admin); err == nil {
		t.Error("--metrics-access everyone accepted")
	}
}

// gather is what reg gathers, as "name{label=value,...} value" lines.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.Metric {
			var ls []string
			for _, l := range m.Label {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			out[f.GetName()+"{"+strings.Join(ls, ",")+"}"] = v
		}
	}
	return out
}

// TestRefusalsAndRoles: refusals are counted by method and reason, every
// configured method has a series from the start; the root:// listeners
// of two roles share one registry, each request under its role.
func TestRefusalsAndRoles(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := &auth.Refusals{Name: func(auth.Authenticator) string { return "token" }}
	RegisterRefusals(reg, r, "token", "none")
	chain := auth.Chain{r, failing{kerr.New(kerr.Expired, "", "", "token expired")}}
	chain.Authenticate(context.Background(), &auth.Request{})
	chain.Authenticate(context.Background(), &auth.Request{})
	x := RegisterXRootD(reg)
	x.Role("mgm", func() []*xrootd.Server { return nil }).Observe("open", "kXR_redirect", time.Millisecond)
	x.Role("fst", func() []*xrootd.Server { return nil }).Observe("open", "ok", time.Millisecond)
	got := gather(t, reg)
	for k, want := range map[string]float64{
		"kaon_auth_refused_total{method=token,reason=expired}":                2,
		"kaon_auth_refused_total{method=token,reason=unauthenticated}":        0,
		"kaon_auth_refused_total{method=none,reason=unauthenticated}":         0,
		"kaon_xrootd_requests_total{code=kXR_redirect,request=open,role=mgm}": 1,
		"kaon_xrootd_requests_total{code=ok,request=open,role=fst}":           1,
		"kaon_xrootd_request_duration_seconds{request=open,role=fst}":         1,
		"kaon_xrootd_connections{role=mgm}":                                   0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
}

// TestHAFigures: the role is one series per role, 1 for the current one.
func TestHAFigures(t *testing.T) {
	reg := prometheus.NewRegistry()
	RegisterHA(reg, func() ha.Figures { return ha.Figures{Role: ha.Standby, Term: 7, Applied: 40, Lag: 2} })
	got := gather(t, reg)
	for k, want := range map[string]float64{"kaon_ha_role{role=standby}": 1, "kaon_ha_role{role=active}": 0,
		"kaon_ha_role{role=starting}": 0, "kaon_ha_term{}": 7, "kaon_ha_applied_revision{}": 40, "kaon_ha_standby_lag_revisions{}": 2} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
}

type failing struct{ err error }

func (f failing) Authenticate(context.Context, *auth.Request) (auth.Principal, bool, error) {
	return auth.Nobody, true, f.err
}

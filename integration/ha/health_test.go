package ha

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/kaon-storage/kaon/integration/harness"
)

// get is a GET of url without following redirects: status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// haFigures scrapes url/metrics (answered by that server, never
// redirected), checks it with promtool, and returns its role (the
// kaon_ha_role series at 1), term and whether the namespace's own
// metrics are there.
func haFigures(t *testing.T, url string) (role string, term float64, namespace bool, err error) {
	code, body := get(t, url+"/metrics")
	if code != 200 {
		return "", 0, false, fmt.Errorf("GET %s/metrics: %d %s", url, code, body)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return "", 0, false, err
	}
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if !strings.HasPrefix(l, "kaon_ns_") { // the names read "ns" as nanoseconds
				t.Errorf("promtool check metrics of %s: %s", url, l)
			}
		}
	}
	for _, m := range fams["kaon_ha_role"].GetMetric() {
		if m.GetGauge().GetValue() == 1 {
			role = m.GetLabel()[0].GetValue()
		}
	}
	if f := fams["kaon_ha_term"]; f != nil {
		term = f.Metric[0].GetGauge().GetValue()
	}
	for _, name := range []string{"kaon_ha_applied_revision", "kaon_ha_standby_lag_revisions", "go_goroutines"} {
		if fams[name] == nil {
			return "", 0, false, fmt.Errorf("%s/metrics has no %s", url, name)
		}
	}
	var none *dto.MetricFamily
	return role, term, fams["kaon_ns_files"] != none, nil
}

// TestHealthOfReplicatedServers: /healthz is 200 on every namespace
// server; /readyz is 200 on the active one and 503 naming the active one
// on a standby, and they swap with a step-down; every server answers
// /metrics itself with its role and the active server's term (a standby
// without the namespace's metrics); without etcd's quorum no server is
// ready, and all are still alive.
func TestHealthOfReplicatedServers(t *testing.T) {
	in := newInstance(t, 2)
	a := in.waitActive(0, "server 0 is active")
	check := func(active, standby int, step string) float64 {
		t.Helper()
		var term float64
		in.eventually(step, 30*time.Second, func() error {
			for _, u := range in.http {
				if code, body := get(t, u+"/healthz"); code != 200 {
					return fmt.Errorf("%s/healthz: %d %s", u, code, body)
				}
			}
			if code, body := get(t, in.http[active]+"/readyz"); code != 200 || strings.TrimSpace(body) != "ready" {
				return fmt.Errorf("active %s/readyz: %d %s", in.http[active], code, body)
			}
			if code, body := get(t, in.http[standby]+"/readyz"); code != 503 || !strings.Contains(body, "standby") ||
				!strings.Contains(body, in.http[active]) {
				return fmt.Errorf("standby %s/readyz: %d %q, want 503 naming %s", in.http[standby], code, body, in.http[active])
			}
			role, t1, ns, err := haFigures(t, in.http[active])
			if err != nil || role != "active" || !ns {
				return fmt.Errorf("active's metrics: role %q, namespace metrics %v, %v", role, ns, err)
			}
			role, t2, ns, err := haFigures(t, in.http[standby])
			if err != nil || role != "standby" || ns {
				return fmt.Errorf("standby's metrics: role %q, namespace metrics %v, %v", role, ns, err)
			}
			if rev, _ := in.term(); t1 != float64(rev) || t2 != t1 {
				return fmt.Errorf("kaon_ha_term: active %v, standby %v; ha/term in etcd %d", t1, t2, rev)
			}
			term = t1
			return nil
		})
		return term
	}
	term0 := check(a, 1-a, "health and metrics with server 0 active")
	// The Grafana dashboard's HA panels read what a standby serves.
	_, families := harness.DashboardQueries(t)
	_, body := get(t, in.http[1-a]+"/metrics")
	for _, name := range families {
		if strings.HasPrefix(name, "kaon_ha_") && !strings.Contains(body, "\n"+name) {
			t.Errorf("the dashboard queries %s, which a standby does not serve", name)
		}
	}
	if o, e, code := in.kaon(in.http[a], "ns", "step-down"); code != 0 {
		t.Fatalf("kaon ns step-down: %s %s", o, e)
	}
	b := in.waitActiveOther(a, "the other server is active after the step-down")
	if term1 := check(b, a, "health and metrics after the step-down"); term1 <= term0 {
		t.Fatalf("kaon_ha_term %v after a step-down, was %v", term1, term0)
	}

	in.etcd.StopMember(1)
	in.etcd.StopMember(2)
	in.eventually("no server ready without etcd's quorum", 60*time.Second, func() error {
		for _, u := range in.http {
			if code, body := get(t, u+"/readyz"); code != 503 || !strings.Contains(body, "unavailable") {
				return fmt.Errorf("%s/readyz: %d %s", u, code, body)
			}
			if code, body := get(t, u+"/healthz"); code != 200 {
				return fmt.Errorf("%s/healthz: %d %s", u, code, body)
			}
		}
		return nil
	})
	in.etcd.StartMember(1, false)
	in.etcd.StartMember(2, true)
	in.waitActive(-1, "an active server once the members are back")
}

package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Dashboard is the Grafana dashboard the repository ships.
const Dashboard = "deploy/grafana/kaon.json"

var (
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	metricName = regexp.MustCompile(`\b(?:kaon|go|process)_[a-zA-Z0-9_]+\b`)
)

// DashboardQueries are the PromQL expressions of every panel of the
// dashboard, and the metric families they read (a histogram's _bucket,
// _sum and _count series named by their family).
func DashboardQueries(t testing.TB) (exprs, families []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(RepoRoot(), Dashboard))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", Dashboard, err)
	}
	seen := map[string]bool{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			for _, n := range metricName.FindAllString(quoted.ReplaceAllString(tg.Expr, `""`), -1) {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if strings.HasSuffix(n, "_seconds"+suffix) {
						n = strings.TrimSuffix(n, suffix)
					}
				}
				seen[n] = true
			}
		}
	}
	for n := range seen {
		families = append(families, n)
	}
	sort.Strings(families)
	if len(exprs) == 0 || len(families) == 0 {
		t.Fatalf("%s: no queries", Dashboard)
	}
	return exprs, families
}

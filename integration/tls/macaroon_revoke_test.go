package tls

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/auth/x509auth/x509test"
)

// TestMacaroonRevokedDN: a macaroon minted with a grid proxy works until
// its DN is removed from the grid-mapfile, then the same macaroon is
// refused (403 naming the DN) long before it expires; the minting is in
// the audit log (who, path, activities, expiry), the macaroon is not.
func TestMacaroonRevokedDN(t *testing.T) {
	grid := x509test.NewCA("Grid")
	site := harness.NewGridSite(t, grid, aliceMap)
	dir, caDir, gridmap := site.Dir, site.CADir, site.Gridmap
	proxy := filepath.Join(t.TempDir(), "proxy")
	if err := grid.User("Alice").Proxy(x509test.ProxyOpts{}).WriteProxyFile(proxy); err != nil {
		t.Fatal(err)
	}
	d := t.TempDir()
	k := harness.Start(t, d, "up", "--data", d, "--http", "127.0.0.1:0", "--tls", "--tls-dir", filepath.Join(dir, "tls"),
		"--auth", "x509,unix", "--tls-ca-dir", caDir, "--grid-mapfile", gridmap)
	k.MustKaon("mkdir", "/alice")
	k.MustKaon("chown", "1:1", "/alice")
	ep := readEP(t, d)
	src := randomFile(t, 1<<10)
	must(t, nil, "curl", "-sSfL", "--cacert", ep.CA, "--cert", proxy, "--key", proxy, "-T", src, ep.HTTPS+"/alice/f")

	out, _ := run(t, nil, "curl", "-sS", "--cacert", ep.CA, "--cert", proxy, "--key", proxy, "-X", "POST",
		"-H", "Content-Type: application/macaroon-request", "-d", `{"caveats": ["activity:DOWNLOAD"], "validity": "PT30M"}`, ep.HTTPS+"/alice")
	var r struct{ Macaroon string }
	if json.Unmarshal([]byte(out), &r); r.Macaroon == "" {
		t.Fatalf("macaroon request: %s", out)
	}
	get := func() string {
		out, _ := run(t, nil, "curl", "-sSL", "--cacert", ep.CA, "-H", "Authorization: Bearer "+r.Macaroon, "-o", "/dev/null", "-w", "%{http_code}", ep.HTTPS+"/alice/f")
		return out
	}
	if out := get(); out != "200" {
		t.Fatalf("GET with the macaroon while the DN is mapped: %s", out)
	}
	// Remove the DN (another line stays: an operator's edit, not an
	// empty file); an mtime in the past so that the change is seen
	// whatever the file system's timestamp granularity.
	os.WriteFile(gridmap, []byte(`"/DC=org/DC=kaon-test/O=Users/CN=Bob" daemon`+"\n"), 0o644)
	past := time.Now().Add(-time.Hour)
	os.Chtimes(gridmap, past, past)
	out, _ = run(t, nil, "curl", "-sSL", "--cacert", ep.CA, "-H", "Authorization: Bearer "+r.Macaroon, "-w", "\n%{http_code}", ep.HTTPS+"/alice/f")
	if !strings.HasSuffix(out, "\n403") || !strings.Contains(out, aliceDN) || !strings.Contains(out, "no longer in the grid-mapfile") {
		t.Fatalf("the macaroon of a DN removed from the grid-mapfile: %s", out)
	}
	audit, _ := os.ReadFile(filepath.Join(d, "audit.log"))
	var minted bool
	for _, line := range strings.Split(string(audit), "\n") {
		if strings.Contains(line, `"op":"macaroon"`) && strings.Contains(line, `"path":"/alice"`) && strings.Contains(line, `"user":"daemon"`) &&
			strings.Contains(line, "DOWNLOAD") && strings.Contains(line, "expires") {
			minted = true
		}
	}
	if !minted {
		t.Fatalf("no audit record of the minting:\n%s", audit)
	}
	if strings.Contains(string(audit), r.Macaroon[10:40]) || strings.Contains(k.Logs(), r.Macaroon[10:40]) {
		t.Fatal("the macaroon reached a log")
	}
}

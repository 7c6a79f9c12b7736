package tls

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/auth/x509auth/x509test"
)

// TestMacaroons: an X.509 client (curl with a proxy) asks for a macaroon
// as XrdMacaroons and dCache take the request (POST,
// application/macaroon-request, caveats and validity) and gets one for
// the path with those activities only, as its mapped user; over plaintext
// it is refused; gfal-copy with the proxy drives an HTTP third-party copy
// between two Kaon instances with macaroons (as FTS does); no macaroon
// reaches a log.
func TestMacaroons(t *testing.T) {
	grid := x509test.NewCA("Grid")
	site := harness.NewGridSite(t, grid, aliceMap)
	dir, caDir, gridmap := site.Dir, site.CADir, site.Gridmap
	proxy := filepath.Join(t.TempDir(), "proxy")
	if err := grid.User("Alice").Proxy(x509test.ProxyOpts{}).WriteProxyFile(proxy); err != nil {
		t.Fatal(err)
	}
	start := func() (*harness.Process, harness.Endpoints) {
		d := t.TempDir()
		k := harness.Start(t, d, "up", "--data", d, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--tls", "--tls-dir", filepath.Join(dir, "tls"),
			"--auth", "x509,unix", "--tls-ca-dir", caDir, "--grid-mapfile", gridmap, "--tpc-allow-loopback")
		k.MustKaon("mkdir", "/alice")
		k.MustKaon("chown", "1:1", "/alice")
		k.MustKaon("chmod", "700", "/alice")
		return k, readEP(t, d)
	}
	a, epa := start()
	src := randomFile(t, 3<<20)
	must(t, nil, "curl", "-sSfL", "--cacert", epa.CA, "--cert", proxy, "--key", proxy, "-T", src, epa.HTTPS+"/alice/src")

	mint := func(url, body string) (string, string) {
		out, _ := run(t, nil, "curl", "-sS", "--cacert", epa.CA, "--cert", proxy, "--key", proxy, "-X", "POST",
			"-H", "Content-Type: application/macaroon-request", "-d", body, "-w", "\n%{http_code}", url)
		i := strings.LastIndexByte(out, '\n')
		var r struct {
			Macaroon  string `json:"macaroon"`
			ExpiresIn int    `json:"expires_in"`
		}
		json.Unmarshal([]byte(out[:i]), &r)
		return r.Macaroon, out
	}
	mac, out := mint(epa.HTTPS+"/alice", `{"caveats": ["activity:DOWNLOAD,LIST"], "validity": "PT30M"}`)
	if mac == "" || !strings.HasSuffix(out, "\n200") || !strings.Contains(out, `"expires_in":1800`) {
		t.Fatalf("macaroon request: %s", out)
	}
	withMac := func(m string, args ...string) string {
		out, _ := run(t, nil, "curl", append([]string{"-sSL", "--cacert", epa.CA, "-H", "Authorization: Bearer " + m, "-w", "\n%{http_code}"}, args...)...)
		return out
	}
	got := filepath.Join(t.TempDir(), "got")
	if out := withMac(mac, "-o", got, epa.HTTPS+"/alice/src"); !strings.HasSuffix(out, "200") {
		t.Fatalf("GET with the macaroon: %s", out)
	}
	sameFile(t, src, got)
	// Only its activities, only as Alice's user, only over TLS.
	if out := withMac(mac, "-T", src, epa.HTTPS+"/alice/up"); !strings.HasSuffix(out, "403") {
		t.Fatalf("a DOWNLOAD macaroon uploaded: %s", out)
	}
	if out := withMac(mac, epa.HTTP+"/alice/src"); !strings.HasSuffix(out, "403") || !strings.Contains(out, "plaintext") {
		t.Fatalf("a macaroon over plaintext http: %s", out)
	}
	if out := withMac(mac[:len(mac)-4]+"AAAA", epa.HTTPS+"/alice/src"); !strings.HasSuffix(out, "403") || !strings.Contains(out, "macaroon refused") {
		t.Fatalf("a tampered macaroon: %s", out)
	}
	if _, out := mint(epa.HTTPS+"/alice", `{"caveats": ["activity:DOWNLOAD"], "validity": "soon"}`); !strings.HasSuffix(out, "400") {
		t.Fatalf("a malformed macaroon request: %s", out)
	}
	// Without a certificate this loopback client is its unix user, root:
	// a macaroon never acts as root.
	if out, _ := run(t, nil, "curl", "-sS", "--cacert", epa.CA, "-X", "POST", "-H", "Content-Type: application/macaroon-request",
		"-d", `{"caveats": ["activity:DOWNLOAD"]}`, "-w", "\n%{http_code}", epa.HTTPS+"/alice"); !strings.HasSuffix(out, "403") || !strings.Contains(out, "never acts as root") {
		t.Fatalf("a macaroon for root: %s", out)
	}

	// gfal-copy with the proxy: an HTTP-TPC from A to B with macaroons.
	bk, epb := start()
	env := []string{"X509_USER_PROXY=" + proxy, "X509_CERT_DIR=" + caDir, "GFAL_PYTHONBIN=/usr/bin/python3"}
	for _, mode := range []string{"pull", "push"} {
		must(t, env, "gfal-copy", "--copy-mode", mode, epa.HTTPS+"/alice/src", epb.HTTPS+"/alice/"+mode)
		must(t, nil, "curl", "-sSfL", "--cacert", epa.CA, "--cert", proxy, "--key", proxy, "-o", got, epb.HTTPS+"/alice/"+mode)
		sameFile(t, src, got)
		if st := bk.MustKaon("stat", "/alice/"+mode); !strings.Contains(st, "Uid: 1 ") {
			t.Fatalf("the %s copy is not Alice's user's:\n%s", mode, st)
		}
	}
	// The pull read the source with a macaroon gfal got from A.
	if !strings.Contains(a.Logs(), "path=/alice/src status=200") || !strings.Contains(a.Logs(), "principal=daemon/macaroon") {
		t.Fatal("gfal's copies used no macaroon of the source")
	}
	audit, _ := os.ReadFile(filepath.Join(a.Dir, "audit.log"))
	for _, k := range []*harness.Process{a, bk} {
		if strings.Contains(k.Logs(), mac[10:40]) || strings.Contains(string(audit), mac[10:40]) {
			t.Fatal("a macaroon reached a log")
		}
	}
}

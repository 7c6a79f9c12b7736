package frontends

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/auth/x509auth/x509test"
	"github.com/kaon-storage/kaon/internal/frontendtest"
)

// TestX509Conformance runs the conformance scenarios with grid
// credentials only (kaon up --tls --auth x509,gsi: no unix peers): HTTPS
// with the proxy as the TLS client certificate (curl), root:// with gsi
// (the Python bindings, X509_USER_PROXY). Alice's DN is the local user
// daemon, owner of the scenarios' tree; Bob's is the local user nobody.
// Both end as the same principal the same service authorizes, so every
// outcome is the one of TestConformance. Forged, expired, unknown-CA and
// unmapped credentials never read or write a byte; no key reaches a log.
func TestX509Conformance(t *testing.T) {
	grid, other := x509test.NewRSACA("Grid"), x509test.NewRSACA("Elsewhere")
	site := harness.NewGridSite(t, grid, `"/DC=org/DC=kaon-test/O=Users/CN=Alice" daemon
"/DC=org/DC=kaon-test/O=Users/CN=Bob" nobody
`)
	dir, caDir, gridmap := site.Dir, site.CADir, site.Gridmap
	k := harness.Start(t, dir, "up", "--data", dir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--tls",
		"--auth", "x509,gsi", "--tls-ca-dir", caDir, "--grid-mapfile", gridmap)
	k.EP = harness.ReadEndpoints(t, dir)

	creds := t.TempDir()
	proxy := func(name string, c *x509test.Cred) string {
		p := filepath.Join(creds, name)
		if err := c.WriteProxyFile(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	alice, bob := proxy("alice", grid.User("Alice").Proxy(x509test.ProxyOpts{})), proxy("bob", grid.User("Bob").Proxy(x509test.ProxyOpts{}))
	// The driver script and a local file, readable by nobody.
	src := frontendtest.LocalDir(t)
	_, file, _, _ := runtime.Caller(0)
	sb, err := os.ReadFile(filepath.Join(filepath.Dir(file), "xrd_driver.py"))
	if err != nil {
		t.Fatal(err)
	}
	script, small := filepath.Join(src, "xrd_driver.py"), filepath.Join(src, "small")
	os.WriteFile(script, sb, 0o644)
	os.WriteFile(small, []byte("refused content"), 0o644)
	// gsi clients check the host certificate's name: localhost.
	_, port, _ := strings.Cut(strings.TrimPrefix(k.EP.XRootD, "root://"), ":")
	xrdURL := "root://localhost:" + port
	mk := func(creds [2]string) []frontendtest.Driver {
		return []frontendtest.Driver{
			httpDriver{base: k.EP.HTTPS, certs: creds, cacert: k.EP.CA},
			xrdDriver{url: xrdURL, script: script, env: []string{"X509_CERT_DIR=" + caDir}, proxies: creds},
		}
	}
	frontendtest.ConformanceAs(t, cli{k}, mk([2]string{alice, bob}), "/x509-", &[2]uint32{1, 1})

	// Refused credentials: nothing read, nothing written.
	now := time.Now()
	bad := map[string]string{
		"forged":     proxy("forged", grid.User("Alice").Proxy(x509test.ProxyOpts{SignWith: grid.User("Mallory").Key})),
		"unknown CA": proxy("other", other.User("Alice").Proxy(x509test.ProxyOpts{})),
		"unmapped":   proxy("carol", grid.User("Carol").Proxy(x509test.ProxyOpts{})),
		"expired":    proxy("expired", grid.User("Alice").Proxy(x509test.ProxyOpts{NotBefore: now.Add(-3 * time.Hour), NotAfter: now.Add(-time.Hour)})),
	}
	target := "/x509-http/new/sub/g" // daemon's, 0600 (the scenarios left it)
	for what, p := range bad {
		for _, d := range mk([2]string{p, p}) {
			refused := frontendtest.Permission                                                                                              // 403, kXR_NotAuthorized
			if r := d.Do(t, false, "read", target, "0", "-1"); r.Outcome != refused || bytes.Contains(r.Data, []byte("replaced content")) { // what the scenarios left in it
				t.Fatalf("%s %s reads: %s (%s)", d.Name(), what, r.Outcome, r.Detail)
			}
			w := "/x509-http/forged-" + d.Name() + "-" + strconv.Itoa(len(what))
			if r := d.Do(t, false, "put", small, w); r.Outcome != refused {
				t.Fatalf("%s %s writes: %s (%s)", d.Name(), what, r.Outcome, r.Detail)
			}
			if _, _, code := k.Kaon("stat", w); code == 0 {
				t.Fatalf("%s %s wrote %s", d.Name(), what, w)
			}
			if r := d.Do(t, false, "rm", target); r.Outcome != refused {
				t.Fatalf("%s %s deletes: %s (%s)", d.Name(), what, r.Outcome, r.Detail)
			}
		}
	}
	if _, _, code := k.Kaon("stat", target); code != 0 {
		t.Fatalf("%s was removed by a refused credential", target)
	}
	audit, _ := os.ReadFile(filepath.Join(dir, "audit.log"))
	for _, m := range []string{`"method":"x509"`, `"method":"gsi"`} {
		if !bytes.Contains(audit, []byte(m)) {
			t.Fatalf("the audit log records no %s principal", m)
		}
	}
	logs := k.Logs() + string(audit)
	for _, p := range append([]string{alice, bob}, bad["forged"]) {
		b, _ := os.ReadFile(p)
		i := bytes.Index(b, []byte("PRIVATE KEY-----"))
		if i < 0 || strings.Contains(logs, string(b[i+40:i+80])) || strings.Contains(logs, "PRIVATE KEY") {
			t.Fatalf("a key of %s is in the logs", p)
		}
	}
}

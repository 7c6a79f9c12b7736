package webview

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/auth/x509auth/x509test"
	"github.com/kaon-storage/kaon/internal/tlsconf"
)

// TestPageWithX509Certificate: a client certificate authenticates the
// web view as it does WebDAV (the same chain): the page is its mapped
// user's, and a form post with the session's CSRF token acts as that
// user. Driven with curl as a browser would (Accept: text/html, a cookie
// jar): Chromium would need an NSS database to present a certificate.
func TestPageWithX509Certificate(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("maps a DN to the local user daemon and runs kaon as root")
	}
	dir := t.TempDir()
	local, err := tlsconf.LocalCA(filepath.Join(dir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	grid := x509test.NewCA("Grid")
	caDir := filepath.Join(dir, "certificates")
	if err := x509test.WriteCADir(caDir, grid); err != nil {
		t.Fatal(err)
	}
	h, err := tlsconf.SubjectHash(local.Cert)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(local.HashDir, h+".0"))
	_ = os.WriteFile(filepath.Join(caDir, h+".0"), b, 0o644)
	gridmap := filepath.Join(dir, "grid-mapfile")
	_ = os.WriteFile(gridmap, []byte(`"/DC=org/DC=kaon-test/O=Users/CN=Alice" daemon`+"\n"), 0o644)
	k := harness.Start(t, dir, "up", "--data", dir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--tls",
		"--auth", "x509,unix", "--tls-ca-dir", caDir, "--grid-mapfile", gridmap)
	ep := harness.ReadEndpoints(t, dir)
	k.MustKaon("mkdir", "/alice")
	k.MustKaon("chown", "1:1", "/alice")
	k.MustKaon("chmod", "700", "/alice")
	k.MustKaon("mkdir", "/rootonly")
	k.MustKaon("chmod", "700", "/rootonly")
	proxy := filepath.Join(t.TempDir(), "proxy")
	if err := grid.User("Alice").Proxy(x509test.ProxyOpts{}).WriteProxyFile(proxy); err != nil {
		t.Fatal(err)
	}
	jar := filepath.Join(t.TempDir(), "cookies")
	as := []string{"--cacert", ep.CA, "--cert", proxy, "--key", proxy, "-b", jar, "-c", jar, "-H", "Accept: text/html"}

	page, code := curl(t, append(as, ep.HTTPS+"/alice/")...)
	if code != 200 || !strings.Contains(page, "daemon (x509)") {
		t.Fatalf("the page with Alice's proxy: %d\n%s", code, page)
	}
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in\n%s", page)
	}
	if _, code := curl(t, append(as, "-d", "csrf="+m[1], "-d", "op=mkdir", "-d", "name=by-cert", ep.HTTPS+"/alice/")...); code != 303 {
		t.Fatalf("mkdir through the page with the certificate: %d", code)
	}
	if st := k.MustKaon("stat", "/alice/by-cert"); !strings.Contains(st, "Uid: 1 ") {
		t.Errorf("the directory made with the certificate is not daemon's:\n%s", st)
	}
	// The DN's user may not list root's 0700 directory: neither page nor listing.
	if page, code := curl(t, append(as, ep.HTTPS+"/rootonly/")...); code != 403 || strings.Contains(page, `id="listing"`) {
		t.Errorf("root's directory with Alice's proxy: %d\n%s", code, page)
	}
	// Without the certificate, the same form is refused (the loopback
	// client over TLS without a certificate is its unix user, root: the
	// CSRF token of Alice's session is no use in another session).
	if _, code := curl(t, "--cacert", ep.CA, "-d", "csrf="+m[1], "-d", "op=mkdir", "-d", "name=forged", ep.HTTPS+"/alice/"); code != 403 {
		t.Errorf("a form post without the session: %d, want 403", code)
	}
}

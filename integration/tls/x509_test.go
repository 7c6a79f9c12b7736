package tls

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/auth/x509auth/x509test"
)

// TestX509Proxies: curl, davix and gfal with an RFC 3820 proxy
// (X509_USER_PROXY) are the local user the grid-mapfile maps the DN to,
// and get no more than that user; an unmapped DN (a valid certificate, no
// local account), an expired proxy, a proxy signed by the wrong key and a
// certificate from an unknown CA are refused (403 naming why), even from
// a loopback client that would otherwise be its unix user.
func TestX509Proxies(t *testing.T) {
	grid, other := x509test.NewCA("Grid"), x509test.NewCA("Elsewhere")
	site := harness.NewGridSite(t, grid, aliceMap)
	dir, caDir, gridmap := site.Dir, site.CADir, site.Gridmap
	alice := grid.User("Alice")

	vomsServer := grid.Host("voms.kaon.test")
	vomsDir := filepath.Join(dir, "vomsdir")
	if err := x509test.WriteLSC(vomsDir, "kaontest", vomsServer); err != nil {
		t.Fatal(err)
	}
	k := harness.Start(t, dir, "up", "--data", dir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--tls",
		"--auth", "x509,unix", "--tls-ca-dir", caDir, "--grid-mapfile", gridmap, "--voms-dir", vomsDir)
	ep := readEP(t, dir)
	// As local root (unix peer, plaintext): a directory only daemon may
	// use, and one only root may write.
	k.MustKaon("mkdir", "/alice")
	k.MustKaon("chown", "1:1", "/alice")
	k.MustKaon("chmod", "700", "/alice")
	k.MustKaon("mkdir", "/rootonly")
	k.MustKaon("chmod", "755", "/rootonly")

	creds := t.TempDir()
	proxy := func(name string, c *x509test.Cred) string {
		p := filepath.Join(creds, name)
		if err := c.WriteProxyFile(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := proxy("good", alice.Proxy(x509test.ProxyOpts{}))
	now := time.Now()
	bad := map[string]string{
		"expired proxy":             proxy("expired", alice.Proxy(x509test.ProxyOpts{NotBefore: now.Add(-3 * time.Hour), NotAfter: now.Add(-time.Hour)})),
		"proxy of the wrong key":    proxy("forged", alice.Proxy(x509test.ProxyOpts{SignWith: grid.User("Mallory").Key})),
		"certificate of unknown CA": proxy("unknown", other.User("Alice").Proxy(x509test.ProxyOpts{})),
	}
	unmapped := proxy("unmapped", grid.User("Bob").Proxy(x509test.ProxyOpts{}))

	whoami := func(p string) (int, map[string]any, string) {
		out, _ := run(t, nil, "curl", "-sS", "--cacert", ep.CA, "--cert", p, "--key", p, "-w", "\n%{http_code}", ep.HTTPS+"/api/v1/whoami")
		i := strings.LastIndexByte(out, '\n')
		var m map[string]any
		json.Unmarshal([]byte(out[:i]), &m)
		code := 0
		for _, c := range out[i+1:] {
			code = code*10 + int(c-'0')
		}
		return code, m, out
	}
	if code, m, out := whoami(good); code != 200 || m["name"] != "daemon" || m["method"] != "x509" || m["fqans"] != nil {
		t.Fatalf("whoami with Alice's proxy: %s", out)
	}
	// VOMS attributes a VOMS server of the VOMS directory signed are read.
	voms := x509test.VOMS{Server: vomsServer, VO: "kaontest", FQANs: []string{"/kaontest/Role=production/Capability=NULL"}}
	if code, m, out := whoami(proxy("voms", alice.Proxy(x509test.ProxyOpts{VOMS: &voms}))); code != 200 || m["name"] != "daemon" ||
		fmt.Sprint(m["fqans"]) != "[/kaontest/Role=production/Capability=NULL]" {
		t.Fatalf("whoami with VOMS attributes: %s", out)
	}
	if code, _, out := whoami(unmapped); code != http.StatusForbidden || !strings.Contains(out, "/CN=Bob is not in the grid-mapfile") {
		t.Fatalf("whoami with an unmapped DN: %s", out)
	}
	for name, p := range bad {
		if code, _, out := whoami(p); code != http.StatusForbidden || !strings.Contains(out, "client certificate refused") {
			t.Fatalf("%s: %s", name, out)
		}
	}

	src := randomFile(t, 1<<20)
	out := t.TempDir()
	// curl with the proxy writes and reads where only daemon may.
	must(t, nil, "curl", "-sSfL", "--cacert", ep.CA, "--cert", good, "--key", good, "-T", src, ep.HTTPS+"/alice/c")
	// davix takes the proxy file as its credential (-E $X509_USER_PROXY),
	// gfal finds it through X509_USER_PROXY.
	penv := []string{"X509_USER_PROXY=" + good, "X509_CERT_DIR=" + caDir, "GFAL_PYTHONBIN=/usr/bin/python3"}
	must(t, nil, "davix-put", "--capath", caDir, "-E", good, "--key", good, src, ep.HTTPS+"/alice/d")
	must(t, nil, "davix-get", "--capath", caDir, "-E", good, "--key", good, ep.HTTPS+"/alice/d", filepath.Join(out, "d"))
	sameFile(t, src, filepath.Join(out, "d"))
	must(t, penv, "gfal-copy", "-f", "file://"+src, ep.HTTPS+"/alice/g")
	must(t, penv, "gfal-copy", "-f", ep.HTTPS+"/alice/g", "file://"+filepath.Join(out, "g"))
	sameFile(t, src, filepath.Join(out, "g"))
	// What the proxies wrote belongs to daemon.
	for _, f := range []string{"/alice/c", "/alice/d", "/alice/g"} {
		if st := k.MustKaon("stat", f); !strings.Contains(st, "Uid: 1 ") {
			t.Fatalf("%s is not daemon's (uid 1):\n%s", f, st)
		}
	}
	// The DN grants no more than daemon: not root's directory.
	if o, err := run(t, nil, "curl", "-sSfL", "--cacert", ep.CA, "--cert", good, "--key", good, "-T", src, ep.HTTPS+"/rootonly/x"); err == nil {
		t.Fatalf("Alice's proxy wrote into root's directory: %s", o)
	}
	// Refused (unmapped DN), although the loopback client is root.
	if o, err := run(t, nil, "curl", "-sSfL", "--cacert", ep.CA, "--cert", unmapped, "--key", unmapped, ep.HTTPS+"/alice/c"); err == nil {
		t.Fatalf("an unmapped DN read daemon's file: %s", o)
	}
	if o, err := run(t, nil, "davix-get", "--capath", caDir, "-E", bad["expired proxy"], "--key", bad["expired proxy"], ep.HTTPS+"/alice/c", filepath.Join(out, "x")); err == nil {
		t.Fatalf("davix with an expired proxy read the file: %s", o)
	}
	checkNoSecrets(t, k)
}

// aliceDN is the grid user whose proxies the tests hold.
const aliceDN = "/DC=org/DC=kaon-test/O=Users/CN=Alice"

// aliceMap is a grid-mapfile mapping Alice to the local user daemon.
const aliceMap = `"` + aliceDN + `" daemon` + "\n"

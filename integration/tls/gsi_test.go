package tls

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/auth/x509auth/x509test"
)

// TestGSI: root:// and roots:// clients with a grid proxy (xrdcp, xrdfs,
// the Python bindings, gfal) are the user the grid-mapfile maps the DN
// to, with every way a proxy is made (x509test's RFC 3820 proxy,
// xrdgsiproxy init, grid-proxy-init, voms-proxy-init, voms-proxy-fake
// with VOMS attributes, whose role the voms-mapfile maps to another
// user) and with a
// certificate alone (XrdSecGSICREATEPROXY=0); a forged proxy, a
// certificate of an unknown CA or revoked by its CA's CRL, a DN the
// grid-mapfile does not name and one removed from it are refused with
// kXR_NotAuthorized naming why; a
// client without a usable proxy (none, expired: the client does not send
// it) is told what is required. No key reaches a log.
func TestGSI(t *testing.T) {
	grid, other := x509test.NewRSACA("Grid"), x509test.NewRSACA("Elsewhere")
	site := harness.NewGridSite(t, grid, aliceMap+`"/DC=org/DC=kaon-test/O=Users/CN=Dave" daemon`+"\n")
	dir, caDir, gridmap := site.Dir, site.CADir, site.Gridmap
	alice, dave := grid.User("Alice"), grid.User("Dave")
	if err := grid.WriteCRL(caDir, dave); err != nil { // Dave's certificate is revoked
		t.Fatal(err)
	}

	// voms-proxy-fake's attributes are signed by vomsCred, which the VOMS
	// directory vouches for; its production role is the local user bin.
	vomsCred := grid.Host("voms.kaon.test")
	vomsDir := filepath.Join(dir, "vomsdir")
	if err := x509test.WriteLSC(vomsDir, "kaontest", vomsCred); err != nil {
		t.Fatal(err)
	}
	vomsMap := filepath.Join(dir, "voms-mapfile")
	os.WriteFile(vomsMap, []byte(`"/kaontest/Role=production" bin`+"\n"), 0o644)
	k := harness.Start(t, dir, "up", "--data", dir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--tls",
		"--auth", "gsi,x509", "--tls-ca-dir", caDir, "--grid-mapfile", gridmap, "--voms-dir", vomsDir, "--voms-mapfile", vomsMap)
	ep := readEP(t, dir)
	// The client checks the host certificate's name: localhost, not the
	// address.
	xrd := "root://localhost:" + portOf(t, ep.XRootD)
	xrds := "roots://localhost:" + portOf(t, ep.Roots)
	k.MustKaon("mkdir", "/alice")
	k.MustKaon("chown", "1:1", "/alice")
	k.MustKaon("chmod", "700", "/alice")
	k.MustKaon("mkdir", "/vo")
	k.MustKaon("chown", "2:2", "/vo")

	creds := t.TempDir()
	os.Chmod(creds, 0o755)
	certFile, keyFile := filepath.Join(creds, "usercert.pem"), filepath.Join(creds, "userkey.pem")
	if err := alice.WriteCertKey(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	vomsCert, vomsKey := filepath.Join(creds, "vomscert.pem"), filepath.Join(creds, "vomskey.pem")
	if err := vomsCred.WriteCertKey(vomsCert, vomsKey); err != nil {
		t.Fatal(err)
	}
	proxy := func(name string, c *x509test.Cred) string {
		p := filepath.Join(creds, name)
		if err := c.WriteProxyFile(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Proxies from every tool; each file is the proxy, its key, the chain.
	proxies := map[string]string{"x509test": proxy("x509test", alice.Proxy(x509test.ProxyOpts{}))}
	for tool, args := range map[string][]string{
		"xrdgsiproxy":     {"xrdgsiproxy", "init", "-cert", certFile, "-key", keyFile, "-certdir", caDir, "-valid", "1:00"},
		"grid-proxy-init": {"grid-proxy-init", "-cert", certFile, "-key", keyFile, "-certdir", caDir, "-valid", "1:00", "-rfc"},
		// Debian's voms-proxy-init of voms-clients (C++, 2.1.0~rc3) writes
		// no proxy; voms-clients-java's is the one WLCG sites use.
		"voms-proxy-init": {"voms-proxy-init3", "-cert", certFile, "-key", keyFile, "-certdir", caDir, "-valid", "1:00", "-rfc"},
		// A proxy carrying VOMS attributes (an attribute certificate signed
		// by a VOMS server's key, here the fake server of voms-clients).
		"voms-proxy-fake": {"voms-proxy-fake", "-cert", certFile, "-key", keyFile, "-certdir", caDir, "-hours", "1", "-rfc",
			"-hostcert", vomsCert, "-hostkey", vomsKey, "-voms", "kaontest", "-fqan", "/kaontest/Role=production", "-uri", "localhost:15000"},
	} {
		out := filepath.Join(creds, tool)
		must(t, []string{"X509_CERT_DIR=" + caDir}, args[0], append(args[1:], "-out", out)...)
		proxies[tool] = out
	}
	env := func(extra ...string) []string {
		return append([]string{"X509_CERT_DIR=" + caDir, "XRD_CONNECTIONRETRY=1", "XRD_REQUESTTIMEOUT=60",
			"X509_USER_PROXY=" + filepath.Join(creds, "none")}, extra...)
	}
	src := randomFile(t, 3<<20)
	out := t.TempDir()
	for tool, p := range proxies {
		penv := env("X509_USER_PROXY=" + p)
		d := "/alice/"
		if tool == "voms-proxy-fake" { // the production role: bin's directory
			d = "/vo/"
		}
		must(t, penv, "xrdcp", "-f", src, xrd+"/"+d+tool)
		must(t, penv, "xrdcp", "-f", xrd+"/"+d+tool, filepath.Join(out, tool))
		sameFile(t, src, filepath.Join(out, tool))
		if st := must(t, penv, "xrdfs", xrd, "stat", d+tool); !strings.Contains(st, "Size:   3145728") {
			t.Fatalf("%s: xrdfs stat:\n%s", tool, st)
		}
	}
	// roots://: gsi inside TLS. (The 5.5 client also loads X509_USER_PROXY
	// as its TLS client certificate, and cannot with xrdgsiproxy's
	// proxies: "Unable to create TLS context; invalid certificate".)
	penv := env("X509_USER_PROXY=" + proxies["x509test"])
	must(t, penv, "xrdcp", "-f", src, xrds+"//alice/roots")
	must(t, penv, "xrdcp", "-f", xrds+"//alice/roots", filepath.Join(out, "roots"))
	sameFile(t, src, filepath.Join(out, "roots"))
	// A certificate alone, no proxy.
	cenv := env("XrdSecGSICREATEPROXY=0", "X509_USER_CERT="+certFile, "X509_USER_KEY="+keyFile)
	must(t, cenv, "xrdcp", "-f", src, xrd+"//alice/cert-only")
	// The Python bindings and gfal find the proxy through X509_USER_PROXY.
	penv = env("X509_USER_PROXY="+proxies["x509test"], "GFAL_PYTHONBIN=/usr/bin/python3")
	py := `import sys
from XRootD import client
from XRootD.client.flags import OpenFlags
f = client.File()
st, _ = f.open(sys.argv[1], OpenFlags.DELETE)
assert st.ok, st.message
st, _ = f.write(b"written by python\n", 0)
assert st.ok, st.message
st, _ = f.close()
assert st.ok, st.message
`
	must(t, penv, "/usr/bin/python3", "-c", py, xrd+"//alice/python")
	must(t, penv, "gfal-copy", "-f", "file://"+src, xrd+"//alice/gfal")
	must(t, penv, "gfal-copy", "-f", xrd+"//alice/gfal", "file://"+filepath.Join(out, "gfal"))
	sameFile(t, src, filepath.Join(out, "gfal"))
	// Everything written belongs to daemon (uid 1).
	for _, f := range []string{"x509test", "xrdgsiproxy", "grid-proxy-init", "voms-proxy-init", "roots", "cert-only", "python", "gfal"} {
		if st := k.MustKaon("stat", "/alice/"+f); !strings.Contains(st, "Uid: 1 ") {
			t.Fatalf("/alice/%s is not daemon's (uid 1):\n%s", f, st)
		}
	}
	// The VOMS production role mapped the fake VOMS proxy to bin (uid 2).
	if st := k.MustKaon("stat", "/vo/voms-proxy-fake"); !strings.Contains(st, "Uid: 2 ") {
		t.Fatalf("/vo/voms-proxy-fake is not bin's (uid 2):\n%s", st)
	}

	// Refusals: the command fails with kXR_NotAuthorized and the reason.
	now := time.Now()
	refused := func(what, want string, e []string) {
		t.Helper()
		o, err := run(t, e, "xrdfs", xrd, "stat", "/alice/x509test")
		if err == nil || !strings.Contains(o, "[3010]") || !strings.Contains(o, want) {
			t.Fatalf("%s: %v, want kXR_NotAuthorized saying %q:\n%s", what, err, want, o)
		}
	}
	refused("a forged proxy", "not signed by its issuer",
		env("X509_USER_PROXY="+proxy("forged", alice.Proxy(x509test.ProxyOpts{SignWith: grid.User("Mallory").Key}))))
	refused("a certificate of an unknown CA", "unknown authority",
		env("X509_USER_PROXY="+proxy("other", other.User("Alice").Proxy(x509test.ProxyOpts{}))))
	refused("a DN not in the grid-mapfile", "/CN=Bob is not in the grid-mapfile",
		env("X509_USER_PROXY="+proxy("bob", grid.User("Bob").Proxy(x509test.ProxyOpts{}))))
	refused("a certificate its CA's CRL revokes", "/CN=Dave (serial",
		env("X509_USER_PROXY="+proxy("dave", dave.Proxy(x509test.ProxyOpts{}))))
	const required = "a client certificate (https) or a grid proxy (root:// gsi: X509_USER_PROXY) is required"
	refused("no proxy", required, env())
	refused("an expired proxy", required,
		env("X509_USER_PROXY="+proxy("expired", alice.Proxy(x509test.ProxyOpts{NotBefore: now.Add(-3 * time.Hour), NotAfter: now.Add(-time.Hour)}))))
	// Removed from the grid-mapfile: refused at the next login.
	os.WriteFile(gridmap, []byte("# Alice revoked\n"), 0o644)
	refused("a DN removed from the grid-mapfile", "/CN=Alice is not in the grid-mapfile", env("X509_USER_PROXY="+proxies["x509test"]))
	os.WriteFile(gridmap, []byte(aliceMap), 0o644)
	must(t, env("X509_USER_PROXY="+proxies["x509test"]), "xrdfs", xrd, "stat", "/alice/x509test")

	// No key of a proxy or certificate reaches a log.
	checkNoSecrets(t, k)
	audit, _ := os.ReadFile(filepath.Join(dir, "audit.log"))
	logs := k.Logs() + string(audit)
	if !strings.Contains(string(audit), `"method":"gsi"`) {
		t.Fatalf("the audit log records no gsi principal:\n%s", audit)
	}
	for name, p := range proxies {
		b, _ := os.ReadFile(p)
		s := string(b)
		i := strings.Index(s, "PRIVATE KEY-----")
		if i < 0 {
			t.Fatalf("%s: no key in the proxy file", name)
		}
		if frag := s[i+40 : i+80]; strings.Contains(logs, frag) {
			t.Fatalf("the key of the %s proxy is in the log", name)
		}
	}
}

// portOf is the port of a root:// or roots:// URL.
func portOf(t *testing.T, u string) string {
	t.Helper()
	hp := hostPort(u)
	i := strings.LastIndexByte(hp, ':')
	if i < 0 {
		t.Fatalf("no port in %s", u)
	}
	return hp[i+1:]
}

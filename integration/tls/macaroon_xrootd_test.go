package tls

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/auth/x509auth/x509test"
)

// TestMacaroonTPCWithXRootD: HTTP third-party copies between Kaon and
// Debian's xrootd (XrdHttp + XrdMacaroons + XrdHttpTPC) where the only
// credential the peer gets is a macaroon, as FTS and gfal2 drive them for
// a user holding a grid proxy. xrootd lets no anonymous client read,
// and Kaon's /alice is Alice's user's alone, so a copy that succeeds
// used the macaroon it was given:
//   - the DOMA smoke test's steps in macaroon mode against each endpoint:
//     a macaroon is minted (POST application/macaroon-request), and with
//     it alone a client downloads; an UPLOAD macaroon uploads;
//   - Kaon pulls from xrootd with a macaroon xrootd issued (COPY with
//     Source and TransferHeaderAuthorization), and pushes to it;
//   - xrootd pulls from Kaon with Kaon's macaroon, and pushes to it;
//   - gfal-copy with the proxy, pull and push, both ways.
//
// No macaroon of Kaon's reaches Kaon's log.
func TestMacaroonTPCWithXRootD(t *testing.T) {
	grid := x509test.NewRSACA("Grid")
	site := harness.NewGridSite(t, grid, aliceMap)
	dir, caDir, gridmap := site.Dir, site.CADir, site.Gridmap
	alice := grid.User("Alice")
	proxy := filepath.Join(t.TempDir(), "proxy")
	if err := alice.Proxy(x509test.ProxyOpts{}).WriteProxyFile(proxy); err != nil {
		t.Fatal(err)
	}

	// Kaon: Alice is daemon, owner of /alice (mode 700).
	kd := filepath.Join(dir, "kaon")
	k := harness.Start(t, kd, "up", "--data", kd, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--tls", "--tls-dir", filepath.Join(dir, "tls"),
		"--auth", "x509,unix", "--tls-ca-dir", caDir, "--grid-mapfile", gridmap, "--tpc-allow-loopback")
	k.MustKaon("mkdir", "/alice")
	k.MustKaon("chown", "1:1", "/alice")
	k.MustKaon("chmod", "700", "/alice")
	kaon := readEP(t, kd).HTTPS + "/alice"

	// xrootd: https with XrdHttp, Alice is alice (http.gridmap), and only
	// alice may read or write (acc.authdb); macaroons are minted and
	// honoured (XrdMacaroons in front of the authdb).
	hport := harness.FreePort(t)
	_, xdata := harness.XRootD(t, func(d string) string {
		if err := grid.Host("localhost", "127.0.0.1").WriteCertKey(filepath.Join(d, "hostcert.pem"), filepath.Join(d, "hostkey.pem")); err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(d, "certificates"), 0o755)
		ents, _ := os.ReadDir(caDir)
		for _, e := range ents {
			b, _ := os.ReadFile(filepath.Join(caDir, e.Name()))
			os.WriteFile(filepath.Join(d, "certificates", e.Name()), b, 0o644)
		}
		os.WriteFile(filepath.Join(d, "grid-mapfile"), []byte(`"`+aliceDN+`" alice`+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "authdb"), []byte("u alice / a\n"), 0o644)
		key := make([]byte, 64)
		rand.Read(key)
		os.WriteFile(filepath.Join(d, "macaroon-secret"), []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
		os.MkdirAll(filepath.Join(d, "data", "xrd"), 0o755)
		return fmt.Sprintf(`xrd.tls %[1]s/hostcert.pem %[1]s/hostkey.pem
xrd.tlsca certdir %[1]s/certificates
xrd.protocol XrdHttp:%[2]d libXrdHttp.so
http.gridmap %[1]s/grid-mapfile
http.header2cgi Authorization authz
http.exthandler xrdtpc libXrdHttpTPC.so
http.exthandler xrdmacaroons libXrdMacaroons.so
macaroons.secretkey %[1]s/macaroon-secret
all.sitename kaontest
ofs.authorize 1
ofs.authlib ++ libXrdMacaroons.so
acc.authdb %[1]s/authdb
`, d, hport)
	})
	xrd := fmt.Sprintf("https://localhost:%d/xrd", hport)
	harness.WaitFor(t, 30e9, "xrootd's https listener", func() bool {
		_, err := run(t, nil, "curl", "-sS", "-o", "/dev/null", "--capath", caDir, xrd+"/")
		return err == nil
	})

	src := randomFile(t, 3<<20)
	withCert := []string{"-sS", "--capath", caDir, "--cert", proxy, "--key", proxy, "-w", "\n%{http_code}"}
	curl := func(args ...string) string {
		out, _ := run(t, nil, "curl", append(append([]string{}, withCert...), args...)...)
		return out
	}
	status := func(out string) string { return out[strings.LastIndexByte(out, '\n')+1:] }
	for _, u := range []string{kaon, xrd} {
		if out := curl("-L", "-T", src, u+"/src"); status(out) != "201" && status(out) != "200" {
			t.Fatalf("upload with the proxy to %s: %s", u, out)
		}
	}
	// Without a certificate this loopback client is its unix user (root)
	// at Kaon; xrootd's own clients are the xrootd user there, which may
	// not read /alice. At xrootd, a client without a certificate may not
	// read at all.
	if out, _ := run(t, nil, "curl", "-sSL", "--capath", caDir, "-o", "/dev/null", "-w", "%{http_code}", xrd+"/src"); out == "200" {
		t.Fatal("xrootd lets an anonymous client read: the test would not show the macaroon is used")
	}

	// The smoke test's macaroon steps, on each endpoint.
	mint := func(u, activities string) string {
		t.Helper()
		out := curl("-X", "POST", "-H", "Content-Type: application/macaroon-request",
			"-d", `{"caveats": ["activity:`+activities+`"], "validity": "PT30M"}`, u)
		var r struct {
			Macaroon string `json:"macaroon"`
		}
		if json.Unmarshal([]byte(out[:strings.LastIndexByte(out, '\n')]), &r); r.Macaroon == "" || status(out) != "200" {
			t.Fatalf("macaroon request to %s: %s", u, out)
		}
		return r.Macaroon
	}
	bearer := func(mac string, args ...string) string {
		out, _ := run(t, nil, "curl", append([]string{"-sSL", "--capath", caDir, "-H", "Authorization: Bearer " + mac, "-w", "\n%{http_code}"}, args...)...)
		return out
	}
	got := filepath.Join(t.TempDir(), "got")
	macs := map[string]string{}
	for _, u := range []string{kaon, xrd} {
		macs[u] = mint(u+"/src", "DOWNLOAD,LIST")
		if out := bearer(macs[u], "-o", got, u+"/src"); status(out) != "200" {
			t.Fatalf("download from %s with its macaroon: %s", u, out)
		}
		sameFile(t, src, got)
		up := mint(u+"/", "UPLOAD,DOWNLOAD,DELETE,MANAGE,LIST")
		if out := bearer(up, "-T", src, u+"/by-macaroon"); status(out) != "201" && status(out) != "200" {
			t.Fatalf("upload to %s with an UPLOAD macaroon: %s", u, out)
		}
		if out := bearer(up, "-X", "DELETE", u+"/by-macaroon"); status(out) != "204" && status(out) != "200" {
			t.Fatalf("delete at %s with the macaroon: %s", u, out)
		}
	}

	// COPY with the peer's macaroon in TransferHeaderAuthorization.
	check := func(what, u string) {
		t.Helper()
		if out := curl("-L", "-o", got, u); status(out) != "200" {
			t.Fatalf("%s: reading the copy %s: %s", what, u, out)
		}
		sameFile(t, src, got)
	}
	copyWith := func(what string, args ...string) {
		t.Helper()
		out := curl(append([]string{"-X", "COPY"}, args...)...)
		if !strings.Contains(out, "success") {
			t.Fatalf("%s: %s\nkaon log:\n%s", what, out, k.Logs())
		}
	}
	copyWith("Kaon pulls from xrootd with xrootd's macaroon",
		"-H", "Source: "+xrd+"/src", "-H", "TransferHeaderAuthorization: Bearer "+macs[xrd], "-L", kaon+"/pulled-from-xrootd")
	check("Kaon's pull", kaon+"/pulled-from-xrootd")
	copyWith("xrootd pulls from Kaon with Kaon's macaroon",
		"-H", "Source: "+kaon+"/src", "-H", "TransferHeaderAuthorization: Bearer "+macs[kaon], xrd+"/pulled-from-kaon")
	check("xrootd's pull", xrd+"/pulled-from-kaon")
	copyWith("Kaon pushes to xrootd with xrootd's macaroon",
		"-H", "Destination: "+xrd+"/pushed-by-kaon", "-H", "TransferHeaderAuthorization: Bearer "+mint(xrd+"/", "UPLOAD,DELETE,LIST"), "-L", kaon+"/src")
	check("Kaon's push", xrd+"/pushed-by-kaon")
	copyWith("xrootd pushes to Kaon with Kaon's macaroon",
		"-H", "Destination: "+kaon+"/pushed-by-xrootd", "-H", "TransferHeaderAuthorization: Bearer "+mint(kaon+"/", "UPLOAD,DELETE,LIST"), xrd+"/src")
	check("xrootd's push", kaon+"/pushed-by-xrootd")

	// gfal-copy with the proxy asks each endpoint for the macaroon the
	// other needs, as FTS does.
	env := []string{"X509_USER_PROXY=" + proxy, "X509_CERT_DIR=" + caDir, "GFAL_PYTHONBIN=/usr/bin/python3"}
	for _, mode := range []string{"pull", "push"} {
		for _, c := range [][2]string{{kaon, xrd}, {xrd, kaon}} {
			dst := c[1] + "/gfal-" + mode
			must(t, env, "gfal-copy", "--copy-mode", mode, c[0]+"/src", dst)
			check("gfal-copy "+mode+" "+c[0]+" -> "+c[1], dst)
		}
	}
	if b, err := os.ReadFile(filepath.Join(xdata, "xrd", "gfal-pull")); err != nil || len(b) != 3<<20 {
		t.Fatalf("xrootd's disk holds no gfal-pull copy (%v)", err)
	}
	if !strings.Contains(k.Logs(), "principal=daemon/macaroon") {
		t.Fatal("no request reached Kaon with a macaroon")
	}
	if strings.Contains(k.Logs(), macs[kaon][10:40]) {
		t.Fatal("a macaroon reached Kaon's log")
	}
}

package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func setup(t *testing.T, require bool) *Material {
	t.Helper()
	m, err := Setup(Options{Dir: t.TempDir(), Require: require, Hosts: []string{"127.0.0.2"}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLocalCA: first start generates the CA, its hashed copy and a host
// certificate covering the loopback names; the next start reuses them.
func TestLocalCA(t *testing.T) {
	dir := t.TempDir()
	m, err := Setup(Options{Dir: dir, Hosts: []string{"10.1.2.3", "storage.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if m.CAFile != filepath.Join(dir, "ca.pem") || m.CADir != filepath.Join(dir, "certificates") {
		t.Fatalf("CA file %s dir %s", m.CAFile, m.CADir)
	}
	if st, err := os.Stat(filepath.Join(dir, "ca.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode: %v %v", st.Mode(), err)
	}
	leaf, err := x509.ParseCertificate(m.Server.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	for _, n := range []string{"127.0.0.1", "::1", "localhost", host, "10.1.2.3", "storage.example"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: m.CAs, DNSName: n}); err != nil {
			t.Errorf("host certificate does not verify for %s: %v", n, err)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, "hostcert.pem"))
	if _, err := Setup(Options{Dir: dir, Hosts: []string{"storage.example"}}); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "hostcert.pem"))
	if string(before) != string(after) {
		t.Fatal("a host certificate that still fits was issued again")
	}
	if _, err := Setup(Options{Dir: dir, Hosts: []string{"other.example"}}); err != nil {
		t.Fatal(err)
	}
	after, _ = os.ReadFile(filepath.Join(dir, "hostcert.pem"))
	if string(before) == string(after) {
		t.Fatal("a host certificate not naming a new host was kept")
	}
}

// TestGSICert: gsi's RSA certificate is the local CA's gsicert.pem for
// the same names as the (ECDSA) host certificate, made once and kept; a
// site's RSA certificate is used as it is, another key type is refused.
func TestGSICert(t *testing.T) {
	dir := t.TempDir()
	m, err := Setup(Options{Dir: dir, Hosts: []string{"storage.example"}})
	if err != nil {
		t.Fatal(err)
	}
	chain, key, err := m.GSI()
	if err != nil {
		t.Fatal(err)
	}
	if pub, ok := chain[0].PublicKey.(*rsa.PublicKey); !ok || !pub.Equal(key.Public()) {
		t.Fatalf("gsi certificate key %T", chain[0].PublicKey)
	}
	for _, n := range []string{"localhost", "127.0.0.1", "storage.example"} {
		if _, err := chain[0].Verify(x509.VerifyOptions{Roots: m.CAs, DNSName: n}); err != nil {
			t.Errorf("gsi certificate does not verify for %s: %v", n, err)
		}
	}
	before, _ := os.ReadFile(filepath.Join(dir, "gsicert.pem"))
	m2, _ := Setup(Options{Dir: dir, Hosts: []string{"storage.example"}})
	if _, _, err := m2.GSI(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "gsicert.pem")); string(before) != string(after) {
		t.Fatal("a gsi certificate that still fits was issued again")
	}
	// A site's certificate: the RSA one serves gsi, the ECDSA one cannot.
	sm, err := Setup(Options{Cert: filepath.Join(dir, "gsicert.pem"), Key: filepath.Join(dir, "gsikey.pem"), CADir: m.CADir})
	if err != nil {
		t.Fatal(err)
	}
	if c, _, err := sm.GSI(); err != nil || !c[0].Equal(chain[0]) {
		t.Fatalf("a site RSA certificate for gsi: %v", err)
	}
	em, err := Setup(Options{Cert: filepath.Join(dir, "hostcert.pem"), Key: filepath.Join(dir, "hostkey.pem"), CADir: m.CADir})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := em.GSI(); err == nil || !strings.Contains(err.Error(), "RSA") {
		t.Fatalf("a site ECDSA certificate for gsi: %v", err)
	}
}

// TestSiteCertCAFile: with a site's certificate, CAFile (what the banner
// and endpoints.json tell clients to trust) is the file of the CA
// directory whose CA signed it, not another CA's nor none.
func TestSiteCertCAFile(t *testing.T) {
	a, b, cadir := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		m, err := Setup(Options{Dir: d})
		if err != nil {
			t.Fatal(err)
		}
		ents, _ := os.ReadDir(m.CADir)
		for _, e := range ents {
			pem, _ := os.ReadFile(filepath.Join(m.CADir, e.Name()))
			if err := os.WriteFile(filepath.Join(cadir, filepath.Base(d)+"-"+e.Name()+".pem"), pem, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, d := range []string{a, b} {
		m, err := Setup(Options{Cert: filepath.Join(d, "hostcert.pem"), Key: filepath.Join(d, "hostkey.pem"), CADir: cadir})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(m.CAFile)
		want, _ := os.ReadFile(filepath.Join(d, "ca.pem"))
		if m.CAFile == "" || string(got) != string(want) {
			t.Fatalf("site certificate of %s: CA file %q is not its CA's", d, m.CAFile)
		}
	}
}

// TestSubjectHash agrees with openssl x509 -hash on names that need
// canonicalization (case, inner and outer spaces, DC and multi-RDN names).
func TestSubjectHash(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl is needed (scripts/deps.sh installs it)")
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	oidDC := asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}
	for _, name := range []pkix.Name{
		{CommonName: "Kaon local CA"},
		{Organization: []string{"Grid  Example"}, CommonName: "  Mixed Case   CA  "},
		{ExtraNames: []pkix.AttributeTypeAndValue{{Type: oidDC, Value: "org"}, {Type: oidDC, Value: "Example"}},
			Country: []string{"CH"}, OrganizationalUnit: []string{"IT"}, CommonName: "Ünïcode CA"},
	} {
		tmpl := &x509.Certificate{SerialNumber: serial(), Subject: name, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		f := filepath.Join(t.TempDir(), "c.pem")
		os.WriteFile(f, pemCert(der), 0o644)
		out, err := exec.Command("openssl", "x509", "-hash", "-noout", "-in", f).Output()
		if err != nil {
			t.Fatal(err)
		}
		got, err := SubjectHash(c)
		if err != nil || got != strings.TrimSpace(string(out)) {
			t.Errorf("%s: hash %s (%v), openssl says %s", c.Subject, got, err, out)
		}
	}
}

// TestRefusesOldTLS: the server configuration refuses TLS 1.0 and 1.1.
func TestRefusesOldTLS(t *testing.T) {
	m := setup(t, true)
	l, err := tls.Listen("tcp", "127.0.0.1:0", m.Server)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: m.CAs, MinVersion: v, MaxVersion: v, ServerName: "127.0.0.1"})
		if err == nil {
			c.Close()
			t.Errorf("a TLS %x client was served", v)
		} else if !strings.Contains(err.Error(), "remote error: tls: protocol version not supported") {
			t.Errorf("TLS %x: %v, want the server's refusal", v, err)
		}
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{RootCAs: m.CAs, MinVersion: v, MaxVersion: v, ServerName: "127.0.0.1"})
		if err != nil {
			t.Errorf("TLS %x: %v", v, err)
			continue
		}
		c.Close()
	}
	if m.Client.MinVersion < tls.VersionTLS12 {
		t.Error("internal clients accept TLS below 1.2")
	}
}

func serveHello(t *testing.T, m *Material) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			io.WriteString(w, "tls")
		} else {
			io.WriteString(w, "plain")
		}
	})}
	go srv.Serve(m.HTTPListener(l))
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// TestHTTPListener: one port serves https and, unless TLS is required,
// http; a required-TLS port answers plaintext with a 400 naming https.
func TestHTTPListener(t *testing.T) {
	for _, require := range []bool{false, true} {
		m := setup(t, require)
		addr := serveHello(t, m)
		// A silent client holds up nobody.
		silent, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Close()
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: m.Client}, Timeout: 10 * time.Second}
		resp, err := hc.Get("https://" + addr + "/")
		if err != nil {
			t.Fatalf("https: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "tls" {
			t.Fatalf("https answered %q", b)
		}
		resp, err = hc.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("http (require %v): %v", require, err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case !require && string(b) != "plain":
			t.Fatalf("plaintext answered %d %q", resp.StatusCode, b)
		case require && (resp.StatusCode != 400 || !strings.Contains(string(b), "requires TLS: use https://"+addr)):
			t.Fatalf("plaintext with TLS required answered %d %q", resp.StatusCode, b)
		}
	}
}

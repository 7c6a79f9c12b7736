package gsi

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth/x509auth"
	"github.com/kaon-storage/kaon/internal/auth/x509auth/x509test"
	"github.com/kaon-storage/kaon/internal/xrootd"
	"github.com/kaon-storage/kaon/internal/xrootd/xrdtest"
)

// fixture is a grid CA, a host credential for localhost and a server
// whose Authenticate verifies chains against the CA (x509auth, as Kaon
// does) and maps Alice's DN to uid 1000.
type fixture struct {
	ca, host *x509test.Cred
	srv      *Server
	roots    *x509.CertPool
	seen     [][]*x509.Certificate
}

var (
	fixOnce sync.Once
	fixCA   *x509test.Cred
	fixHost *x509test.Cred
	fixUser *x509test.Cred
)

// creds are made once per test binary: RSA keys take a while.
func creds() (ca, host, alice *x509test.Cred) {
	fixOnce.Do(func() {
		fixCA = x509test.NewRSACA("Grid")
		fixHost = fixCA.Host("localhost", "127.0.0.1")
		fixUser = fixCA.User("Alice")
	})
	return fixCA, fixHost, fixUser
}

const aliceDN = "/DC=org/DC=kaon-test/O=Users/CN=Alice"

func newFixture(t *testing.T) *fixture {
	ca, host, _ := creds()
	f := &fixture{ca: ca, host: host, roots: x509.NewCertPool()}
	f.roots.AddCert(ca.Cert)
	srv, err := NewServer(Config{Cert: host.Cert, Key: host.Key.(*rsa.PrivateKey),
		Authenticate: func(_ context.Context, p xrootd.Peer, chain []*x509.Certificate) (xrootd.Identity, error) {
			f.seen = append(f.seen, chain)
			dn, err := x509auth.VerifyChain(chain, f.roots, time.Now())
			if err != nil {
				return xrootd.Identity{}, errors.New("client certificate refused: " + err.Error())
			}
			if dn != aliceDN {
				return xrootd.Identity{}, errors.New(dn + " is not in the grid-mapfile")
			}
			return xrootd.Identity{User: "alice", UID: 1000, GID: 1000}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	return f
}

func cred(c *x509test.Cred) *Credential {
	return &Credential{Chain: c.Chain, Key: c.Key.(*rsa.PrivateKey)}
}

// login runs the whole handshake between a Client and the Server.
func (f *fixture) login(t *testing.T, cl *Client) (xrootd.Identity, error) {
	t.Helper()
	params, _ := f.srv.Params(false)
	x, msg, err := cl.Start(params, "localhost")
	if err != nil {
		t.Fatalf("client start: %v", err)
	}
	ex := f.srv.Begin(xrootd.Peer{User: "alice"})
	for i := 0; ; i++ {
		more, id, err := ex.Step(context.Background(), msg)
		if err != nil || more == nil {
			return id, err
		}
		if i > 3 {
			t.Fatal("the handshake does not end")
		}
		if msg, err = x.Next(more); err != nil {
			t.Fatalf("client: %v", err)
		}
	}
}

// TestHandshake: a proxy, a proxy of a proxy and a certificate alone log
// in; the server saw the chain the client holds, leaf first.
func TestHandshake(t *testing.T) {
	f := newFixture(t)
	_, _, alice := creds()
	for name, c := range map[string]*x509test.Cred{
		"proxy":       alice.Proxy(x509test.ProxyOpts{}),
		"proxy²":      alice.Proxy(x509test.ProxyOpts{}).Proxy(x509test.ProxyOpts{}),
		"certificate": alice,
	} {
		id, err := f.login(t, &Client{Cred: cred(c), Roots: f.roots})
		if err != nil || id.UID != 1000 {
			t.Fatalf("%s: %+v %v", name, id, err)
		}
		got := f.seen[len(f.seen)-1]
		if len(got) != len(c.Chain) || !got[0].Equal(c.Cert) {
			t.Fatalf("%s: the server saw %d certificates", name, len(got))
		}
	}
}

// TestRefusals: a chain the client does not hold the key of, an expired
// proxy, an unknown CA and an unmapped DN are refused with a Refusal
// naming why; an old client version too.
func TestRefusals(t *testing.T) {
	f := newFixture(t)
	ca, _, alice := creds()
	mallory := ca.User("Mallory")
	other := x509test.NewRSACA("Elsewhere")
	now := time.Now()
	for _, c := range []struct {
		name string
		cred *Credential
		want string
	}{
		{"someone else's chain", &Credential{Chain: alice.Proxy(x509test.ProxyOpts{}).Chain, Key: mallory.Key.(*rsa.PrivateKey)}, "not the key of the certificate sent"},
		{"expired proxy", cred(alice.Proxy(x509test.ProxyOpts{NotBefore: now.Add(-3 * time.Hour), NotAfter: now.Add(-time.Hour)})), "not valid now"},
		{"forged proxy", cred(alice.Proxy(x509test.ProxyOpts{SignWith: mallory.Key})), "not signed by its issuer"},
		{"unknown CA", cred(other.User("Alice").Proxy(x509test.ProxyOpts{})), "unknown authority"},
		{"unmapped DN", cred(mallory.Proxy(x509test.ProxyOpts{})), "not in the grid-mapfile"},
	} {
		_, err := f.login(t, &Client{Cred: c.cred, Roots: f.roots})
		var r *xrootd.Refusal
		if !errors.As(err, &r) || !strings.Contains(r.Msg, c.want) {
			t.Errorf("%s: %v, want a refusal saying %q", c.name, err, c.want)
		}
	}
	// A client of version 10300 does not sign its DH part.
	old := &buffer{proto: "gsi", step: stepCertReq}
	old.add(bkCryptoMod, []byte("ssl"))
	old.setInt32(bkVersion, 10300)
	old.add(bkMain, (&buffer{proto: "gsi", step: stepCertReq}).marshal())
	_, _, err := f.srv.Begin(xrootd.Peer{}).Step(context.Background(), old.marshal())
	var r *xrootd.Refusal
	if !errors.As(err, &r) || !strings.Contains(r.Msg, "10300") {
		t.Fatalf("old client: %v", err)
	}
}

// TestReplay: a kXGC_cert message recorded from one login does not log
// in another (the server's challenge differs), and a tampered signature
// is refused.
func TestReplay(t *testing.T) {
	f := newFixture(t)
	_, _, alice := creds()
	cl := &Client{Cred: cred(alice.Proxy(x509test.ProxyOpts{})), Roots: f.roots}
	params, _ := f.srv.Params(false)
	x, msg, _ := cl.Start(params, "localhost")
	ex := f.srv.Begin(xrootd.Peer{})
	more, _, err := ex.Step(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	certMsg, err := x.Next(more)
	if err != nil {
		t.Fatal(err)
	}
	// another login by someone who recorded certMsg
	_, msg2, _ := cl.Start(params, "localhost")
	ex2 := f.srv.Begin(xrootd.Peer{})
	if _, _, err := ex2.Step(context.Background(), msg2); err != nil {
		t.Fatal(err)
	}
	_, _, err = ex2.Step(context.Background(), certMsg)
	if err == nil {
		t.Fatal("a replayed kXGC_cert logged in")
	}
	// the original, with one byte of the main bucket changed
	b, _ := parseBuffer(certMsg)
	m, _ := b.get(bkMain)
	m[len(m)-1] ^= 1
	if _, _, err := ex.Step(context.Background(), b.marshal()); err == nil {
		t.Fatal("a tampered kXGC_cert logged in")
	}
}

// TestClientChecksServer: the client refuses a host certificate of
// another CA or for another name.
func TestClientChecksServer(t *testing.T) {
	f := newFixture(t)
	_, _, alice := creds()
	cl := &Client{Cred: cred(alice), Roots: x509.NewCertPool()}
	params, _ := f.srv.Params(false)
	x, msg, _ := cl.Start(params, "localhost")
	more, _, _ := f.srv.Begin(xrootd.Peer{}).Step(context.Background(), msg)
	if _, err := x.Next(more); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("unknown CA: %v", err)
	}
	cl.Roots = f.roots
	x, msg, _ = cl.Start(params, "elsewhere.example")
	more, _, _ = f.srv.Begin(xrootd.Peer{}).Step(context.Background(), msg)
	if _, err := x.Next(more); err == nil || !strings.Contains(err.Error(), "elsewhere.example") {
		t.Fatalf("wrong host name: %v", err)
	}
}

// TestMalformed: garbage and truncated buffers fail without a panic.
func TestMalformed(t *testing.T) {
	f := newFixture(t)
	_, _, alice := creds()
	params, _ := f.srv.Params(false)
	_, msg, _ := (&Client{Cred: cred(alice), Roots: f.roots}).Start(params, "localhost")
	for i := 0; i < len(msg); i += 7 {
		f.srv.Begin(xrootd.Peer{}).Step(context.Background(), msg[:i])
	}
	if _, _, err := f.srv.Begin(xrootd.Peer{}).Step(context.Background(), []byte("gsi\x00\x00\x00\x03\xe9\x00\x00\x00\x00")); err == nil {
		t.Fatal("kXGC_cert before kXGC_certreq accepted")
	}
}

// FuzzServerStep feeds the server's first step arbitrary credentials.
func FuzzServerStep(f *testing.F) {
	ca, host, alice := creds()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	srv, err := NewServer(Config{Cert: host.Cert, Key: host.Key.(*rsa.PrivateKey),
		Authenticate: func(context.Context, xrootd.Peer, []*x509.Certificate) (xrootd.Identity, error) {
			return xrootd.Identity{}, nil
		}})
	if err != nil {
		f.Fatal(err)
	}
	params, _ := srv.Params(false)
	_, msg, _ := (&Client{Cred: cred(alice), Roots: roots}).Start(params, "localhost")
	f.Add(msg)
	f.Fuzz(func(t *testing.T, b []byte) {
		srv.Begin(xrootd.Peer{}).Step(context.Background(), b)
	})
}

// TestDHParamsAsOpenSSL: the group is sent as OpenSSL writes ffdhe2048
// (openssl genpkey -genparam -algorithm DH -pkeyopt group:ffdhe2048), so
// OpenSSL recognises it by name.
func TestDHParamsAsOpenSSL(t *testing.T) {
	const want = `-----BEGIN DH PARAMETERS-----
MIIBCAKCAQEA//////////+t+FRYortKmq/cViAnPTzx2LnFg84tNpWp4TZBFGQz
+8yTnc4kmz75fS/jY2MMddj2gbICrsRhetPfHtXV/WVhJDP1H18GbtCFY2VVPe0a
87VXE15/V8k1mE8McODmi3fipona8+/och3xWKE2rec1MKzKT0g6eXq8CrGCsyT7
YdEIqUuyyOP7uWrat2DX9GgdT0Kj3jlN9K5W7edjcrsZCwenyO4KbXCeAvzhzffi
7MA0BM0oNC9hkXL+nOmFg/+OTxIy7vKBg8P+OxtMb61zO7X8vC7CIAXFjvGDfRaD
ssbzSibBsu/6iGtCOGEoXJf//////////wIBAg==
-----END DH PARAMETERS-----
`
	if string(dhParamsPEM) != want {
		t.Fatalf("DH parameters:\n%s", dhParamsPEM)
	}
}

// whoNS answers stat of any path with the session's uid as the size.
type whoNS struct{ *xrdtest.Backend }

func (whoNS) Stat(_ context.Context, id xrootd.Identity, p string) (xrootd.FileInfo, error) {
	if id.Err != nil {
		return xrootd.FileInfo{}, id.Err
	}
	return xrootd.FileInfo{Name: "who", Size: int64(id.UID), Mode: 0o644}, nil
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRealClient: xrdfs 5.5 with a proxy (X509_USER_PROXY) and with a
// certificate alone (XrdSecGSICREATEPROXY=0) is who the server maps it
// to; with a refused credential the command fails naming the reason;
// without a credential it falls back to unix (the connection's
// identity). No key reaches the log.
func TestRealClient(t *testing.T) {
	if _, err := exec.LookPath("xrdfs"); err != nil {
		t.Skip("xrdfs not installed (scripts/deps.sh)")
	}
	f := newFixture(t)
	ca, _, alice := creds()
	dir := t.TempDir()
	caDir := filepath.Join(dir, "certificates")
	if err := x509test.WriteCADir(caDir, ca); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuf{}
	srv := xrootd.NewServer(xrootd.Config{Namespace: whoNS{&xrdtest.Backend{Root: dir}},
		Logger:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Security: []xrootd.SecProtocol{f.srv},
		IdentifyConn: func(user string, _, _ net.Addr) xrootd.Identity {
			return xrootd.Identity{User: user, UID: 4242, GID: 4242}
		}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	url := "root://localhost:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	write := func(name string, c *x509test.Cred) string {
		p := filepath.Join(dir, name)
		if err := c.WriteProxyFile(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	proxy := write("proxy", alice.Proxy(x509test.ProxyOpts{}))
	certFile, keyFile := filepath.Join(dir, "usercert.pem"), filepath.Join(dir, "userkey.pem")
	if err := alice.WriteCertKey(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	expired := write("expired", alice.Proxy(x509test.ProxyOpts{NotBefore: time.Now().Add(-3 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}))
	stat := func(env ...string) (string, error) {
		cmd := exec.Command("timeout", "60", "xrdfs", url, "stat", "/x")
		cmd.Env = append(os.Environ(), append([]string{"X509_CERT_DIR=" + caDir, "XRD_CONNECTIONRETRY=1",
			"X509_USER_PROXY=" + filepath.Join(dir, "none")}, env...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, c := range []struct {
		name string
		env  []string
		size string
	}{
		{"proxy", []string{"X509_USER_PROXY=" + proxy}, "1000"},
		{"certificate alone", []string{"XrdSecGSICREATEPROXY=0", "X509_USER_CERT=" + certFile, "X509_USER_KEY=" + keyFile}, "1000"},
		{"no credential", []string{"X509_USER_CERT=/nonexistent", "X509_USER_KEY=/nonexistent"}, "4242"},
	} {
		out, err := stat(c.env...)
		if err != nil || !strings.Contains(out, "Size:   "+c.size) {
			t.Fatalf("%s: %v\n%s\nserver log:\n%s", c.name, err, out, logs.String())
		}
	}
	// The client itself does not send an expired proxy: it falls back
	// to unix (the server refusing one is TestRefusals').
	if out, err := stat("X509_USER_PROXY=" + expired); err != nil || !strings.Contains(out, "Size:   4242") {
		t.Fatalf("an expired proxy: %v\n%s", err, out)
	}
	// A forged proxy is sent, and refused with the reason.
	forged := write("forged", alice.Proxy(x509test.ProxyOpts{SignWith: ca.User("Mallory").Key}))
	out, err := stat("X509_USER_PROXY=" + forged)
	if err == nil || !strings.Contains(out, "[3010]") || !strings.Contains(out, "not signed by its issuer") {
		t.Fatalf("a forged proxy: %v\n%s", err, out)
	}
	kb, _ := alice.KeyPEM()
	if l := logs.String(); strings.Contains(l, string(kb[40:80])) || strings.Contains(l, "PRIVATE KEY") {
		t.Fatal("a private key is in the log")
	}
}

// BenchmarkServerLogin is the server's part of one login (both steps,
// the chain check included), with the DH key pair of the minute
// (DESIGN-NOTES: gsi) and, as xrootd does, a new one for every login.
func BenchmarkServerLogin(b *testing.B) {
	for _, fresh := range []bool{false, true} {
		name := "dh-per-minute"
		if fresh {
			name = "dh-per-login"
		}
		b.Run(name, func(b *testing.B) {
			ca, host, alice := creds()
			roots := x509.NewCertPool()
			roots.AddCert(ca.Cert)
			var clock time.Time
			srv, err := NewServer(Config{Cert: host.Cert, Key: host.Key.(*rsa.PrivateKey),
				Now: func() time.Time { return clock },
				Authenticate: func(_ context.Context, _ xrootd.Peer, chain []*x509.Certificate) (xrootd.Identity, error) {
					_, err := x509auth.VerifyChain(chain, roots, time.Now())
					return xrootd.Identity{}, err
				}})
			if err != nil {
				b.Fatal(err)
			}
			cl := &Client{Cred: cred(alice.Proxy(x509test.ProxyOpts{})), Roots: roots}
			params, _ := srv.Params(false)
			var server time.Duration
			for i := 0; i < b.N; i++ {
				if fresh {
					clock = clock.Add(2 * dhLifetime)
				}
				x, msg, _ := cl.Start(params, "localhost")
				ex := srv.Begin(xrootd.Peer{})
				t0 := time.Now()
				more, _, err := ex.Step(context.Background(), msg)
				server += time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				msg, err = x.Next(more)
				if err != nil {
					b.Fatal(err)
				}
				t0 = time.Now()
				if _, _, err := ex.Step(context.Background(), msg); err != nil {
					b.Fatal(err)
				}
				server += time.Since(t0)
			}
			b.ReportMetric(float64(server.Microseconds())/float64(b.N), "server-µs/login")
		})
	}
}

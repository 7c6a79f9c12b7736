// Package tls tests Kaon over TLS with the real clients: curl, davix,
// gfal, xrdcp/xrdfs 5.5 (roots://), Python XRootD; --require-tls on every
// listener; storage servers in their own process; X.509 client
// certificates with RFC 3820 proxies mapped through a grid-mapfile.
package tls

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/integration/tokentest"
)

func readEP(t *testing.T, dir string) harness.Endpoints {
	t.Helper()
	return harness.ReadEndpoints(t, dir)
}

// run runs a client with a deadline naming it; it returns the combined output.
func run(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("timeout", append([]string{"120", name}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 124 {
		t.Fatalf("%s %v hung for 120 s:\n%s", name, args, out.String())
	}
	return out.String(), err
}

func must(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	out, err := run(t, env, name, args...)
	if crashed(err) {
		// The grid clients' gsi libraries crash now and then on their
		// own (dmesg here: segfaults in libXrdSecgsi and in python3
		// under gfal-copy, one run in many); the commands the tests run
		// are idempotent, and a second crash still fails.
		t.Logf("%s %v crashed (%v), run once more:\n%s", name, args, err, out)
		out, err = run(t, env, name, args...)
	}
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return out
}

// crashed reports whether err is a client killed by SIGSEGV.
func crashed(err error) bool {
	ee, ok := err.(*exec.ExitError)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGSEGV
}

func randomFile(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	f := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, _ := os.ReadFile(a)
	y, err := os.ReadFile(b)
	if err != nil || !bytes.Equal(x, y) {
		t.Fatalf("%s differs from %s (%v)", b, a, err)
	}
}

func hostPort(u string) string {
	u = u[strings.Index(u, "://")+3:]
	if i := strings.IndexByte(u, '/'); i >= 0 {
		u = u[:i]
	}
	return u
}

// TestClientsOverTLS: kaon up --tls serves https:// and roots:// to curl,
// davix, gfal, xrdcp/xrdfs and Python XRootD; redirects to the storage
// server keep TLS; plaintext still works on the same ports.
func TestClientsOverTLS(t *testing.T) {
	k := harness.Up(t, "--tls", "-v")
	ep := readEP(t, k.Dir)
	if ep.HTTPS == "" || ep.Roots == "" || !strings.HasSuffix(ep.CA, ".pem") || ep.FSTHTTPS == "" || ep.FSTRoots == "" {
		t.Fatalf("endpoints.json lacks the TLS URLs or the CA: %+v", ep)
	}
	xenv := []string{"X509_CERT_DIR=" + ep.CADir}
	src := randomFile(t, 3<<20)
	out := t.TempDir()

	// curl: the redirect goes to the storage server over https.
	loc := must(t, nil, "curl", "-sS", "--cacert", ep.CA, "-T", src, "-o", "/dev/null", "-w", "%{redirect_url}", ep.HTTPS+"/c1")
	if !strings.HasPrefix(loc, ep.FSTHTTPS+"/") {
		t.Fatalf("PUT over https redirected to %q, want %s", loc, ep.FSTHTTPS)
	}
	must(t, nil, "curl", "-sSfL", "--cacert", ep.CA, "-T", src, ep.HTTPS+"/c1")
	must(t, nil, "curl", "-sSfL", "--cacert", ep.CA, "-o", filepath.Join(out, "c1"), ep.HTTPS+"/c1")
	sameFile(t, src, filepath.Join(out, "c1"))
	// The client verifies the server: without the CA it refuses.
	if _, err := run(t, nil, "curl", "-sSf", ep.HTTPS+"/c1"); err == nil {
		t.Fatal("curl trusted the server without the CA")
	}
	// Plaintext stays served without --require-tls, and is redirected in plaintext.
	loc = must(t, nil, "curl", "-sS", "-o", "/dev/null", "-w", "%{redirect_url}", ep.HTTP+"/c1")
	if !strings.HasPrefix(loc, "http://") {
		t.Fatalf("plaintext GET redirected to %q", loc)
	}

	// davix with --capath, gfal with X509_CERT_DIR.
	must(t, nil, "davix-put", "--capath", ep.CADir, src, ep.HTTPS+"/d1")
	must(t, nil, "davix-get", "--capath", ep.CADir, ep.HTTPS+"/d1", filepath.Join(out, "d1"))
	sameFile(t, src, filepath.Join(out, "d1"))
	genv := append([]string{"GFAL_PYTHONBIN=/usr/bin/python3"}, xenv...)
	must(t, genv, "gfal-copy", "-f", "file://"+src, ep.HTTPS+"/g1")
	must(t, genv, "gfal-copy", "-f", ep.HTTPS+"/g1", "file://"+filepath.Join(out, "g1"))
	sameFile(t, src, filepath.Join(out, "g1"))

	// xrdcp / xrdfs with roots://: both the namespace server and the
	// storage server it redirects to are reached over TLS.
	dbg := must(t, append([]string{"XRD_LOGLEVEL=Debug"}, xenv...), "xrdcp", "-f", "--cksum", "adler32", src, ep.Roots+"//x1")
	for _, hp := range []string{hostPort(ep.Roots), hostPort(ep.FSTRoots)} {
		if !strings.Contains(dbg, "["+hp+".0] TLS hand-shake done") {
			t.Fatalf("xrdcp did not use TLS with %s:\n%s", hp, dbg)
		}
	}
	must(t, xenv, "xrdcp", "-f", ep.Roots+"//x1", filepath.Join(out, "x1"))
	sameFile(t, src, filepath.Join(out, "x1"))
	if ls := must(t, xenv, "xrdfs", ep.Roots, "ls", "-l", "/"); !strings.Contains(ls, "/x1") {
		t.Fatalf("xrdfs ls over roots: %s", ls)
	}
	if _, err := run(t, []string{"X509_CERT_DIR=" + t.TempDir()}, "xrdcp", "-f", ep.Roots+"//x1", filepath.Join(out, "bad")); err == nil {
		t.Fatal("xrdcp trusted the server without its CA")
	}
	// root:// stays plaintext and works.
	must(t, nil, "xrdcp", "-f", ep.XRootD+"//x1", filepath.Join(out, "x2"))
	sameFile(t, src, filepath.Join(out, "x2"))

	// Python XRootD.
	py := fmt.Sprintf(`
from XRootD import client
from XRootD.client.flags import OpenFlags
f = client.File()
st, _ = f.open(%q, OpenFlags.DELETE)
assert st.ok, st.message
st, _ = f.write(b"hello over roots")
assert st.ok, st.message
f.close()
f = client.File()
st, _ = f.open(%q)
assert st.ok, st.message
st, data = f.read()
assert data == b"hello over roots", data
print("ok")
`, ep.Roots+"//py1", ep.Roots+"//py1")
	if o := must(t, xenv, "/usr/bin/python3", "-c", py); !strings.Contains(o, "ok") {
		t.Fatalf("python: %s", o)
	}
	checkNoSecrets(t, k)
}

// checkNoSecrets: no capability or key appears in the log or the audit log.
func checkNoSecrets(t *testing.T, k *harness.Process) {
	t.Helper()
	audit, _ := os.ReadFile(filepath.Join(k.Dir, "audit.log"))
	logs := k.Logs() + string(audit)
	if strings.Contains(logs, "cap=ey") || strings.Contains(logs, "kaon.cap=") || strings.Contains(logs, "PRIVATE KEY") {
		t.Fatalf("a capability or key is in the log:\n%s", logs)
	}
	for _, f := range []string{"keys/capability.key", "tls/ca.key", "tls/hostkey.pem"} {
		b, err := os.ReadFile(filepath.Join(k.Dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.TrimSpace(string(b)); len(s) > 16 && strings.Contains(logs, s[len(s)/2:len(s)/2+16]) {
			t.Fatalf("%s is in the log", f)
		}
	}
}

// xrdPlain dials a root:// listener as a client that cannot do TLS and
// returns the error code of its login.
func xrdPlain(t *testing.T, addr string) (uint32, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	req := make([]byte, 20)
	binary.BigEndian.PutUint32(req[12:], 4)
	binary.BigEndian.PutUint32(req[16:], 2012)
	// kXR_protocol without kXR_ableTLS, then kXR_login.
	prot := make([]byte, 24)
	binary.BigEndian.PutUint16(prot[2:], 3006)
	binary.BigEndian.PutUint32(prot[4:], 0x520)
	login := make([]byte, 24)
	binary.BigEndian.PutUint16(login[0:], 1)
	binary.BigEndian.PutUint16(login[2:], 3007)
	copy(login[8:], "tester")
	c.Write(append(append(req, prot...), login...))
	for i := 0; i < 3; i++ { // handshake, protocol, login
		h := make([]byte, 8)
		if _, err := io.ReadFull(c, h); err != nil {
			t.Fatalf("root:// %s answer %d: %v", addr, i, err)
		}
		body := make([]byte, binary.BigEndian.Uint32(h[4:]))
		io.ReadFull(c, body)
		if i == 2 {
			if binary.BigEndian.Uint16(h[2:]) != 4003 {
				return 0, string(body)
			}
			return binary.BigEndian.Uint32(body), string(body[4:])
		}
	}
	return 0, ""
}

// refusesPlain checks every kind of listener of a --require-tls process.
func refusesPlain(t *testing.T, httpURLs []string, xrdAddrs []string) {
	t.Helper()
	for _, u := range httpURLs {
		plain := "http://" + hostPort(u)
		for _, path := range []string{"/", "/internal/v1/heartbeat", "/api/v1/whoami", "/kaon/v1/data/1"} {
			resp, err := http.Get(plain + path)
			if err != nil {
				t.Fatalf("plaintext %s%s: %v", plain, path, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.Contains(string(b), "requires TLS: use https://") {
				t.Fatalf("plaintext %s%s answered %d %q", plain, path, resp.StatusCode, b)
			}
		}
		for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
			c, err := tls.Dial("tcp", hostPort(u), &tls.Config{InsecureSkipVerify: true, MinVersion: v, MaxVersion: v})
			if err == nil {
				c.Close()
				t.Fatalf("%s served TLS version %#x", u, v)
			} else if !strings.Contains(err.Error(), "protocol version not supported") {
				t.Fatalf("%s TLS %#x: %v, want the server's refusal", u, v, err)
			}
		}
	}
	for _, a := range xrdAddrs {
		if code, msg := xrdPlain(t, a); code != 3028 || !strings.Contains(msg, "requires TLS") {
			t.Fatalf("plaintext root:// login at %s: code %d %q, want kXR_TLSRequired", a, code, msg)
		}
	}
}

// TestRequireTLS: --require-tls refuses plaintext on the namespace HTTP
// endpoint (WebDAV, API, internal RPC), the storage HTTP data endpoint,
// the namespace root:// listener and the storage root:// data listener;
// TLS below 1.2 is refused; xrdcp 5.5 with a root:// URL is switched to
// TLS (and so needs the CA).
func TestRequireTLS(t *testing.T) {
	k := harness.Up(t, "--require-tls")
	ep := readEP(t, k.Dir)
	if !strings.HasPrefix(ep.HTTP, "https://") || !strings.HasPrefix(ep.XRootD, "roots://") {
		t.Fatalf("with --require-tls endpoints.json still lists plaintext URLs: %+v", ep)
	}
	refusesPlain(t, []string{ep.HTTPS, ep.FSTHTTPS}, []string{hostPort(ep.Roots), hostPort(ep.FSTRoots)})
	src := randomFile(t, 1<<20)
	must(t, nil, "curl", "-sSfL", "--cacert", ep.CA, "-T", src, ep.HTTPS+"/f")
	plainURL := "root://" + hostPort(ep.Roots)
	if _, err := run(t, []string{"X509_CERT_DIR=" + t.TempDir()}, "xrdcp", "-f", plainURL+"//f", filepath.Join(t.TempDir(), "f")); err == nil {
		t.Fatal("xrdcp root:// on a TLS-only server did not need the CA: it stayed plaintext")
	}
	must(t, []string{"X509_CERT_DIR=" + ep.CADir}, "xrdcp", "-f", plainURL+"//f", filepath.Join(t.TempDir(), "f"))
}

// TestSeparateStorageServer: a storage server in its own process serves
// TLS, registers over TLS (verifying the namespace server with the CA)
// and is where https:// and roots:// redirects go.
func TestSeparateStorageServer(t *testing.T) {
	mdir := t.TempDir()
	m := harness.Start(t, mdir, "mgm", "--data", mdir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--require-tls")
	mep := readEP(t, mdir)
	fdir := t.TempDir()
	fs := t.TempDir()
	f := harness.Start(t, fdir, "fst", "--data", fdir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--require-tls",
		"--tls-dir", filepath.Join(mdir, "tls"), "--mgm", mep.HTTPS, "--mgm-xrootd", hostPort(mep.Roots),
		"--key", filepath.Join(mdir, "keys", "capability.key"), "--fs", fs)
	fep := readEP(t, fdir)
	if !strings.HasPrefix(fep.FSTHTTP, "https://") || fep.FSTRoots == "" {
		t.Fatalf("fst endpoints: %+v", fep)
	}
	refusesPlain(t, []string{fep.FSTHTTPS}, []string{hostPort(fep.FSTRoots)})
	src := randomFile(t, 2<<20)
	loc := must(t, nil, "curl", "-sS", "--cacert", mep.CA, "-T", src, "-o", "/dev/null", "-w", "%{redirect_url}", mep.HTTPS+"/s1")
	if !strings.HasPrefix(loc, fep.FSTHTTPS+"/") {
		t.Fatalf("redirected to %q, want the storage server %s", loc, fep.FSTHTTPS)
	}
	must(t, nil, "curl", "-sSfL", "--cacert", mep.CA, "-T", src, mep.HTTPS+"/s1")
	xenv := []string{"X509_CERT_DIR=" + mep.CADir}
	must(t, xenv, "xrdcp", "-f", src, mep.Roots+"//s2")
	out := filepath.Join(t.TempDir(), "s2")
	must(t, xenv, "xrdcp", "-f", mep.Roots+"//s2", out)
	sameFile(t, src, out)
	_ = m
	_ = f
}

// TestCapabilityOverTLS: a capability from an https redirect works only
// for its file, its mode, once, and until it expires.
func TestCapabilityOverTLS(t *testing.T) {
	k := harness.Up(t, "--require-tls", "--cap-ttl", "3s")
	ep := readEP(t, k.Dir)
	src := randomFile(t, 64<<10)
	put := func(name string) string {
		return must(t, nil, "curl", "-sS", "--cacert", ep.CA, "-T", src, "-o", "/dev/null", "-w", "%{redirect_url}", ep.HTTPS+"/"+name)
	}
	status := func(args ...string) string {
		out, _ := run(t, nil, "curl", append([]string{"-sS", "--cacert", ep.CA, "-o", "/dev/null", "-w", "%{http_code}"}, args...)...)
		return out
	}
	loc := put("cap1")
	if !strings.HasPrefix(loc, ep.FSTHTTPS+"/") || !strings.Contains(loc, "cap=") {
		t.Fatalf("redirect %q", loc)
	}
	if s := status(loc); s != "403" {
		t.Fatalf("GET with an upload capability: %s", s)
	}
	// Another file id with the same capability.
	i := strings.LastIndexByte(loc[:strings.IndexByte(loc, '?')], '/')
	other := loc[:i+1] + "ffff" + loc[strings.IndexByte(loc, '?'):]
	if s := status("-T", src, other); s != "403" {
		t.Fatalf("PUT of another file id with the capability: %s", s)
	}
	if s := status("-T", src, loc); s != "201" {
		t.Fatalf("PUT with the capability: %s", s)
	}
	if s := status("-T", src, loc); s == "201" {
		t.Fatal("the capability was good for a second upload")
	}
	loc = put("cap2")
	time.Sleep(4 * time.Second) // past --cap-ttl
	if s := status("-T", src, loc); s != "403" {
		t.Fatalf("PUT with an expired capability: %s", s)
	}
	checkNoSecrets(t, k)
}

// TestZtnTokens: xrdcp/xrdfs 5.5 with BEARER_TOKEN or BEARER_TOKEN_FILE
// (mode 0600) over roots:// are who the token says, within its scopes; a
// forged token gets nothing, with the reason in the client's message; no
// token reaches a log.
func TestZtnTokens(t *testing.T) {
	src := t.TempDir()
	os.Chmod(src, 0o755)
	iss := tokentest.New(t, src, "https://issuer.test", "https://kaon.test")
	k := harness.Up(t, "--tls", "--auth", "unix,token", "--token-issuer", iss.URL+"="+iss.JWKSFile+",user=4242",
		"--token-audience", "https://kaon.test")
	ep := readEP(t, k.Dir)
	k.MustKaon("mkdir", "/tok")
	k.MustKaon("chown", "4242:4242", "/tok")
	k.MustKaon("chmod", "755", "/tok")
	data := randomFile(t, 1<<20)
	xenv := []string{"X509_CERT_DIR=" + ep.CADir}
	rw := iss.Token(t, "storage.modify:/tok storage.read:/tok")
	must(t, append(xenv, "BEARER_TOKEN="+rw), "xrdcp", "-f", data, ep.Roots+"//tok/a")
	if st := k.MustKaon("stat", "/tok/a"); !strings.Contains(st, "Uid: 4242 ") {
		t.Fatalf("the token's upload is not 4242's:\n%s", st)
	}
	tf := filepath.Join(t.TempDir(), "bt")
	os.WriteFile(tf, []byte(rw+"\n"), 0o600)
	out := filepath.Join(t.TempDir(), "a")
	must(t, append(xenv, "BEARER_TOKEN_FILE="+tf), "xrdcp", "-f", ep.Roots+"//tok/a", out)
	sameFile(t, data, out)
	// Scopes narrow: a read token cannot write.
	ro := iss.Token(t, "storage.read:/tok")
	if o, err := run(t, append(xenv, "BEARER_TOKEN="+ro), "xrdcp", "-f", data, ep.Roots+"//tok/b"); err == nil {
		t.Fatalf("a read-only token uploaded: %s", o)
	}
	// Without a token the loopback client is its unix user (root here).
	if ls := must(t, xenv, "xrdfs", ep.Roots, "ls", "/tok"); !strings.Contains(ls, "/tok/a") {
		t.Fatalf("ls: %s", ls)
	}
	// A forged token gets nothing (never nobody's or root's access); the
	// client's error message says why.
	forged := iss.Forged(t, "storage.modify:/tok")
	for name, tok := range forged {
		o, err := run(t, append(xenv, "BEARER_TOKEN="+tok), "xrdfs", ep.Roots, "ls", "/tok")
		if err == nil || !strings.Contains(o, "[3010]") || !strings.Contains(o, "token refused") {
			t.Fatalf("forged token (%s): %v\n%s", name, err, o)
		}
	}
	o, err := run(t, append(xenv, "BEARER_TOKEN="+forged["expired"]), "xrdcp", "-f", ep.Roots+"//tok/a", out)
	if err == nil || !strings.Contains(o, "token refused") || !strings.Contains(o, "expired") {
		t.Fatalf("xrdcp with an expired token: %v\n%s", err, o)
	}
	logs := k.Logs()
	for _, tok := range append([]string{rw, ro}, func() []string {
		var v []string
		for _, x := range forged {
			v = append(v, x)
		}
		return v
	}()...) {
		if i := strings.LastIndexByte(tok, '.'); i > 0 && strings.Contains(logs, tok[i-20:i]) {
			t.Fatal("a token is in the log")
		}
	}
}

// TestPlaintextTokens: a --tls instance refuses a bearer token that came
// over plaintext http (403 naming why; it is not taken as nobody or as the
// unix peer either) and takes it over https; --auth-plaintext=allow takes
// it over http too.
func TestPlaintextTokens(t *testing.T) {
	src := t.TempDir()
	os.Chmod(src, 0o755)
	iss := tokentest.New(t, src, "https://issuer.test", "https://kaon.test")
	tok := iss.Token(t, "storage.read:/ storage.modify:/tok")
	data := randomFile(t, 1000)
	curl := func(ep harness.Endpoints, base string) string {
		out, _ := run(t, nil, "curl", "-sSL", "--cacert", ep.CA, "-H", "Authorization: Bearer "+tok, "-T", data, "-w", "\n%{http_code}", base+"/tok/f")
		return out
	}
	for _, c := range []struct {
		extra      []string
		plain, tls string // status code at the end of curl's output
	}{
		{nil, "403", "201"},
		{[]string{"--auth-plaintext", "allow"}, "201", "201"},
	} {
		k := harness.Up(t, append([]string{"--tls", "--auth", "unix,token", "--token-issuer", iss.URL + "=" + iss.JWKSFile + ",user=4242",
			"--token-audience", "https://kaon.test"}, c.extra...)...)
		ep := readEP(t, k.Dir)
		k.MustKaon("mkdir", "/tok")
		k.MustKaon("chown", "4242:4242", "/tok")
		out := curl(ep, ep.HTTP)
		if !strings.HasSuffix(out, c.plain) || (c.plain == "403" && !strings.Contains(out, "plaintext")) {
			t.Fatalf("%v: token over http: %s", c.extra, out)
		}
		if out := curl(ep, ep.HTTPS); !strings.HasSuffix(out, c.tls) {
			t.Fatalf("%v: token over https: %s", c.extra, out)
		}
		if st := k.MustKaon("stat", "/tok/f"); !strings.Contains(st, "Uid: 4242 ") {
			t.Fatalf("%v: the upload is not the token's user's:\n%s", c.extra, st)
		}
		k.Stop()
	}
}

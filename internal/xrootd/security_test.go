package xrootd_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kaon-storage/kaon/internal/tlsconf"
	"github.com/kaon-storage/kaon/internal/xrootd"
	"github.com/kaon-storage/kaon/internal/xrootd/xrdtest"
)

// whoNS answers stat of any path with the session's uid as the size, so
// tests see who the server thinks the client is.
type whoNS struct{ *xrdtest.Backend }

func (whoNS) Stat(_ context.Context, id xrootd.Identity, p string) (xrootd.FileInfo, error) {
	return xrootd.FileInfo{Name: "who", Size: int64(id.UID), Mode: 0o644}, nil
}

const goodToken = "eyJhbGciOiJFUzI1NiJ9.good-token-body.signature"

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

// secServer runs a manager listener with TLS and a fake token
// authenticator: goodToken is uid 1234, anything else is refused.
func secServer(t *testing.T, require bool, tokens bool) (string, *tlsconf.Material, *lockedBuf) {
	t.Helper()
	m, err := tlsconf.Setup(tlsconf.Options{Dir: t.TempDir(), Require: require})
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuf{}
	cfg := xrootd.Config{Namespace: whoNS{&xrdtest.Backend{Root: t.TempDir()}}, TLS: m.Server, RequireTLS: require,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		IdentifyConn: func(user string, remote, local net.Addr) xrootd.Identity {
			return xrootd.Identity{User: user, UID: 4242, GID: 4242}
		}}
	if tokens {
		cfg.Security = []xrootd.SecProtocol{xrootd.Ztn(func(_ context.Context, user string, _, _ net.Addr, tok string) (xrootd.Identity, error) {
			if tok != goodToken {
				return xrootd.Identity{}, errors.New("signature does not verify")
			}
			return xrootd.Identity{User: "alice", UID: 1234, GID: 1234}, nil
		})}
	}
	srv := xrootd.NewServer(cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String(), m, logs
}

// protocol sends kXR_protocol with flags and returns the response flags.
func (w *wire) protocol(flags, expect byte) uint32 {
	w.t.Helper()
	var p [16]byte
	binary.BigEndian.PutUint32(p[0:], 0x520)
	p[4], p[5] = flags, expect
	r := w.call(3006, p, nil)
	if r.status != 0 || len(r.body) < 8 {
		w.t.Fatalf("protocol answer %+v", r)
	}
	return binary.BigEndian.Uint32(r.body[4:8])
}

func (w *wire) startTLS(m *tlsconf.Material) {
	w.t.Helper()
	tc := tls.Client(w.c, &tls.Config{RootCAs: m.CAs, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err := tc.Handshake(); err != nil {
		w.t.Fatalf("TLS handshake after kXR_gotoTLS: %v", err)
	}
	w.c = tc
}

func (w *wire) login(user string) resp {
	w.t.Helper()
	var p [16]byte
	copy(p[4:], user)
	return w.call(3007, p, nil)
}

func (w *wire) auth(cred string, body []byte) resp {
	w.t.Helper()
	var p [16]byte
	copy(p[12:], cred)
	return w.call(3000, p, body)
}

func (w *wire) statUID() (resp, string) {
	w.t.Helper()
	r := w.call(3017, [16]byte{}, []byte("/x"))
	if r.status != 0 {
		return r, ""
	}
	f := strings.Fields(strings.TrimRight(string(r.body), "\x00"))
	return r, f[1]
}

func ztn(tok string) []byte {
	b := []byte("ztn\x00\x00T\x00\x00")
	b = binary.BigEndian.AppendUint16(b, uint16(len(tok)+1))
	return append(append(b, tok...), 0)
}

// TestTLSUpgradeAndZtn: a client wanting TLS is switched after
// kXR_protocol; its TLS login asks for ztn; a good token is the session's
// identity; nothing happens before kXR_auth; the token is not logged.
func TestTLSUpgradeAndZtn(t *testing.T) {
	addr, m, logs := secServer(t, false, true)
	w := dialWire(t, addr, false)
	if f := w.protocol(0x01|0x02|0x04|0x08, 0x03); f&0x80000000 == 0 || f&0x40000000 == 0 {
		t.Fatalf("protocol flags %#x: want kXR_haveTLS|kXR_gotoTLS", f)
	}
	w.startTLS(m)
	r := w.login("tester")
	if r.status != 0 || len(r.body) < 16 || string(r.body[16:]) != "&P=ztn,0:16384:&P=unix" {
		t.Fatalf("TLS login answer %+v (%q)", r, r.body)
	}
	if r, _ := w.statUID(); r.errCode() != 3010 || !strings.Contains(string(r.body), "authentication required") {
		t.Fatalf("stat before kXR_auth: %+v", r)
	}
	if r := w.auth("ztn", ztn(goodToken)); r.status != 0 {
		t.Fatalf("auth with a good token: %+v %q", r, r.body)
	}
	if _, uid := w.statUID(); uid != "1234" {
		t.Fatalf("session uid %s, want the token's 1234", uid)
	}
	if strings.Contains(logs.String(), "good-token-body") {
		t.Fatal("the token is in the log")
	}
}

// TestZtnRefused: malformed ztn credentials fail the auth with
// kXR_NotAuthorized naming why; a refused token ends the auth with a
// session whose every request is refused with the reason; falling back to
// unix afterwards is refused either way; the session can do nothing.
func TestZtnRefused(t *testing.T) {
	addr, m, logs := secServer(t, false, true)
	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		{"bad signature", ztn("eyJ.forged-token-body.x"), "token refused: signature does not verify"},
		{"not ztn", []byte("gsi\x00xxxxxxxx"), "malformed credentials"},
		{"no NUL", append(ztn("abc")[:12], 'x'), "token"},
		{"longer than sent", func() []byte { b := ztn("abc"); binary.BigEndian.PutUint16(b[8:], 200); return b }(), "longer than the credentials"},
		{"issuer list", []byte("ztn\x00\x00S\x00\x00"), "lists no token issuers"},
	} {
		w := dialWire(t, addr, false)
		w.protocol(0x02|0x04, 0x03)
		w.startTLS(m)
		w.login("tester")
		r := w.auth("ztn", c.body)
		verified := c.name == "bad signature" // well-formed, refused by the verifier
		if verified && r.status != 0 || !verified && (r.errCode() != 3010 || !strings.Contains(string(r.body), c.want)) {
			t.Fatalf("%s: auth answer %+v %q, want kXR_NotAuthorized saying %q", c.name, r, r.body, c.want)
		}
		if r := w.auth("unix", []byte("unix\x00tester nogroup\x00")); r.errCode() != 3010 {
			t.Fatalf("%s: unix after a refused token: %+v", c.name, r)
		}
		if r, _ := w.statUID(); r.errCode() != 3010 || verified && !strings.Contains(string(r.body), c.want) {
			t.Fatalf("%s: stat after a refused token: %+v %q", c.name, r, r.body)
		}
	}
	if strings.Contains(logs.String(), "forged-token-body") {
		t.Fatal("a refused token is in the log")
	}
	// A client without a token logs in as its connection says.
	w := dialWire(t, addr, false)
	w.protocol(0x02|0x04, 0x03)
	w.startTLS(m)
	w.login("tester")
	if r := w.auth("unix", []byte("unix\x00root root\x00")); r.status != 0 {
		t.Fatalf("unix auth: %+v", r)
	}
	if _, uid := w.statUID(); uid != "4242" {
		t.Fatalf("unix session uid %s, want the connection's 4242 (never the claimed root)", uid)
	}
}

// TestPlaintextLogin: without TLS the login asks for nothing (ztn needs
// TLS) and kXR_auth is refused; a client that neither can nor wants TLS
// is not switched.
func TestPlaintextLogin(t *testing.T) {
	addr, _, _ := secServer(t, false, true)
	w := dialWire(t, addr, false)
	if f := w.protocol(0x02, 0x03); f&0x80000000 == 0 || f&0x40000000 != 0 {
		t.Fatalf("flags %#x: want kXR_haveTLS without kXR_gotoTLS for a client that does not want TLS", f)
	}
	r := w.login("tester")
	if r.status != 0 || len(r.body) != 16 {
		t.Fatalf("plaintext login asked for security: %+v %q", r, r.body)
	}
	if r := w.auth("ztn", ztn(goodToken)); r.errCode() != 3013 {
		t.Fatalf("ztn on a plaintext session: %+v", r)
	}
	if _, uid := w.statUID(); uid != "4242" {
		t.Fatalf("uid %s", uid)
	}
}

// TestRequireTLS: a client that cannot switch is refused at login and
// bind with kXR_TLSRequired; an able one is switched even without asking.
func TestRequireTLS(t *testing.T) {
	addr, m, _ := secServer(t, true, false)
	w := dialWire(t, addr, false)
	w.protocol(0, 0x03)
	if r := w.login("tester"); r.errCode() != 3028 || !strings.Contains(string(r.body), "requires TLS") {
		t.Fatalf("plaintext login on a TLS-only server: %+v %q", r, r.body)
	}
	var p [16]byte
	if r := w.call(3024, p, nil); r.errCode() != 3028 {
		t.Fatalf("plaintext bind on a TLS-only server: %+v", r)
	}
	w = dialWire(t, addr, false)
	if f := w.protocol(0x02, 0x03); f&0x40000000 == 0 || f&0x04000000 == 0 {
		t.Fatalf("flags %#x: an able client must be switched and told kXR_tlsLogin", f)
	}
	w.startTLS(m)
	if r := w.login("tester"); r.status != 0 || len(r.body) != 16 {
		t.Fatalf("TLS login: %+v", r)
	}
}

// TestNoTLSConfigured: without TLS nothing changes (no TLS flags).
func TestNoTLSConfigured(t *testing.T) {
	c := startCluster(t)
	w := dialWire(t, c.MgrAddr, false)
	if f := w.protocol(0x02|0x04, 0x03); f&0xff000000 != 0 {
		t.Fatalf("flags %#x without TLS", f)
	}
}

// TestZtnRealClient: xrdfs 5.5 over roots:// sends BEARER_TOKEN and
// BEARER_TOKEN_FILE (mode 0600) with ztn and is who the token says;
// without a token it is who its connection says; a refused token fails
// the command with the server's reason; root:// never sends the token.
func TestZtnRealClient(t *testing.T) {
	need(t, "xrdfs")
	addr, m, logs := secServer(t, false, true)
	tokFile := filepath.Join(t.TempDir(), "bt")
	os.WriteFile(tokFile, []byte(goodToken+"\n"), 0o600)
	stat := func(url string, env ...string) (string, error) {
		cmd := exec.Command("timeout", "60", "xrdfs", url, "stat", "/x")
		cmd.Env = append(os.Environ(), append(env, "X509_CERT_DIR="+m.CADir)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, c := range []struct {
		name, url string
		env       []string
		size      string
	}{
		{"BEARER_TOKEN", "roots://" + addr, []string{"BEARER_TOKEN=" + goodToken}, "1234"},
		{"BEARER_TOKEN_FILE", "roots://" + addr, []string{"BEARER_TOKEN_FILE=" + tokFile}, "1234"},
		{"no token", "roots://" + addr, nil, "4242"},
		{"token over root://", "root://" + addr, []string{"BEARER_TOKEN=" + goodToken}, "4242"},
	} {
		out, err := stat(c.url, c.env...)
		if err != nil || !strings.Contains(out, "Size:   "+c.size) {
			t.Fatalf("%s: %v\n%s", c.name, err, out)
		}
	}
	// The client's error message names the server's reason.
	out, err := stat("roots://"+addr, "BEARER_TOKEN=eyJ.forged-token-body.x")
	if err == nil || !strings.Contains(out, "token refused: signature does not verify") || strings.Contains(out, "No protocols left") {
		t.Fatalf("a refused token: %v\n%s", err, out)
	}
	if strings.Contains(logs.String(), "forged-token-body") || strings.Contains(logs.String(), "good-token-body") {
		t.Fatal("a token is in the log")
	}
}

// pinProtocol is a two-round security protocol for tests: "hello" is
// answered with kXR_authmore "challenge"; then "answer-ok" is uid 777,
// "answer-bad" a refused credential, anything else malformed.
type pinProtocol struct{}

func (pinProtocol) Name() string                         { return "pin" }
func (pinProtocol) Params(bool) (string, bool)           { return "v:1", true }
func (pinProtocol) Begin(xrootd.Peer) xrootd.SecExchange { return &pinExchange{} }

type pinExchange struct{ greeted bool }

func (p *pinExchange) Step(_ context.Context, cred []byte) ([]byte, xrootd.Identity, error) {
	switch c := string(cred); {
	case c == "hello" && !p.greeted:
		p.greeted = true
		return []byte("challenge"), xrootd.Identity{}, nil
	case c == "answer-ok" && p.greeted:
		return nil, xrootd.Identity{User: "pin", UID: 777, GID: 777}, nil
	case c == "answer-bad" && p.greeted:
		return nil, xrootd.Identity{}, &xrootd.Refusal{Msg: "wrong answer"}
	}
	return nil, xrootd.Identity{}, errors.New("malformed credentials")
}

// TestSecurityProtocols: logins offer Config.Security in its order (ztn
// only on TLS connections), then unix; a protocol runs several kXR_auth
// rounds answered with kXR_authmore, the session doing nothing before
// the last; a refused credential leaves a session refusing every request
// with the reason and every later kXR_auth; a malformed one fails
// kXR_auth.
func TestSecurityProtocols(t *testing.T) {
	m, err := tlsconf.Setup(tlsconf.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ztnp := xrootd.Ztn(func(context.Context, string, net.Addr, net.Addr, string) (xrootd.Identity, error) {
		return xrootd.Identity{}, errors.New("no tokens here")
	})
	srv := xrootd.NewServer(xrootd.Config{Namespace: whoNS{&xrdtest.Backend{Root: t.TempDir()}}, TLS: m.Server,
		Security: []xrootd.SecProtocol{pinProtocol{}, ztnp},
		IdentifyConn: func(user string, _, _ net.Addr) xrootd.Identity {
			return xrootd.Identity{User: user, UID: 4242, GID: 4242}
		}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	addr := l.Addr().String()

	w := dialWire(t, addr, false)
	if r := w.login("tester"); string(r.body[16:]) != "&P=pin,v:1&P=unix" {
		t.Fatalf("plaintext login offers %q", r.body[16:])
	}
	tw := dialWire(t, addr, false)
	tw.protocol(0x02|0x04, 0x03)
	tw.startTLS(m)
	if r := tw.login("tester"); string(r.body[16:]) != "&P=pin,v:1&P=ztn,0:16384:&P=unix" {
		t.Fatalf("TLS login offers %q", r.body[16:])
	}

	if r := w.auth("pin", []byte("hello")); r.status != 4002 || string(r.body) != "challenge" {
		t.Fatalf("first round: %+v %q, want kXR_authmore \"challenge\"", r, r.body)
	}
	if r, _ := w.statUID(); r.errCode() != 3010 || !strings.Contains(string(r.body), "authentication required") {
		t.Fatalf("stat between rounds: %+v", r)
	}
	if r := w.auth("pin", []byte("answer-ok")); r.status != 0 {
		t.Fatalf("second round: %+v %q", r, r.body)
	}
	if _, uid := w.statUID(); uid != "777" {
		t.Fatalf("session uid %s, want the protocol's 777", uid)
	}

	w = dialWire(t, addr, false)
	w.login("tester")
	w.auth("pin", []byte("hello"))
	if r := w.auth("pin", []byte("answer-bad")); r.status != 0 {
		t.Fatalf("a refused credential: %+v", r)
	}
	if r, _ := w.statUID(); r.errCode() != 3010 || !strings.Contains(string(r.body), "pin: wrong answer") {
		t.Fatalf("stat after a refused credential: %+v %q", r, r.body)
	}
	if r := w.auth("unix", []byte("unix\x00tester x\x00")); r.errCode() != 3010 {
		t.Fatalf("unix after a refused credential: %+v", r)
	}

	w = dialWire(t, addr, false)
	w.login("tester")
	if r := w.auth("pin", []byte("junk")); r.errCode() != 3010 || !strings.Contains(string(r.body), "pin: malformed credentials") {
		t.Fatalf("malformed credentials: %+v %q", r, r.body)
	}
	if r := w.auth("krb5", []byte("x")); r.errCode() != 3010 {
		t.Fatalf("a protocol not offered: %+v", r)
	}
}

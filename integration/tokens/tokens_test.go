// Package tokens tests bearer tokens with the real clients: curl (header
// and ?authz=), davix, gfal, the kaon CLI (BEARER_TOKEN, token
// issue/inspect/rotate/keys), xrdfs against a token-only server, and one
// Kaon instance trusting another's tokens through its published keys,
// also with the issuer down.
package tokens

import (
	"bytes"
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

// run runs a client with a deadline (as uid when uid > 0) and returns
// stdout, stderr and the exit code.
func run(t *testing.T, env []string, uid int, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = "/"
	if uid > 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s %v did not finish within 2 minutes", name, args)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func mustRun(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	out, errs, code := run(t, env, 0, name, args...)
	if code != 0 {
		t.Fatalf("%s %v: exit %d\n%s\n%s", name, args, code, out, errs)
	}
	return out
}

// kaonCLI runs the kaon CLI against k with env added.
func kaonCLI(t *testing.T, k *harness.Process, env []string, uid int, args ...string) (string, string, int) {
	return run(t, append(env, "KAON_URL="+k.EP.HTTP), uid, harness.Binary(t), args...)
}

func noTokens(t *testing.T, k *harness.Process, tokens []string) {
	t.Helper()
	audit, _ := os.ReadFile(filepath.Join(k.Dir, "audit.log"))
	for _, tok := range tokens {
		for _, part := range strings.Split(tok, ".")[1:] {
			if len(part) < 16 {
				continue
			}
			if strings.Contains(k.Logs(), part) || bytes.Contains(audit, []byte(part)) {
				t.Fatal("a token reached the server log, the access log or the audit log")
			}
		}
	}
}

// TestRealClients: tokens issued by `kaon token issue` and by an external
// issuer work with curl (header and ?authz=), davix and gfal; the CLI
// sends BEARER_TOKEN (kaon cp too); only root issues, never with a token.
func TestRealClients(t *testing.T) {
	src := t.TempDir()
	os.Chmod(src, 0o755)
	iss := tokentest.New(t, src, "https://issuer.test", "https://kaon.test")
	k := harness.Up(t, "--auth", "unix,token", "--token-issuer", iss.URL+"="+iss.JWKSFile+",user=4242",
		"--token-audience", "https://kaon.test")
	k.MustKaon("mkdir", "/rc")
	k.MustKaon("chown", "4242:4242", "/rc")
	local := filepath.Join(src, "f")
	content := []byte("bytes through a bearer token\n")
	os.WriteFile(local, content, 0o644)

	own := strings.TrimSpace(k.MustKaon("token", "issue", "--path", "/rc", "--scope", "storage.read,storage.modify", "--ttl", "10m", "--user", "4242"))
	ext := iss.Token(t, "storage.read:/rc storage.create:/rc")
	tokens := []string{own, ext}
	auth := func(tok string) string { return "Authorization: Bearer " + tok }
	u := k.EP.HTTP + "/rc/"

	mustRun(t, nil, "curl", "-sSf", "-L", "-T", local, "-H", auth(own), u+"curl")
	if out := mustRun(t, nil, "curl", "-sSf", "-L", u+"curl?authz=Bearer%20"+own); out != string(content) {
		t.Fatalf("GET with ?authz=: %q", out)
	}
	mustRun(t, nil, "curl", "-sSf", "-L", "-T", local, u+"authz-put?authz=Bearer%20"+ext)
	if out, _, code := run(t, nil, 0, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", k.EP.HTTP+"/rc/curl?authz=Bearer%20"+ext[:len(ext)-4]+"AAAA"); code != 0 || out != "401" {
		t.Fatalf("?authz= with a forged token: %s", out)
	}

	mustRun(t, nil, "davix-put", "-H", auth(own), local, u+"davix")
	if out := mustRun(t, nil, "davix-get", "-H", auth(ext), u+"davix"); out != string(content) {
		t.Fatalf("davix-get: %q", out)
	}
	if _, _, code := run(t, nil, 0, "davix-put", "-H", auth(ext), local, u+"davix"); code == 0 {
		t.Fatal("davix-put overwrote with a create token")
	}

	gfal := func(tok string) []string { return []string{"GFAL_PYTHONBIN=/usr/bin/python3", "BEARER_TOKEN=" + tok} }
	mustRun(t, gfal(own), "gfal-copy", local, u+"gfal")
	out := mustRun(t, gfal(ext), "gfal-ls", u)
	for _, n := range []string{"curl", "authz-put", "davix", "gfal"} {
		if !strings.Contains(out, n) {
			t.Fatalf("gfal-ls with a token: %q lacks %s", out, n)
		}
	}
	dst := filepath.Join(t.TempDir(), "back")
	mustRun(t, gfal(ext), "gfal-copy", u+"gfal", "file://"+dst)
	if b, _ := os.ReadFile(dst); !bytes.Equal(b, content) {
		t.Fatalf("gfal-copy back: %q", b)
	}
	if _, _, code := run(t, gfal(iss.Forged(t, "storage.read:/rc")["wrong key"]), 0, "gfal-ls", u); code == 0 {
		t.Fatal("gfal-ls with a forged token listed")
	}

	// The CLI: whoami and inspect with the token; who may issue.
	w, _, _ := kaonCLI(t, k, []string{"BEARER_TOKEN=" + own}, 0, "whoami")
	if !strings.Contains(w, "uid=4242") || !strings.Contains(w, "method=token") || !strings.Contains(w, "scopes=read:/rc,modify:/rc") {
		t.Fatalf("whoami with a token: %q", w)
	}
	tf := filepath.Join(src, "tok")
	os.WriteFile(tf, []byte(ext+"\n"), 0o600)
	if w, _, _ := kaonCLI(t, k, []string{"BEARER_TOKEN_FILE=" + tf}, 0, "whoami"); !strings.Contains(w, "scopes=read:/rc,create:/rc") {
		t.Fatalf("whoami with BEARER_TOKEN_FILE: %q", w)
	}
	// kaon cp sends BEARER_TOKEN to the namespace server: the copy acts
	// as the token's user, within its scopes.
	env := []string{"BEARER_TOKEN=" + own}
	if _, errs, code := kaonCLI(t, k, env, 0, "cp", local, "kaon:/rc/cli"); code != 0 {
		t.Fatalf("kaon cp to Kaon with a token: %d %s", code, errs)
	}
	if st := k.MustKaon("stat", "/rc/cli"); !strings.Contains(st, "Uid: 4242") {
		t.Fatalf("kaon cp with a token of user 4242 wrote:\n%s", st)
	}
	back := filepath.Join(t.TempDir(), "cli")
	if _, errs, code := kaonCLI(t, k, env, 0, "cp", "kaon:/rc/cli", back); code != 0 {
		t.Fatalf("kaon cp from Kaon with a token: %d %s", code, errs)
	}
	if b, _ := os.ReadFile(back); !bytes.Equal(b, content) {
		t.Fatalf("kaon cp back with a token: %q", b)
	}
	if _, errs, code := kaonCLI(t, k, env, 0, "cp", local, "kaon:/outside"); code == 0 || !strings.Contains(errs, "scopes do not allow") {
		t.Fatalf("kaon cp outside the token's scopes: %d %s", code, errs)
	}
	insp := k.MustKaon("token", "inspect", own)
	for _, s := range []string{`"wlcg.ver": "1.0"`, `"alg": "ES256"`, `"scope": "storage.read:/rc storage.modify:/rc"`, "expires in", "method=token"} {
		if !strings.Contains(insp, s) {
			t.Fatalf("token inspect lacks %q:\n%s", s, insp)
		}
	}
	if _, errs, code := kaonCLI(t, k, nil, 65534, "token", "issue", "--path", "/rc", "--scope", "storage.read", "--user", "4242"); code == 0 || !strings.Contains(errs, "root only") {
		t.Fatalf("nobody issued a token: %d %s", code, errs)
	}
	if _, errs, code := kaonCLI(t, k, []string{"BEARER_TOKEN=" + own}, 0, "token", "issue", "--path", "/rc", "--scope", "storage.read", "--user", "4242"); code == 0 || !strings.Contains(errs, "scoped token") {
		t.Fatalf("a token issued a token: %d %s", code, errs)
	}
	if _, errs, code := kaonCLI(t, k, nil, 0, "token", "issue", "--path", "/rc", "--scope", "storage.read", "--user", "root"); code == 0 || !strings.Contains(errs, "never act as root") {
		t.Fatalf("a token for root: %d %s", code, errs)
	}
	noTokens(t, k, tokens)
}

// TestTokenOnly: with --auth token a loopback client without a token is
// refused with a clear reason over HTTP, the admin API and root://, except
// the host's root on the admin API (auth.HostRoot): it administers the
// server (kaon token issue, mkdir, chown) but reads no data without a
// token.
func TestTokenOnly(t *testing.T) {
	src := t.TempDir()
	iss := tokentest.New(t, src, "https://issuer.test", "https://kaon.test")
	k := harness.Up(t, "--auth", "token", "--token-issuer", iss.URL+"="+iss.JWKSFile+",user=4242", "--token-audience", "https://kaon.test")
	out, _, _ := run(t, nil, 0, "curl", "-sS", "-D", "-", k.EP.HTTP+"/")
	if !strings.Contains(out, "401") || !strings.Contains(out, "a bearer token is required") || !strings.Contains(strings.ToLower(out), "www-authenticate: bearer") {
		t.Fatalf("curl without a token:\n%s", out)
	}
	if _, errs, code := kaonCLI(t, k, nil, 65534, "whoami"); code == 0 || !strings.Contains(errs, "a bearer token is required") {
		t.Fatalf("kaon whoami as nobody without a token: %d %s", code, errs)
	}
	if w, errs, code := kaonCLI(t, k, nil, 0, "whoami"); code != 0 || !strings.Contains(w, "uid=0") {
		t.Fatalf("kaon whoami as the host's root on a token-only server: %d %q %s", code, w, errs)
	}
	k.MustKaon("mkdir", "/adm")
	k.MustKaon("chown", "4242:4242", "/adm")
	own := strings.TrimSpace(k.MustKaon("token", "issue", "--path", "/adm", "--scope", "storage.create,storage.read", "--user", "4242"))
	if out, _, _ := run(t, nil, 0, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-L", "-H", "Authorization: Bearer "+own, "-T", "/etc/hostname", k.EP.HTTP+"/adm/f"); out != "201" {
		t.Fatalf("upload with a token root issued on a token-only server: %s", out)
	}
	if out, _, _ := run(t, nil, 0, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-L", k.EP.HTTP+"/adm/f"); out != "401" {
		t.Fatalf("the host's root reads data without a token on a token-only server: %s", out)
	}
	_, errs, code := run(t, []string{"XRD_CONNECTIONRETRY=1"}, 0, "xrdfs", strings.TrimPrefix(k.EP.XRootD, "root://"), "ls", "/")
	if code == 0 || !strings.Contains(errs, "3010") || !strings.Contains(errs, "a bearer token is required") {
		t.Fatalf("xrdfs without a token: %d %s", code, errs)
	}
	tok := iss.Token(t, "storage.read:/")
	if w, errs, _ := kaonCLI(t, k, []string{"BEARER_TOKEN=" + tok}, 0, "whoami"); !strings.Contains(w, "uid=4242") {
		t.Fatalf("whoami with a token on a token-only server: %q %s", w, errs)
	}
	if out, _, _ := run(t, nil, 0, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: Bearer "+tok, "-X", "PROPFIND", "-H", "Depth: 0", k.EP.HTTP+"/"); out != "207" {
		t.Fatalf("PROPFIND with a token on a token-only server: %s", out)
	}
	// methods that cannot be had are refused at start
	for _, c := range []struct{ auth, why string }{{"unix,x509", "needs --tls"}, {"kerberos", "unknown method"}} {
		_, errs, code := run(t, nil, 0, harness.Binary(t), "up", "--data", t.TempDir(), "--http", "127.0.0.1:0", "--xrootd", "", "--auth", c.auth)
		if code == 0 || !strings.Contains(errs, c.why) {
			t.Fatalf("--auth %s: %d %s", c.auth, code, errs)
		}
	}
	noTokens(t, k, []string{tok, own})
}

// TestKaonToKaon: instance B trusts instance A's tokens through A's
// published discovery document and JWKS; a rotation at A keeps old tokens
// valid; B keeps verifying from its disk cache with A down.
func TestKaonToKaon(t *testing.T) {
	a := harness.Up(t, "--auth", "unix,token")
	b := harness.Up(t, "--auth", "unix,token", "--token-issuer", a.EP.HTTP+",user=4242", "--token-audience", "https://kaon-b.test")
	b.MustKaon("mkdir", "/shared")
	b.MustKaon("chown", "4242:4242", "/shared")
	a.MustKaon("mkdir", "/shared")
	a.MustKaon("chown", "4242:4242", "/shared")
	issue := func() string {
		return strings.TrimSpace(a.MustKaon("token", "issue", "--path", "/shared", "--scope", "storage.read,storage.create",
			"--user", "4242", "--ttl", "30m", "--aud", "https://kaon-b.test", "--aud", a.EP.HTTP))
	}
	old := issue()
	code := func(k *harness.Process, tok string) string {
		out, _, _ := run(t, nil, 0, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Authorization: Bearer "+tok,
			"-X", "PROPFIND", "-H", "Depth: 1", k.EP.HTTP+"/shared")
		return out
	}
	if c := code(b, old); c != "207" {
		t.Fatalf("A's token at B: %s", c)
	}
	if c := code(b, old[:len(old)-6]+"AAAAAA"); c != "401" {
		t.Fatalf("A's token with a broken signature at B: %s", c)
	}
	kid := strings.TrimSpace(a.MustKaon("token", "rotate"))
	keys := strings.Split(strings.TrimSpace(a.MustKaon("token", "keys")), "\n")
	if len(keys) != 3 || !strings.Contains(keys[0], "published") || !strings.HasPrefix(keys[1], kid) ||
		!strings.HasSuffix(keys[1], "signing") || !strings.Contains(keys[2], "verifying (retired") {
		t.Fatalf("token keys after rotate (want next, signing %s, retired):\n%s", kid, strings.Join(keys, "\n"))
	}
	fresh := issue()
	if c := code(a, old); c != "207" {
		t.Fatalf("a token of the previous key at A after rotation: %s", c)
	}
	if c := code(a, fresh); c != "207" {
		t.Fatalf("a token of the new key at A: %s", c)
	}
	if c := code(b, old); c != "207" {
		t.Fatalf("a token of the previous key at B after rotation: %s", c)
	}
	if c := code(b, fresh); c != "207" {
		t.Fatalf("a token of the new key at B: %s", c)
	}
	// B restarted with A down verifies from the keys it cached on disk.
	a.Stop()
	b.Restart()
	if c := code(b, old); c != "207" {
		t.Fatalf("A's token at B with A down: %s", c)
	}
	noTokens(t, a, []string{old, fresh})
	noTokens(t, b, []string{old, fresh})
}

// TestConfigFileTLSAndTokens: the TLS and token settings work from the
// config file as from the flags: tls, auth, repeated token-issuer and
// token-audience (TOML arrays).
func TestConfigFileTLSAndTokens(t *testing.T) {
	src := t.TempDir()
	os.Mkdir(filepath.Join(src, "a"), 0o755)
	os.Mkdir(filepath.Join(src, "b"), 0o755)
	a := tokentest.New(t, filepath.Join(src, "a"), "https://a.test", "https://aud-a.test")
	b := tokentest.New(t, filepath.Join(src, "b"), "https://b.test", "https://aud-b.test")
	conf := filepath.Join(src, "kaon.toml")
	os.WriteFile(conf, []byte(`tls = true
auth = "unix,token"
token-issuer = ["`+a.URL+"="+a.JWKSFile+`,user=4242", "`+b.URL+"="+b.JWKSFile+`,user=4243"]
token-audience = ["https://aud-a.test", "https://aud-b.test"]
`), 0o644)
	dir := t.TempDir()
	k := harness.Start(t, dir, "up", "--config", conf, "--data", dir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0")
	ep := readTLSEP(t, k)
	for _, c := range []struct {
		tok, uid string
	}{{a.Token(t, "storage.read:/"), "uid=4242"}, {b.Token(t, "storage.read:/"), "uid=4243"}} {
		w, errs, code := kaonCLI(t, k, []string{"BEARER_TOKEN=" + c.tok, "SSL_CERT_FILE=" + ep.CA}, 0, "whoami", "--url", ep.HTTPS)
		if code != 0 || !strings.Contains(w, c.uid) || !strings.Contains(w, "method=token") {
			t.Fatalf("whoami over https with a token of a config-file issuer: %d %q %s", code, w, errs)
		}
	}
}

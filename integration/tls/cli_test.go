package tls

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/auth/x509auth/x509test"
)

// TestCLIGridClient: the kaon CLI against a --require-tls instance works
// out of the box (it trusts the CA endpoints.json names; elsewhere --ca or
// X509_CERT_DIR), finds a bearer token as WLCG Bearer Token Discovery
// says (BEARER_TOKEN, BEARER_TOKEN_FILE, $XDG_RUNTIME_DIR/bt_u$UID, in
// that order) and, told to with --x509, authenticates with the grid proxy
// of X509_USER_PROXY.
func TestCLIGridClient(t *testing.T) {
	grid := x509test.NewCA("Grid")
	site := harness.NewGridSite(t, grid, aliceMap)
	dir, local, caDir, gridmap := site.Dir, site.Local, site.CADir, site.Gridmap
	k := harness.Start(t, dir, "up", "--data", dir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--require-tls",
		"--auth", "unix,token,x509", "--tls-ca-dir", caDir, "--grid-mapfile", gridmap)
	ep := readEP(t, dir)
	if got, _ := os.ReadFile(ep.CA); string(got) != string(mustRead(t, local.CertFile)) {
		t.Fatalf("endpoints.json names %s as the CA, not the local CA that signed the host certificate", ep.CA)
	}

	kaon := func(env []string, args ...string) (string, error) {
		return run(t, append([]string{"KAON_URL=", "BEARER_TOKEN=", "BEARER_TOKEN_FILE=", "X509_CERT_DIR=", "X509_USER_PROXY=",
			"XDG_RUNTIME_DIR=" + t.TempDir()}, env...), harness.Binary(t), args...)
	}
	// The local all-in-one (KAON_DATA): URL and CA from its endpoints.json.
	inst := []string{"KAON_DATA=" + dir}
	if out, err := kaon(inst, "whoami"); err != nil || !strings.Contains(out, "uid=0 ") || !strings.Contains(out, "method=unix") {
		t.Fatalf("kaon whoami on the local --require-tls instance: %v %s", err, out)
	}
	// Elsewhere (no endpoints.json): the CA must be given.
	away := []string{"KAON_DATA=" + t.TempDir(), "KAON_URL=" + ep.HTTPS}
	if out, err := kaon(away, "whoami"); err == nil || !strings.Contains(out, "certificate") {
		t.Fatalf("kaon whoami trusted an https server whose CA it was not given: %v %s", err, out)
	}
	if out, err := kaon(away, "whoami", "--ca", ep.CA); err != nil || !strings.Contains(out, "uid=0 ") {
		t.Fatalf("kaon whoami --ca: %v %s", err, out)
	}
	if out, err := kaon(append(away, "X509_CERT_DIR="+ep.CADir), "whoami"); err != nil || !strings.Contains(out, "uid=0 ") {
		t.Fatalf("kaon whoami with X509_CERT_DIR: %v %s", err, out)
	}

	// Bearer Token Discovery, each place in turn, the earlier ones first.
	issue := func(user string) string {
		out, err := kaon(inst, "token", "issue", "--path", "/", "--scope", "storage.read", "--ttl", "10m", "--user", user)
		if err != nil {
			t.Fatalf("kaon token issue: %v %s", err, out)
		}
		return strings.TrimSpace(out)
	}
	tok := map[string]string{"BEARER_TOKEN": issue("4201"), "BEARER_TOKEN_FILE": issue("4202"), "XDG_RUNTIME_DIR": issue("4203")}
	xdg, tokFile := t.TempDir(), filepath.Join(t.TempDir(), "token")
	os.WriteFile(filepath.Join(xdg, "bt_u"+strconv.Itoa(os.Getuid())), []byte(tok["XDG_RUNTIME_DIR"]+"\n"), 0o600)
	os.WriteFile(tokFile, []byte(tok["BEARER_TOKEN_FILE"]+"\n"), 0o600)
	env := append(inst, "XDG_RUNTIME_DIR="+xdg)
	for _, c := range []struct {
		env []string
		uid string
	}{
		{append(env, "BEARER_TOKEN="+tok["BEARER_TOKEN"], "BEARER_TOKEN_FILE="+tokFile), "4201"},
		{append(env, "BEARER_TOKEN_FILE="+tokFile), "4202"},
		{append(env, "BEARER_TOKEN_FILE="+filepath.Join(xdg, "absent")), "4203"},
		{env, "4203"},
	} {
		if out, err := kaon(c.env, "whoami"); err != nil || !strings.Contains(out, "uid="+c.uid+" ") || !strings.Contains(out, "method=token") {
			t.Fatalf("kaon whoami with %v: %v %s (want uid %s)", c.env[1:], err, out, c.uid)
		}
	}

	// --x509: the grid proxy, not the token of the environment.
	proxy := filepath.Join(t.TempDir(), "proxy")
	if err := grid.User("Alice").Proxy(x509test.ProxyOpts{}).WriteProxyFile(proxy); err != nil {
		t.Fatal(err)
	}
	if out, err := kaon(append(env, "X509_USER_PROXY="+proxy), "whoami", "--x509"); err != nil || !strings.Contains(out, "name=daemon method=x509") {
		t.Fatalf("kaon whoami --x509: %v %s", err, out)
	}
	if out, err := kaon(append(env, "X509_USER_PROXY="+filepath.Join(xdg, "absent")), "whoami", "--x509"); err == nil || !strings.Contains(out, "grid proxy") {
		t.Fatalf("kaon whoami --x509 without a proxy did not say so: %v %s", err, out)
	}
	_ = k
}

func mustRead(t *testing.T, f string) []byte {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

package frontends

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/integration/tokentest"
	"github.com/kaon-storage/kaon/internal/frontendtest"
)

// TestTokenConformance runs the bearer-token scenarios
// (frontendtest.Tokens) over every front end that carries tokens. No
// token reaches the server log, the access log or the audit log.
//
// HTTP carries the token in the Authorization header (curl); root:// in
// ztn over TLS (roots://, BEARER_TOKEN in the environment of the Python
// XRootD bindings, X509_CERT_DIR naming Kaon's CA directory).
func TestTokenConformance(t *testing.T) {
	iss := tokentest.New(t, t.TempDir(), "https://issuer.test", "https://kaon.test")
	k := harness.Up(t, "--tls", "--auth", "unix,token", "--token-issuer", iss.URL+"="+iss.JWKSFile+",user=4242",
		"--token-audience", "https://kaon.test")
	ep := k.EP
	if ep.Roots == "" {
		t.Fatalf("endpoints.json of kaon up --tls: %+v", ep)
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "xrd_driver.py")
	ca := filepath.Join(frontendtest.LocalDir(t), "ca.pem") // where curl run as nobody reads it
	if b, err := os.ReadFile(ep.CA); err != nil || os.WriteFile(ca, b, 0o644) != nil {
		t.Fatalf("the instance's CA %s: %v", ep.CA, err)
	}
	drivers := []func(tok string) frontendtest.Driver{
		func(tok string) frontendtest.Driver { return httpDriver{base: ep.HTTPS, token: tok, cacert: ca} }, // tokens over TLS only
		func(tok string) frontendtest.Driver {
			env := []string{"X509_CERT_DIR=" + ep.CADir}
			if tok != "" {
				env = append(env, "BEARER_TOKEN="+tok)
			}
			return xrdDriver{url: ep.Roots, script: script, env: env}
		},
	}
	used := frontendtest.Tokens(t, cli{k}, iss, drivers)
	audit, _ := os.ReadFile(filepath.Join(k.Dir, "audit.log"))
	if !bytes.Contains(audit, []byte(`"method":"token"`)) {
		t.Fatalf("the audit log records no token principal:\n%s", audit)
	}
	frontendtest.CheckNoTokens(t, used, map[string]string{"server and access log": k.Logs(), "audit log": string(audit)})
}

package webview

import (
	"os"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/integration/tokentest"
	"github.com/kaon-storage/kaon/internal/webview"
)

// TestBrowserWithTokenOverHTTPS: over https, a bearer token pasted once
// into the page authenticates the browser's later requests (kept server
// side; the cookie is HttpOnly, Secure, SameSite=Strict); what the page
// does is the token's subject's, within its scopes; the token is in no
// log.
func TestBrowserWithTokenOverHTTPS(t *testing.T) {
	d := startDriverWith(t, map[string]any{"acceptInsecureCerts": true}) // kaon up's local CA
	src := t.TempDir()
	_ = os.Chmod(src, 0o755)
	iss := tokentest.New(t, src, "https://issuer.test", "https://kaon.test")
	k := harness.Up(t, "--tls", "--auth", "unix,token", "--token-issuer", iss.URL+"="+iss.JWKSFile+",user=4242",
		"--token-audience", "https://kaon.test")
	ep := harness.ReadEndpoints(t, k.Dir)
	k.MustKaon("mkdir", "/tok")
	k.MustKaon("chown", "4242:4242", "/tok")
	k.MustKaon("mkdir", "/other")
	tok := iss.Token(t, "storage.modify:/tok storage.read:/tok")

	d.open(ep.HTTPS + "/tok/")
	d.waitText("header", "root (unix)", "the page before the token (the browser's unix user)")
	d.typeInto(`input[name="token"]`, tok)
	d.click("form.login button")
	d.waitText("#message", "authenticated as", "pasting the token")
	d.waitText("header", "(token)", "the page after the token")

	var session *cookie
	for _, c := range d.cookies() {
		if c.Name == webview.CookieName {
			c := c
			session = &c
		}
		if strings.Contains(c.Value, tok[len(tok)-20:]) {
			t.Errorf("cookie %s carries the token", c.Name)
		}
	}
	if session == nil || !session.HTTPOnly || !session.Secure || session.SameSite != "Strict" {
		t.Fatalf("the session cookie is %+v, want HttpOnly, Secure, SameSite=Strict", session)
	}

	// The token's subject makes a directory through the page.
	d.typeInto("#mkdir-name", "by-token")
	d.click("#mkdir-button")
	d.waitText("#message", "/tok/by-token created", "mkdir with the token")
	if st := k.MustKaon("stat", "/tok/by-token"); !strings.Contains(st, "Uid: 4242 ") {
		t.Errorf("the directory made with the token is not 4242's:\n%s", st)
	}
	// Outside the token's scopes the page shows what curl with the token gets: 403.
	d.open(ep.HTTPS + "/other/")
	d.waitText("#error", "403", "listing outside the token's scopes")

	// Forgetting the token: the browser is its unix user again.
	d.open(ep.HTTPS + "/tok/")
	d.click("form.login button")
	d.waitText("#message", "token forgotten", "forgetting the token")
	d.waitText("header", "root (unix)", "the page after forgetting the token")

	if i := strings.LastIndexByte(tok, '.'); strings.Contains(k.Logs(), tok[i-20:i]) || strings.Contains(k.Logs(), tok[i+1:]) {
		t.Fatal("the pasted token is in kaon's log")
	}
}

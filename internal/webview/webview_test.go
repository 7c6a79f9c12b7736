package webview

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

func TestWantsOnlyBrowsers(t *testing.T) {
	for accept, want := range map[string]bool{
		"": false, "*/*": false, "application/xml": false, "text/plain": false,
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8": true, // Chromium, Firefox
		"application/xhtml+xml": true,
		"text/html;q=0":         false,
		"text/css,*/*;q=0.1":    false, // a browser fetching the style sheet
	} {
		r := httptest.NewRequest(http.MethodGet, "/d/", nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		if got := Wants(r); got != want {
			t.Errorf("Wants(Accept: %q) = %v, want %v", accept, got, want)
		}
	}
}

func TestRenderDirEscapes(t *testing.T) {
	w := httptest.NewRecorder()
	hostile := `"><script>alert(1)</script>`
	RenderDir(w, http.StatusOK, Dir{Viewer: Viewer{Name: hostile, Method: "token", CSRF: `"x`}, Path: "/d/" + hostile,
		Entries: []nsapi.Entry{{Name: hostile, Attr: nsapi.Attr{Size: 5, Checksums: map[string]string{"adler32": hostile}}}},
		Message: hostile})
	body := w.Body.String()
	if strings.Contains(body, "<script>") || strings.Contains(body, `value=""x"`) {
		t.Fatalf("unescaped:\n%s", body)
	}
	if w.Header().Get("Content-Security-Policy") != CSP || w.Header().Get("X-Frame-Options") != "DENY" {
		t.Errorf("headers: %v", w.Header())
	}
}

func TestSessionsBindCSRFAndExpire(t *testing.T) {
	s := NewSessions(time.Hour, 2)
	now := time.Now()
	s.now = func() time.Time { return now }
	start := func(tlsOn bool) (*http.Cookie, string) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if tlsOn {
			r.TLS = &tls.ConnectionState{}
		}
		id := s.Ensure(w, r)
		c := w.Result().Cookies()[0]
		if c.Value != id || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure != tlsOn {
			t.Fatalf("cookie %+v (tls %v)", c, tlsOn)
		}
		return c, s.CSRF(id)
	}
	post := func(c *http.Cookie) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		if c != nil {
			r.AddCookie(c)
		}
		return r
	}
	a, atok := start(true)
	b, btok := start(false)
	if err := s.CheckCSRF(post(a), atok); err != nil {
		t.Errorf("own token refused: %v", err)
	}
	if s.CheckCSRF(post(a), btok) == nil || s.CheckCSRF(post(nil), atok) == nil || s.CheckCSRF(post(a), "") == nil {
		t.Error("a token of another session, or no session, or no token, was accepted")
	}
	s.SetToken(post(a), "secret")
	if s.Token(post(a)) != "secret" || s.Token(post(b)) != "" {
		t.Error("the token is not kept in its own session only")
	}
	now = now.Add(2 * time.Hour)
	if s.Token(post(a)) != "" || s.CheckCSRF(post(a), atok) == nil {
		t.Error("an idle session outlived its idle time")
	}
}

package webview

import (
	"crypto/tls"
	"fmt"
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

// TestRenderDirLinks: a symbolic link is listed with its target
// (escaped: a target is any text its maker chose).
func TestRenderDirLinks(t *testing.T) {
	w := httptest.NewRecorder()
	RenderDir(w, http.StatusOK, Dir{Path: "/d", Entries: []nsapi.Entry{
		{Name: "current", Attr: nsapi.Attr{Size: 14, Target: "../runs/<b>latest"}}}})
	if body := w.Body.String(); !strings.Contains(body, ">current</a> → <code>../runs/&lt;b&gt;latest</code>") {
		t.Fatalf("link row:\n%s", body)
	}
}

func TestRenderDirPages(t *testing.T) {
	ents := make([]nsapi.Entry, 2*PageSize+500)
	for i := range ents {
		ents[i] = nsapi.Entry{Name: fmt.Sprintf("f%05d", i)}
	}
	w := httptest.NewRecorder()
	RenderDir(w, http.StatusOK, Dir{Path: "/d", Entries: ents, Page: 2})
	body := w.Body.String()
	if !strings.Contains(body, ">f02000<") || !strings.Contains(body, ">f02499<") || strings.Contains(body, ">f01999<") {
		t.Errorf("page 2 does not show entries 2001-2500 only")
	}
	if !strings.Contains(body, "entries 2001–2500") || !strings.Contains(body, `href="?page=1"`) || strings.Contains(body, `id="next"`) {
		t.Errorf("page 2's summary or links are wrong")
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

// BenchmarkRenderDir renders a page of 10 000 files (DESIGN-NOTES
// quotes it).
func BenchmarkRenderDir(b *testing.B) {
	ents := make([]nsapi.Entry, 10000)
	for i := range ents {
		ents[i] = nsapi.Entry{Name: strings.Repeat("f", 20) + string(rune('a'+i%26)), Attr: nsapi.Attr{Size: int64(i) << 10,
			MTime: time.Now(), Checksums: map[string]string{"adler32": "0a1b2c3d", "crc32c": "deadbeef"}}}
	}
	for b.Loop() {
		w := httptest.NewRecorder()
		RenderDir(w, http.StatusOK, Dir{Path: "/d", Entries: ents, Viewer: Viewer{CSRF: "t"}})
		b.ReportMetric(float64(w.Body.Len()), "bytes/page")
	}
}

package httpfront_test

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kaontest"
	"github.com/kaon-storage/kaon/internal/webview"
)

// asUser authenticates every client as the unprivileged user 1000.
type asUser struct{}

func (asUser) Authenticate(context.Context, *auth.Request) (auth.Principal, bool, error) {
	return auth.Principal{UID: 1000, GID: 1000, Name: "alice", Method: "test"}, true, nil
}

var root = auth.Principal{Name: "root", Method: "test"}

// webStack is a stack whose HTTP clients are user 1000, with /pub owned
// by them and /private root's, mode 0700, holding a file.
func webStack(t *testing.T) *kaontest.Stack {
	t.Helper()
	st := kaontest.New(t, kaontest.Options{Filesystems: 2, Auth: auth.Chain{asUser{}}})
	ctx := context.Background()
	for _, d := range []string{"/pub", "/private"} {
		if err := st.NS.Mkdir(ctx, root, d, 0o755, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.NS.Chown(ctx, root, "/pub", 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := st.NS.Touch(ctx, root, "/private/secret-name.txt", false, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := st.NS.Chmod(ctx, root, "/private", 0o700); err != nil {
		t.Fatal(err)
	}
	return st
}

// browser is an HTTP client with a cookie jar that asks for HTML and
// does not follow redirects.
func browser(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u, accept string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestWebPageEscapesHostileNamesAndCarriesCSP(t *testing.T) {
	st := webStack(t)
	hostile := `<img src=x onerror=alert(1)>"&'x.txt`
	if code := st.Put(t, "/pub/"+hostile, []byte("abc")); code != http.StatusCreated {
		t.Fatalf("PUT hostile name: %d", code)
	}
	resp, body := get(t, browser(t), st.HTTP.URL+"/pub/", browserAccept)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("browser GET /pub/: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Content-Security-Policy"); got != webview.CSP {
		t.Errorf("Content-Security-Policy = %q, want %q", got, webview.CSP)
	}
	if strings.Contains(body, "<img") {
		t.Errorf("the page carries the file name unescaped:\n%s", body)
	}
	if !strings.Contains(body, "&lt;img src=x onerror=alert(1)&gt;&#34;&amp;&#39;x.txt") {
		t.Errorf("the page does not show the hostile name escaped:\n%s", body)
	}
	if !strings.Contains(body, `href="/pub/%3Cimg%20src=x%20onerror=alert%281%29%3E%22&amp;%27x.txt"`) {
		t.Errorf("the download link is not the escaped path:\n%s", body)
	}
	if !strings.Contains(body, "adler32:") && !strings.Contains(body, "crc32c:") {
		t.Errorf("no checksum on the page:\n%s", body)
	}
	if !csrfRe.MatchString(body) {
		t.Errorf("no CSRF token in the page's forms")
	}
}

// A client that does not ask for HTML (curl, davix, gfal) keeps the bare
// listing byte for byte.
func TestWebLeavesNonBrowsersTheirListing(t *testing.T) {
	st := webStack(t)
	if code := st.Put(t, "/pub/a&b.txt", []byte("abc")); code != http.StatusCreated {
		t.Fatalf("PUT: %d", code)
	}
	want := "<!doctype html><title>/pub</title><h1>/pub</h1><ul>\n<li><a href=\"/pub/a&amp;b.txt\">a&amp;b.txt</a> 3</li>\n</ul>\n"
	for _, accept := range []string{"", "*/*", "application/xml"} {
		resp, body := get(t, http.DefaultClient, st.HTTP.URL+"/pub/", accept)
		if resp.StatusCode != http.StatusOK || body != want {
			t.Errorf("Accept %q: %d %q, want 200 %q", accept, resp.StatusCode, body, want)
		}
		if resp.Header.Get("Set-Cookie") != "" || resp.Header.Get("Content-Security-Policy") != "" {
			t.Errorf("Accept %q: a web view header on a WebDAV answer: %v", accept, resp.Header)
		}
	}
}

// The page shows no more than curl is shown: a directory the viewer may
// not list is a 403 page without its entries; the status page is the
// admin's.
func TestWebRefusesWhatCurlIsRefused(t *testing.T) {
	st := webStack(t)
	resp, _ := get(t, http.DefaultClient, st.HTTP.URL+"/private/", "*/*")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("curl GET /private/: %d, want 403", resp.StatusCode)
	}
	resp, body := get(t, browser(t), st.HTTP.URL+"/private/", browserAccept)
	if resp.StatusCode != http.StatusForbidden || strings.Contains(body, "secret-name") {
		t.Errorf("browser GET /private/: %d\n%s\nwant 403 without the listing", resp.StatusCode, body)
	}
	if !strings.Contains(body, "/private") || !strings.Contains(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("the refusal page does not name the path:\n%s", body)
	}
	resp, body = get(t, browser(t), st.HTTP.URL+"/?status", browserAccept)
	if resp.StatusCode != http.StatusForbidden || strings.Contains(body, "Filesystems") {
		t.Errorf("status page for a user: %d\n%s\nwant 403", resp.StatusCode, body)
	}
}

// postForm posts fields to u with c.
func postForm(t *testing.T, c *http.Client, u string, fields url.Values) (*http.Response, string) {
	t.Helper()
	resp, err := c.PostForm(u, fields)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestWebMutationsNeedTheSessionsCSRFToken(t *testing.T) {
	st := webStack(t)
	ctx := context.Background()
	exists := func(p string) bool { _, err := st.NS.Stat(ctx, root, p); return err == nil }
	u := st.HTTP.URL + "/pub/"

	// No session at all (a cross-site post: SameSite keeps the cookie home).
	resp, _ := postForm(t, http.DefaultClient, u, url.Values{"op": {"mkdir"}, "name": {"x1"}, "csrf": {"guess"}})
	if resp.StatusCode != http.StatusForbidden || exists("/pub/x1") {
		t.Errorf("mkdir without a session: %d, exists %v; want 403 and nothing made", resp.StatusCode, exists("/pub/x1"))
	}
	b := browser(t)
	_, page := get(t, b, u, browserAccept)
	m := csrfRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in\n%s", page)
	}
	// A session, another session's token.
	_, other := get(t, browser(t), u, browserAccept)
	if om := csrfRe.FindStringSubmatch(other); om == nil || om[1] == m[1] {
		t.Fatalf("two sessions share a CSRF token")
	} else if resp, _ := postForm(t, b, u, url.Values{"op": {"mkdir"}, "name": {"x2"}, "csrf": {om[1]}}); resp.StatusCode != http.StatusForbidden || exists("/pub/x2") {
		t.Errorf("mkdir with another session's token: %d; want 403 and nothing made", resp.StatusCode)
	}
	// The session's own token.
	resp, body := postForm(t, b, u, url.Values{"op": {"mkdir"}, "name": {"x3"}, "csrf": {m[1]}})
	if resp.StatusCode != http.StatusSeeOther || !exists("/pub/x3") {
		t.Fatalf("mkdir with the token: %d %s, exists %v", resp.StatusCode, body, exists("/pub/x3"))
	}
	resp, body = postForm(t, b, u, url.Values{"op": {"delete"}, "name": {"x3"}, "csrf": {m[1]}})
	if resp.StatusCode != http.StatusSeeOther || exists("/pub/x3") {
		t.Fatalf("delete with the token: %d %s, exists %v", resp.StatusCode, body, exists("/pub/x3"))
	}
	// Authorized by the service: user 1000 may not write in /private.
	resp, _ = postForm(t, b, st.HTTP.URL+"/private/", url.Values{"op": {"mkdir"}, "name": {"x4"}, "csrf": {m[1]}})
	if resp.StatusCode != http.StatusForbidden || exists("/private/x4") {
		t.Errorf("mkdir in /private: %d; want 403", resp.StatusCode)
	}
	// Names are one path element.
	resp, _ = postForm(t, b, u, url.Values{"op": {"mkdir"}, "name": {"../x5"}, "csrf": {m[1]}})
	if resp.StatusCode != http.StatusBadRequest || exists("/x5") {
		t.Errorf("mkdir ../x5: %d; want 400", resp.StatusCode)
	}

	// Upload through the form: CSRF first, then the file.
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("csrf", m[1])
	_ = mw.WriteField("op", "upload")
	fw, _ := mw.CreateFormFile("file", "up.txt")
	_, _ = fw.Write([]byte("uploaded through the page"))
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, u, &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("upload: %d", resp.StatusCode)
	}
	if code, data := st.Get(t, "/pub/up.txt"); code != http.StatusOK || string(data) != "uploaded through the page" {
		t.Errorf("GET of the uploaded file: %d %q", code, data)
	}
	e, err := st.NS.Stat(ctx, root, "/pub/up.txt")
	if err != nil || e.UID != 1000 {
		t.Errorf("the uploaded file belongs to %d (%v), want the viewer 1000", e.UID, err)
	}
}

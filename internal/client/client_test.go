package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// fakeInstance is a standby and an active namespace server and a storage
// server, recording the credentials each one was sent.
type fakeInstance struct {
	standby, active, storage *httptest.Server

	mu    sync.Mutex
	auth  map[string][]string // server → Authorization headers seen
	bytes []byte              // what the storage server received
}

func newFake(t *testing.T) *fakeInstance {
	f := &fakeInstance{auth: map[string][]string{}}
	seen := func(name string, r *http.Request) {
		f.mu.Lock()
		f.auth[name] = append(f.auth[name], r.Header.Get("Authorization"))
		f.mu.Unlock()
	}
	f.storage = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen("storage", r)
		switch r.Method {
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			f.mu.Lock()
			f.bytes = b
			f.mu.Unlock()
			w.WriteHeader(http.StatusCreated)
		case http.MethodGet:
			io.WriteString(w, "content of "+r.URL.Path)
		}
	}))
	f.active = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen("active", r)
		switch {
		case r.Header.Get("Authorization") != "Bearer tok":
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, r.Method+" "+r.URL.Path+": a bearer token is required\n")
		case r.URL.Path == "/api/v1/stat":
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"kind":1,"message":"stat `+r.URL.Query().Get("path")+`: not found"}`)
		case r.URL.Path == "/missing":
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, "GET /missing: not found\n")
		case r.URL.Path == "/rw" && r.Header.Get(nsapi.RewriteHeader) == "7.3":
			w.Header().Set(nsapi.RewriteHeader, "42") // the rewrite's new id
			// a mode taken is echoed
			if v := r.Header.Get(nsapi.RewriteModeHeader); v == "750" {
				w.Header().Set(nsapi.RewriteModeHeader, v)
			}
			http.Redirect(w, r, f.storage.URL+"/kaon/v1/data/2a?cap=c", http.StatusTemporaryRedirect)
		default:
			http.Redirect(w, r, f.storage.URL+"/kaon/v1/data/1?cap=c", http.StatusTemporaryRedirect)
		}
	}))
	f.standby = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen("standby", r)
		w.Header().Set(nsapi.ActiveHeader, f.active.URL)
		http.Redirect(w, r, f.active.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(func() { f.standby.Close(); f.active.Close(); f.storage.Close() })
	return f
}

// TestDataFollowsRedirects: Put and Get go from a standby to the active
// namespace server with the credentials, then to the storage server
// without them; what the client sent or got is the file's content.
func TestDataFollowsRedirects(t *testing.T) {
	f := newFake(t)
	c := New(f.standby.URL)
	c.Token = "tok"
	ctx := context.Background()
	if err := c.Put(ctx, "/d/a b", strings.NewReader("hello"), 5); err != nil {
		t.Fatalf("Put: %v", err)
	}
	body, size, err := c.Get(ctx, "/d/a b")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	got, _ := io.ReadAll(body)
	body.Close()
	if string(f.bytes) != "hello" || string(got) != "content of /kaon/v1/data/1" || size != int64(len(got)) {
		t.Fatalf("put %q, got %q (size %d)", f.bytes, got, size)
	}
	for server, want := range map[string]string{"standby": "Bearer tok", "active": "Bearer tok", "storage": ""} {
		if h := f.auth[server]; len(h) != 2 || h[0] != want || h[1] != want {
			t.Errorf("%s saw Authorization %q, want %q twice", server, h, want)
		}
	}
}

// TestErrorsAreKerr: what the server refuses comes back as a *kerr.Error
// with its kind and message, from the admin API and from data requests.
func TestErrorsAreKerr(t *testing.T) {
	f := newFake(t)
	c := New(f.active.URL)
	ctx := context.Background()
	_, err := c.Whoami(ctx) // no token
	var ke *kerr.Error
	if !errors.As(err, &ke) || ke.Kind != kerr.Unauthenticated || err.Error() != "GET whoami: HTTP 401" {
		t.Errorf("admin API without a token: %#v", err)
	}
	if err := c.Put(ctx, "/f", strings.NewReader("x"), 1); !kerr.Is(err, kerr.Unauthenticated) || err.Error() != "PUT /f: a bearer token is required" {
		t.Errorf("Put without a token: %v", err)
	}
	c.Token = "tok"
	if _, err := c.Stat(ctx, "/nothing"); !kerr.Is(err, kerr.NotFound) || err.Error() != "stat /nothing: not found" {
		t.Errorf("Stat of nothing: %v", err)
	}
	if _, _, err := c.Get(ctx, "/missing"); !kerr.Is(err, kerr.NotFound) || err.Error() != "GET /missing: not found" {
		t.Errorf("Get of nothing: %v", err)
	}
	f.active.Close()
	if _, err := c.Stat(ctx, "/x"); !kerr.Is(err, kerr.Unavailable) || !strings.HasPrefix(err.Error(), "cannot reach Kaon at "+f.active.URL+": ") {
		t.Errorf("Stat of a server that is gone: %v", err)
	}
}

// TestPutRangeThroughStandby: an in-place update sent to a standby
// reaches the storage server through the active namespace server with
// its whole body (the standby's redirect is followed with the body sent
// again).
func TestPutRangeThroughStandby(t *testing.T) {
	f := newFake(t)
	c := New(f.standby.URL)
	c.Token = "tok"
	if err := c.PutRange(context.Background(), "/d/f", 0, strings.NewReader("range"), 5); err != nil {
		t.Fatalf("PutRange through a standby: %v", err)
	}
	if string(f.bytes) != "range" {
		t.Fatalf("the storage server got %q, want %q", f.bytes, "range")
	}
}

// TestServersInOrder: a client given several namespace servers sends a
// request the first one cannot take (its port is closed: nothing was
// sent) to the next, body and credentials included, and keeps using the
// one that answered; a request a server received and then failed is not
// sent again (it may have been done).
func TestServersInOrder(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	var mu sync.Mutex
	var got []string
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b)+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		io.WriteString(w, `{}`)
	}))
	defer live.Close()
	c := New(closed.URL)
	c.Servers = []string{live.URL}
	c.Token = "tok"
	ctx := context.Background()
	if err := c.Mkdir(ctx, "/d", 0o755, false); err != nil {
		t.Fatalf("mkdir with the first server down: %v", err)
	}
	if _, err := c.Stat(ctx, "/d"); err != nil {
		t.Fatalf("stat: %v", err)
	}
	if c.current() != live.URL {
		t.Errorf("current server %s, want %s", c.current(), live.URL)
	}
	mu.Lock()
	if len(got) != 2 || !strings.HasPrefix(got[0], `POST /api/v1/mkdir {"path":"/d"`) || !strings.HasSuffix(got[0], "Bearer tok") {
		t.Errorf("the second server got %q", got)
	}
	mu.Unlock()

	// A server that took the request and hung up: the request is not
	// sent to the next one.
	hangup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}))
	defer hangup.Close()
	c = New(hangup.URL)
	c.Servers = []string{live.URL}
	mu.Lock()
	got = nil
	mu.Unlock()
	if err := c.Mkdir(ctx, "/e", 0o755, false); err == nil {
		t.Error("mkdir on a server that hung up succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 0 {
		t.Errorf("a request the first server received went to the next too: %q", got)
	}

	// None reachable: the error names them.
	c = New(closed.URL)
	c.Servers = []string{closed.URL + "/"}
	if _, err := c.Stat(ctx, "/d"); !kerr.Is(err, kerr.Unavailable) || !strings.Contains(err.Error(), closed.URL) {
		t.Errorf("stat with no server reachable: %v", err)
	}
}

// TestUnreachedStorageKeepsCapability: when the storage server a
// redirect names cannot be reached, the error names the path and the
// server but not the capability (the URL's query), which would otherwise
// reach the logs of whoever prints it (kaon mount's).
func TestUnreachedStorageKeepsCapability(t *testing.T) {
	f := newFake(t)
	c := New(f.active.URL)
	c.Token = "tok"
	f.storage.Close()
	err := c.Put(context.Background(), "/d/f", strings.NewReader("x"), 1)
	if !kerr.Is(err, kerr.Unavailable) || !strings.Contains(err.Error(), "/d/f") || strings.Contains(err.Error(), "cap=") {
		t.Fatalf("Put to an unreachable storage server: %v; want Unavailable naming /d/f, without the capability", err)
	}
}

// TestRewrite: a rewrite sends its header through a standby to the
// active server and its body to the storage server, and returns the new
// id the redirect named; a server that answers the redirect without it
// (one that does not rewrite, which began a plain replace) is sent no
// body, and the error says so (ErrNoRewrite).
func TestRewrite(t *testing.T) {
	f := newFake(t)
	c := New(f.standby.URL)
	c.Token = "tok"
	ctx := context.Background()
	id, _, err := c.Rewrite(ctx, "/rw", 7, 3, RewriteAttrs{}, strings.NewReader("whole"), 5)
	if err != nil || id != 42 || string(f.bytes) != "whole" {
		t.Fatalf("Rewrite: id %d, %v; the storage server got %q", id, err, f.bytes)
	}
	f.bytes = nil
	_, _, err = c.Rewrite(ctx, "/old", 7, 3, RewriteAttrs{}, strings.NewReader("whole"), 5)
	if !errors.Is(err, ErrNoRewrite) || !kerr.Is(err, kerr.Unsupported) || f.bytes != nil || len(f.auth["storage"]) != 1 {
		t.Fatalf("Rewrite on a server that does not rewrite: %v; the storage server got %q in %d requests", err, f.bytes, len(f.auth["storage"]))
	}
	// A mode the server echoes was taken; a time it does not echo was not
	// (a server that predates them): the caller sends it on its own.
	_, took, err := c.Rewrite(ctx, "/rw", 7, 3, RewriteAttrs{SetMode: true, Mode: 0o750}, strings.NewReader("whole"), 5)
	if err != nil || !took {
		t.Fatalf("Rewrite with a mode the server takes: took %v, %v", took, err)
	}
	_, took, err = c.Rewrite(ctx, "/rw", 7, 3, RewriteAttrs{SetMode: true, Mode: 0o750, MTime: time.Unix(5, 0)}, strings.NewReader("whole"), 5)
	if err != nil || took {
		t.Fatalf("Rewrite with a time the server does not echo: took %v, %v; want not taken", took, err)
	}
}

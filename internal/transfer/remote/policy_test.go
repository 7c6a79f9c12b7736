package remote

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/transfer"
)

func TestCheckURL(t *testing.T) {
	var p Policy
	for raw, want := range map[string]kerr.Kind{
		"file:///etc/passwd":                      kerr.Permission,
		"ftp://host/x":                            kerr.Permission,
		"gopher://host/x":                         kerr.Permission,
		"/relative/path":                          kerr.Invalid,
		"http:///nohost":                          kerr.Invalid,
		"http://user:pw@host/x":                   kerr.Invalid,
		"http://host:8001/kaon/v1/stripe/12/0":    kerr.Permission,
		"http://host:8000/internal/v1/readfile":   kerr.Permission,
		"http://host:8000//internal/v1/heartbeat": kerr.Permission,
	} {
		if _, err := p.CheckURL(raw); kerr.KindOf(err) != want {
			t.Errorf("CheckURL(%q) = %v, want kind %v", raw, err, want)
		}
	}
	for raw, scheme := range map[string]string{"http://h/x": "http", "https://h/x": "https", "davs://h/x": "https", "dav://h:80/x": "http"} {
		u, err := p.CheckURL(raw)
		if err != nil || u.Scheme != scheme {
			t.Errorf("CheckURL(%q) = %v, %v; want scheme %s", raw, u, err, scheme)
		}
	}
}

func TestCheckAddr(t *testing.T) {
	strict := &Policy{}
	for _, a := range []string{"127.0.0.1:80", "[::1]:80", "169.254.169.254:80", "0.0.0.0:80"} {
		if err := strict.CheckAddr(a); kerr.KindOf(err) != kerr.Permission {
			t.Errorf("strict CheckAddr(%s) = %v, want refused", a, err)
		}
	}
	if err := strict.CheckAddr("192.0.2.10:443"); err != nil {
		t.Errorf("a remote address was refused: %v", err)
	}
	loose := &Policy{AllowLoopback: true}
	loose.AddSelf("127.0.0.1:8000", "0.0.0.0:1094")
	if err := loose.CheckAddr("127.0.0.1:9000"); err != nil {
		t.Errorf("loopback refused with AllowLoopback: %v", err)
	}
	for _, a := range []string{"127.0.0.1:8000", "[::1]:8000", "127.0.0.1:1094"} {
		if err := loose.CheckAddr(a); err == nil || !strings.Contains(err.Error(), "itself") {
			t.Errorf("CheckAddr(%s) = %v, want this instance refused", a, err)
		}
	}
}

func TestRedact(t *testing.T) {
	u, _ := url.Parse("https://u:p@host/p/f?authz=SECRET&x=1#frag")
	if got := Redact(u); strings.Contains(got, "SECRET") || strings.Contains(got, "u:p") || got != "https://host/p/f?…" {
		t.Fatalf("Redact = %q", got)
	}
}

// TestHTTPDialRefused: the dial-time check catches a name that resolves
// to a refused address, and the error names the remote.
func TestHTTPDialRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("x")) }))
	defer srv.Close()
	u, _ := url.Parse(strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/f")
	h := &HTTP{Policy: &Policy{}}
	_, err := transfer.Copy(context.Background(), h.Source(u, nil), discard{}, transfer.Options{})
	if transfer.KindOf(err) != kerr.Permission || !strings.Contains(err.Error(), "loopback") || !strings.Contains(err.Error(), "localhost") {
		t.Fatalf("err = %v", err)
	}
	h2 := &HTTP{Policy: &Policy{AllowLoopback: true}}
	res, err := transfer.Copy(context.Background(), h2.Source(u, nil), discard{}, transfer.Options{})
	if err != nil || res.Bytes != 1 {
		t.Fatalf("allowed copy: %+v %v", res, err)
	}
}

type discard struct{}

func (discard) String() string                                         { return "discard" }
func (discard) Create(context.Context, int64) (transfer.Writer, error) { return discardW{}, nil }

type discardW struct{}

func (discardW) Write(p []byte) (int, error)  { return len(p), nil }
func (discardW) Commit(context.Context) error { return nil }
func (discardW) Abort(context.Context)        {}

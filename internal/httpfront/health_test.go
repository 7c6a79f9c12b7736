package httpfront

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHealth: /healthz is always 200; /readyz follows ready, with the
// reason; other paths and methods reach the handler.
func TestHealth(t *testing.T) {
	var notReady error
	h := Health(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}), func() error { return notReady })
	do := func(method, path string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(b)
	}
	if code, body := do("GET", "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := do("GET", "/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz, ready: %d %q", code, body)
	}
	notReady = errors.New("a standby: the active namespace server is http://a:8000")
	if code, body := do("GET", "/readyz"); code != 503 || !strings.Contains(body, "http://a:8000") {
		t.Errorf("/readyz, not ready: %d %q", code, body)
	}
	if code, _ := do("GET", "/healthz"); code != 200 {
		t.Errorf("/healthz while not ready: %d", code)
	}
	for _, c := range [][2]string{{"PUT", "/healthz"}, {"GET", "/healthz/x"}, {"DELETE", "/readyz"}, {"GET", "/data"}} {
		if code, _ := do(c[0], c[1]); code != http.StatusTeapot {
			t.Errorf("%s %s: %d, want the handler's", c[0], c[1], code)
		}
	}
}

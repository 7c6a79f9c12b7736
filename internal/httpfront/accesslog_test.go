package httpfront

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// readFromRecorder records whether the server's ReadFrom (sendfile for
// files) was reached.
type readFromRecorder struct {
	*httptest.ResponseRecorder
	readFrom bool
}

func (r *readFromRecorder) ReadFrom(src io.Reader) (int64, error) {
	r.readFrom = true
	return io.Copy(r.ResponseRecorder, src)
}

// TestAccessLogKeepsReadFrom: wrapping the response for the access log
// must not cost the data endpoint its sendfile path, and the line names
// method, path (without the query), status, bytes and principal.
func TestAccessLogKeepsReadFrom(t *testing.T) {
	var logs bytes.Buffer
	h := AccessLog(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SetPrincipal(r, "uid=5 gid=6")
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusPartialContent)
		io.Copy(w, io.LimitReader(strings.NewReader("0123456789"), 7))
	}), slog.New(slog.NewTextHandler(&logs, nil)))
	rec := &readFromRecorder{ResponseRecorder: httptest.NewRecorder()}
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/kaon/v1/data/2a?cap=SECRET", strings.NewReader("abc")))
	if !rec.readFrom {
		t.Fatal("the wrapped writer's ReadFrom was bypassed")
	}
	if rec.Body.String() != "0123456" || rec.Code != http.StatusPartialContent {
		t.Fatalf("response %d %q", rec.Code, rec.Body.String())
	}
	line := logs.String()
	for _, want := range []string{"method=PUT", "path=/kaon/v1/data/2a ", "status=206", "in=3", "out=7", `principal="uid=5 gid=6"`, "dur="} {
		if !strings.Contains(line, want) {
			t.Errorf("access log %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "SECRET") || strings.Count(line, "\n") != 1 {
		t.Fatalf("access log line %q", line)
	}
}

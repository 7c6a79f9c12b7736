package httpserve

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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

// TestAccessLogLeavesUnreadBodies: a handler that answers without reading
// the body (a PUT redirected to a storage server) must answer at once:
// the server may not ask the client for the body (100 Continue) on its
// behalf. davix-put hung on this.
func TestAccessLogLeavesUnreadBodies(t *testing.T) {
	srv := httptest.NewServer(AccessLog(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://elsewhere/", http.StatusTemporaryRedirect)
	}), slog.New(slog.NewTextHandler(io.Discard, nil))))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PUT /f HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\nExpect: 100-continue\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(line, "307") {
		t.Fatalf("first response line %q (%v), want the 307 without a 100 Continue", line, err)
	}
}

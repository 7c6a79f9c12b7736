package tpc

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/checksum"
)

const secret = "Bearer tpc-secret-7f3a9c"

// TestHTTPTPCCurl copies between two instances with curl -X COPY, pull and
// push: markers stream, success comes last, bytes and checksum arrive, and
// the forwarded token is in neither log.
func TestHTTPTPCCurl(t *testing.T) {
	a, b := up(t), up(t)
	local, data, sum := randomFile(t, 48<<20+12345)
	put(t, local, a.EP.HTTP+"/d/src.bin")

	for _, tc := range []struct{ mode, target, url string }{
		{"pull", b.EP.HTTP + "/e/pulled.bin", ""},
		{"push", b.EP.HTTP + "/e/pushed.bin", ""},
	} {
		var args []string
		if tc.mode == "pull" {
			args = []string{"-sS", "-L", "-X", "COPY", "-H", "Source: " + a.EP.HTTP + "/d/src.bin",
				"-H", "TransferHeaderAuthorization: " + secret, tc.target}
		} else {
			args = []string{"-sS", "-L", "-X", "COPY", "-H", "Destination: " + tc.target,
				"-H", "TransferHeaderAuthorization: " + secret, a.EP.HTTP + "/d/src.bin"}
		}
		out := mustRun(t, "curl COPY "+tc.mode, 2*time.Minute, "curl", args...)
		if !strings.Contains(out, "Perf Marker") || !strings.Contains(out, "Stripe Bytes Transferred:") ||
			!strings.Contains(out, "Total Stripe Count: 1") || !strings.Contains(out, "\nEnd\n") {
			t.Fatalf("%s: no performance marker in the answer:\n%s", tc.mode, out)
		}
		if lastLine(out) != "success: Created" {
			t.Fatalf("%s: last line %q, want success: Created\n%s", tc.mode, lastLine(out), out)
		}
		if got := get(t, tc.target); !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes arrived, differing from the %d sent", tc.mode, len(got), len(data))
		}
		if got := adlerOf(t, tc.target); got != sum {
			t.Fatalf("%s: adler32 %s at the destination, source %s", tc.mode, got, sum)
		}
	}
	for _, p := range []interface{ Logs() string }{a, b} {
		if strings.Contains(p.Logs(), "tpc-secret") {
			t.Fatalf("a TransferHeader value appears in a server log:\n%s", p.Logs())
		}
	}
	if !strings.Contains(b.Logs(), `"third-party copy done" mode=pull`) || !strings.Contains(a.Logs(), `"third-party copy done" mode=push`) {
		t.Fatalf("the storage servers did not run the copies:\nA:\n%s\nB:\n%s", a.Logs(), b.Logs())
	}
}

// TestHTTPTPCGfal copies with gfal-copy --copy-mode pull and push.
func TestHTTPTPCGfal(t *testing.T) {
	a, b := up(t), up(t)
	local, data, sum := randomFile(t, 20<<20+7)
	put(t, local, a.EP.HTTP+"/d/src.bin")
	for _, mode := range []string{"pull", "push"} {
		dst := b.EP.HTTP + "/g/" + mode + ".bin"
		mustRun(t, "gfal-copy --copy-mode "+mode, 2*time.Minute, "gfal-copy", "--copy-mode", mode, a.EP.HTTP+"/d/src.bin", dst)
		if got := get(t, dst); !bytes.Equal(got, data) {
			t.Fatalf("gfal %s: bytes differ (%d of %d)", mode, len(got), len(data))
		}
		if got := adlerOf(t, dst); got != sum {
			t.Fatalf("gfal %s: adler32 %s, want %s", mode, got, sum)
		}
	}
	// Third-party copies, not streamed through gfal: each side ran one.
	if !strings.Contains(b.Logs(), `"third-party copy done" mode=pull`) || !strings.Contains(a.Logs(), `"third-party copy done" mode=push`) {
		t.Fatalf("gfal did not use third-party copy:\nA:\n%s\nB:\n%s", a.Logs(), b.Logs())
	}
}

// TestHTTPTPCFailures: a missing source and a refusing destination end in
// a failure line naming the reason, and leave nothing behind.
func TestHTTPTPCFailures(t *testing.T) {
	a, b := up(t), up(t)
	out, _ := run(t, "COPY pull of a missing source", time.Minute, "curl", "-sS", "-L", "-X", "COPY",
		"-H", "Source: "+a.EP.HTTP+"/nope.bin", b.EP.HTTP+"/e/missing.bin")
	if l := lastLine(out); !strings.HasPrefix(l, "failure:") || !strings.Contains(l, "404") || !strings.Contains(l, "/nope.bin") {
		t.Fatalf("missing source: last line %q\n%s", l, out)
	}
	if s := status(t, b.EP.HTTP+"/e/missing.bin"); s != "404" {
		t.Fatalf("a failed pull left a file (HEAD %s)", s)
	}

	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		http.Error(w, "writes are not allowed here", http.StatusForbidden)
	}))
	defer refusing.Close()
	local, _, _ := randomFile(t, 3<<20)
	put(t, local, a.EP.HTTP+"/d/src.bin")
	out, _ = run(t, "COPY push to a refusing server", time.Minute, "curl", "-sS", "-L", "-X", "COPY",
		"-H", "Destination: "+refusing.URL+"/x.bin", a.EP.HTTP+"/d/src.bin")
	if l := lastLine(out); !strings.HasPrefix(l, "failure:") || !strings.Contains(l, "403") || !strings.Contains(l, "not allowed here") {
		t.Fatalf("refused destination: last line %q\n%s", l, out)
	}
}

// TestHTTPTPCRefusedURLs: no file://, no internal endpoint, never this
// instance itself, and no loopback without --tpc-allow-loopback.
func TestHTTPTPCRefusedURLs(t *testing.T) {
	a := up(t)
	local, _, _ := randomFile(t, 1<<20)
	put(t, local, a.EP.HTTP+"/d/src.bin")
	cases := []struct{ name, source, want string }{
		{"file scheme", "file:///etc/passwd", "scheme"},
		{"ftp scheme", "ftp://127.0.0.1/x", "scheme"},
		{"stripe endpoint", a.EP.FSTHTTP + "/kaon/v1/stripe/1/0", "internal Kaon endpoint"},
		{"internal protocol", a.EP.HTTP + "/internal/v1/readfile?fid=1", "internal Kaon endpoint"},
		{"this instance", a.EP.HTTP + "/d/src.bin", "this Kaon instance itself"},
		{"this instance's storage server", a.EP.FSTHTTP + "/kaon/v1/data/1", "this Kaon instance itself"},
	}
	for i, c := range cases {
		target := a.EP.HTTP + "/refused/" + string(rune('a'+i)) + ".bin"
		out, _ := run(t, "COPY from "+c.name, time.Minute, "curl", "-sS", "-L", "-X", "COPY", "-H", "Source: "+c.source, target)
		if l := lastLine(out); !strings.HasPrefix(l, "failure:") || !strings.Contains(l, c.want) {
			t.Fatalf("%s: last line %q, want a failure about %q\n%s", c.name, l, c.want, out)
		}
		if s := status(t, target); s != "404" {
			t.Fatalf("%s: a refused copy left a file (HEAD %s)", c.name, s)
		}
	}
	// Without --tpc-allow-loopback another instance on this host is refused.
	strict := harness.Up(t)
	out, _ := run(t, "COPY from loopback without the flag", time.Minute, "curl", "-sS", "-L", "-X", "COPY",
		"-H", "Source: "+a.EP.HTTP+"/d/src.bin", strict.EP.HTTP+"/x.bin")
	if l := lastLine(out); !strings.HasPrefix(l, "failure:") || !strings.Contains(l, "loopback") {
		t.Fatalf("loopback pull without the flag: %q\n%s", l, out)
	}
}

// TestHTTPTPCNeedsWritePermission: the namespace authorizes the COPY's
// principal; nobody cannot pull into a directory only root may write, nor
// push a file only root may read.
func TestHTTPTPCNeedsWritePermission(t *testing.T) {
	a, b := up(t), up(t)
	local, _, _ := randomFile(t, 1<<20)
	put(t, local, a.EP.HTTP+"/d/src.bin")
	b.MustKaon("mkdir", "-p", "/ro")
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	out, _ := runCmd(t, "COPY pull as nobody", time.Minute, nobody, "curl", "-sS", "-L", "-X", "COPY",
		"-H", "Source: "+a.EP.HTTP+"/d/src.bin", b.EP.HTTP+"/ro/x.bin")
	if l := lastLine(out); !strings.HasPrefix(l, "failure:") || !strings.Contains(l, "permission denied") {
		t.Fatalf("nobody pulling into a root directory: %q\n%s", l, out)
	}
	if s := status(t, b.EP.HTTP+"/ro/x.bin"); s != "404" {
		t.Fatalf("refused pull left a file (HEAD %s)", s)
	}
	a.MustKaon("chmod", "600", "/d/src.bin")
	out, _ = runCmd(t, "COPY push as nobody", time.Minute, nobody, "curl", "-sS", "-L", "-X", "COPY",
		"-H", "Destination: "+b.EP.HTTP+"/pub/x.bin", a.EP.HTTP+"/d/src.bin")
	if l := lastLine(out); !strings.HasPrefix(l, "failure:") || !strings.Contains(l, "permission denied") {
		t.Fatalf("nobody pushing a 0600 file: %q\n%s", l, out)
	}
}

// davServer is a minimal WebDAV-ish server: GET with Digest (optionally a
// wrong one), PUT stored, HEAD with Digest; it records the Authorization
// header it saw.
type davServer struct {
	mu        sync.Mutex
	files     map[string][]byte
	auth      []string
	wrongSums bool
}

func (d *davServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	d.auth = append(d.auth, r.Header.Get("Authorization"))
	d.mu.Unlock()
	switch r.Method {
	case http.MethodPut:
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		d.mu.Lock()
		d.files[r.URL.Path] = b
		d.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	case http.MethodGet, http.MethodHead:
		d.mu.Lock()
		b, ok := d.files[r.URL.Path]
		d.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		sum, _ := checksum.Sum("adler32", b)
		if d.wrongSums {
			sum = "0badc0de"
		}
		if strings.Contains(r.Header.Get("Want-Digest"), "adler32") {
			w.Header().Set("Digest", "adler32="+sum)
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b))
	default:
		http.Error(w, "no", http.StatusMethodNotAllowed)
	}
}

// TestHTTPTPCWebDAVServer: a non-Kaon remote; the token is forwarded, its
// Digest is checked (a wrong one fails the pull and leaves no file).
func TestHTTPTPCWebDAVServer(t *testing.T) {
	a := up(t)
	_, data, sum := randomFile(t, 5<<20+3)
	dav := &davServer{files: map[string][]byte{"/src.bin": data}}
	srv := httptest.NewServer(dav)
	defer srv.Close()

	out := mustRun(t, "COPY pull from the Go server", time.Minute, "curl", "-sS", "-L", "-X", "COPY",
		"-H", "Source: "+srv.URL+"/src.bin", "-H", "TransferHeaderAuthorization: "+secret, a.EP.HTTP+"/w/pulled.bin")
	if lastLine(out) != "success: Created" {
		t.Fatalf("pull from the Go server: %s", out)
	}
	if got := adlerOf(t, a.EP.HTTP+"/w/pulled.bin"); got != sum {
		t.Fatalf("pulled adler32 %s, want %s", got, sum)
	}
	if !strings.Contains(a.Logs(), "verified=true") {
		t.Fatalf("the remote's Digest was not verified:\n%s", a.Logs())
	}
	out = mustRun(t, "COPY push to the Go server", time.Minute, "curl", "-sS", "-L", "-X", "COPY",
		"-H", "Destination: "+srv.URL+"/pushed.bin", "-H", "TransferHeaderAuthorization: "+secret, a.EP.HTTP+"/w/pulled.bin")
	if lastLine(out) != "success: Created" {
		t.Fatalf("push to the Go server: %s", out)
	}
	dav.mu.Lock()
	pushed := dav.files["/pushed.bin"]
	auths := append([]string(nil), dav.auth...)
	dav.mu.Unlock()
	if !bytes.Equal(pushed, data) {
		t.Fatalf("pushed %d bytes differ from the %d expected", len(pushed), len(data))
	}
	for _, h := range auths {
		if h != secret {
			t.Fatalf("the remote saw Authorization %q, want the TransferHeaderAuthorization value", h)
		}
	}

	dav.mu.Lock()
	dav.wrongSums = true
	dav.mu.Unlock()
	out, _ = run(t, "COPY pull with a wrong Digest", time.Minute, "curl", "-sS", "-L", "-X", "COPY",
		"-H", "Source: "+srv.URL+"/src.bin", a.EP.HTTP+"/w/bad.bin")
	if l := lastLine(out); !strings.HasPrefix(l, "failure:") || !strings.Contains(l, "mismatch") {
		t.Fatalf("wrong Digest: last line %q\n%s", l, out)
	}
	if s := status(t, a.EP.HTTP+"/w/bad.bin"); s != "404" {
		t.Fatalf("a pull with a wrong checksum left a file (HEAD %s)", s)
	}
	if strings.Contains(a.Logs(), "tpc-secret") {
		t.Fatal("the token appears in the server log")
	}
}

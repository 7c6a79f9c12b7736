package datafront

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/httpserve"
	"github.com/kaon-storage/kaon/internal/storage"
	"github.com/kaon-storage/kaon/internal/storage/storagetest"
)

// syncBuffer is a log destination safe for concurrent handlers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	url   string
	key   *capability.Key
	ns    *storagetest.Namespace
	roots []string
	log   *syncBuffer
}

// start runs one storage server with 6 posix filesystems behind the data
// endpoint and the access log.
func start(t *testing.T) *fixture {
	t.Helper()
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	fx := &fixture{key: key, ns: &storagetest.Namespace{}, log: &syncBuffer{}}
	for i := 0; i < 6; i++ {
		fx.roots = append(fx.roots, filepath.Join(t.TempDir(), "fs"))
	}
	log := slog.New(slog.NewTextHandler(fx.log, nil))
	s, err := storage.New(storage.Config{Node: "n", Addr: "http://unused", Key: key, Namespace: fx.ns, Paths: fx.roots, Logger: log,
		Store: func(p string) (backend.Store, error) {
			return posix.New(p, posix.Options{IO: backend.IODirect, Sync: true}), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go s.Run(ctx)
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("storage server not registered within 10s")
	}
	mux := http.NewServeMux()
	mux.Handle(httpserve.DataPath, Data(s, log, TPCConfig{}))
	hs := httptest.NewServer(httpserve.AccessLog(mux, log))
	t.Cleanup(hs.Close)
	fx.url = hs.URL
	return fx
}

func (fx *fixture) writeCap(fid uint64, layout string, n int) *capability.Capability {
	c := &capability.Capability{Fid: fid, Write: true, Path: fmt.Sprintf("/d/f%d", fid), Layout: layout, UID: 1000, GID: 100,
		Checksums: []string{"adler32", "md5"}, Expires: time.Now().Add(time.Minute).Unix()}
	for i := 0; i < n; i++ {
		c.Targets = append(c.Targets, capability.Target{FsID: uint32(i + 1), Addr: fx.url})
	}
	return c
}

func (fx *fixture) readCap(t *testing.T, w *capability.Capability, size int64) *capability.Capability {
	t.Helper()
	cm, ok := fx.ns.Committed(w.Fid)
	if !ok {
		t.Fatalf("fid %d not committed", w.Fid)
	}
	r := *w
	r.Write, r.Size, r.Sums = false, size, cm.Checksums
	return &r
}

func (fx *fixture) dataURL(c *capability.Capability) string {
	return fmt.Sprintf("%s%s%x?cap=%s", fx.url, httpserve.DataPath, c.Fid, fx.key.Sign(c))
}

func do(t *testing.T, method, url string, body []byte, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

// TestDataPutGet: every layout is written with PUT and read back whole,
// by range and with HEAD; Want-Digest is answered from the checksums
// recorded at write time.
func TestDataPutGet(t *testing.T) {
	fx := start(t)
	data := make([]byte, 2<<20+3)
	rand.Read(data)
	for i, tc := range []struct {
		layout string
		n      int
	}{{"plain", 1}, {"replica:3", 3}, {"ec:4+2:65536", 6}} {
		w := fx.writeCap(uint64(100+i), tc.layout, tc.n)
		if resp, b := do(t, http.MethodPut, fx.dataURL(w), data); resp.StatusCode != 201 {
			t.Fatalf("%s: PUT %d %s", tc.layout, resp.StatusCode, b)
		}
		r := fx.readCap(t, w, int64(len(data)))
		resp, b := do(t, http.MethodGet, fx.dataURL(r), nil)
		if resp.StatusCode != 200 || !bytes.Equal(b, data) || resp.Header.Get("ETag") != fmt.Sprintf("\"%x\"", w.Fid) {
			t.Fatalf("%s: GET %d, %d bytes, equal %v", tc.layout, resp.StatusCode, len(b), bytes.Equal(b, data))
		}
		resp, b = do(t, http.MethodGet, fx.dataURL(r), nil, "Range", "bytes=1000000-1000009")
		if resp.StatusCode != 206 || !bytes.Equal(b, data[1000000:1000010]) {
			t.Fatalf("%s: ranged GET %d %q", tc.layout, resp.StatusCode, b)
		}
		resp, _ = do(t, http.MethodHead, fx.dataURL(r), nil, "Want-Digest", "adler32")
		want, _ := checksum.DigestHeaderValue("adler32", map[string]string{"adler32": checksumOf(t, "adler32", data)})
		if resp.StatusCode != 200 || resp.Header.Get("Digest") != want || resp.ContentLength != int64(len(data)) {
			t.Fatalf("%s: HEAD %d Digest %q (want %q) length %d", tc.layout, resp.StatusCode, resp.Header.Get("Digest"), want, resp.ContentLength)
		}
	}
}

func checksumOf(t *testing.T, typ string, data []byte) string {
	m, err := checksum.NewMulti(typ)
	if err != nil {
		t.Fatal(err)
	}
	m.Write(data)
	return m.Sums()[typ]
}

// TestDataECTooFewStripes: an erasure-coded file with fewer than K
// stripes left is refused with 503 and the reason before any byte; with
// one stripe missing it is served whole.
func TestDataECTooFewStripes(t *testing.T) {
	fx := start(t)
	data := make([]byte, 1<<20)
	rand.Read(data)
	w := fx.writeCap(7, "ec:4+2:65536", 6)
	if resp, b := do(t, http.MethodPut, fx.dataURL(w), data); resp.StatusCode != 201 {
		t.Fatalf("PUT %d %s", resp.StatusCode, b)
	}
	r := fx.readCap(t, w, int64(len(data)))
	os.Remove(posix.PhysPath(fx.roots[0], 7))
	if resp, b := do(t, http.MethodGet, fx.dataURL(r), nil); resp.StatusCode != 200 || !bytes.Equal(b, data) {
		t.Fatalf("GET with one stripe missing: %d", resp.StatusCode)
	}
	os.Remove(posix.PhysPath(fx.roots[1], 7))
	os.Remove(posix.PhysPath(fx.roots[2], 7))
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		resp, b := do(t, m, fx.dataURL(r), nil)
		if resp.StatusCode != 503 || (m == http.MethodGet && (!strings.Contains(string(b), "unrecoverable") || !strings.Contains(string(b), "/d/f7"))) {
			t.Fatalf("%s with 3 of 6 stripes: %d %s", m, resp.StatusCode, b)
		}
	}
}

// TestDataCapabilityRefusals: the data endpoint serves only the file and
// mode its capability names, a write capability once, and never logs the
// capability.
func TestDataCapabilityRefusals(t *testing.T) {
	fx := start(t)
	w := fx.writeCap(9, "plain", 1)
	if resp, b := do(t, http.MethodPut, fx.dataURL(w), []byte("committed")); resp.StatusCode != 201 {
		t.Fatalf("PUT %d %s", resp.StatusCode, b)
	}
	r := fx.readCap(t, w, 9)
	other := *r
	other.Fid = 10
	wrongFid := strings.Replace(fx.dataURL(&other), fmt.Sprintf("/%x?", other.Fid), fmt.Sprintf("/%x?", r.Fid), 1)
	for _, tc := range []struct {
		name, method, url string
		want              int
		says              string
	}{
		{"replayed PUT", http.MethodPut, fx.dataURL(w), 403, "already used"},
		{"GET with a write capability", http.MethodGet, fx.dataURL(w), 403, "is for writing"},
		{"PUT with a read capability", http.MethodPut, fx.dataURL(r), 403, "does not allow writing"},
		{"capability of another file", http.MethodGet, wrongFid, 403, "another file"},
		{"no capability", http.MethodGet, strings.Split(fx.dataURL(r), "?")[0], 403, "missing capability"},
		{"bad file id", http.MethodGet, fx.url + httpserve.DataPath + "xyz", 400, "bad file id"},
		{"DELETE", http.MethodDelete, fx.dataURL(r), 501, "not allowed"},
	} {
		resp, b := do(t, tc.method, tc.url, []byte("replayed"))
		if resp.StatusCode != tc.want || !strings.Contains(string(b), tc.says) {
			t.Errorf("%s: %d %s, want %d %q", tc.name, resp.StatusCode, b, tc.want, tc.says)
		}
	}
	if resp, b := do(t, http.MethodGet, fx.dataURL(r), nil); string(b) != "committed" {
		t.Fatalf("file after refused requests: %d %q", resp.StatusCode, b)
	}
	logs := fx.log.String()
	sig := strings.SplitN(fx.key.Sign(w), ".", 2)[1]
	if strings.Contains(logs, "cap=") || strings.Contains(logs, sig) {
		t.Fatalf("capability in the log:\n%s", logs)
	}
	if !strings.Contains(logs, "method=PUT path=/kaon/v1/data/9 status=201 in=9") ||
		!strings.Contains(logs, "method=GET path=/kaon/v1/data/9 status=200 in=0 out=9") ||
		!strings.Contains(logs, `principal="uid=1000 gid=100"`) {
		t.Fatalf("access log lacks the requests:\n%s", logs)
	}
}

// TestDataRangedPutRefused: a PUT with Content-Range (a partial update)
// with an upload's capability, not an update's, is refused with 400
// naming the file before the upload starts: the capability is still
// unused afterwards.
func TestDataRangedPutRefused(t *testing.T) {
	fx := start(t)
	w := fx.writeCap(11, "plain", 1)
	resp, b := do(t, http.MethodPut, fx.dataURL(w), []byte("abcdef"), "Content-Range", "bytes 0-5/20000000")
	if resp.StatusCode != 400 || !strings.Contains(string(b), "/d/f11") || !strings.Contains(string(b), "Content-Range") {
		t.Fatalf("ranged PUT: %d %s", resp.StatusCode, b)
	}
	if _, ok := fx.ns.Committed(11); ok {
		t.Fatal("ranged PUT committed")
	}
	if resp, b := do(t, http.MethodPut, fx.dataURL(w), []byte("whole file")); resp.StatusCode != 201 {
		t.Fatalf("PUT after the refused ranged PUT: %d %s", resp.StatusCode, b)
	}
}

// TestDataEmptySuffixRange: "bytes=-0" selects nothing and is answered
// 416 with the size; beside satisfiable ranges it is dropped.
func TestDataEmptySuffixRange(t *testing.T) {
	fx := start(t)
	w := fx.writeCap(12, "plain", 1)
	if resp, b := do(t, http.MethodPut, fx.dataURL(w), []byte("0123456789")); resp.StatusCode != 201 {
		t.Fatalf("PUT %d %s", resp.StatusCode, b)
	}
	r := fx.readCap(t, w, 10)
	for _, tc := range []struct {
		rng    string
		status int
		body   string
	}{
		{"bytes=-0", 416, ""},
		{"bytes= -00 ", 416, ""},
		{"bytes=-0,-0", 416, ""},
		{"bytes=-0, 2-4", 206, "234"},
		{"bytes=-3", 206, "789"},
	} {
		resp, b := do(t, http.MethodGet, fx.dataURL(r), nil, "Range", tc.rng)
		if resp.StatusCode != tc.status || (tc.status == 206 && string(b) != tc.body) ||
			(tc.status == 416 && (resp.Header.Get("Content-Range") != "bytes */10" || !strings.Contains(string(b), "/d/f12"))) {
			t.Errorf("Range %q: %d %q Content-Range %q, want %d %q", tc.rng, resp.StatusCode, b, resp.Header.Get("Content-Range"), tc.status, tc.body)
		}
	}
}

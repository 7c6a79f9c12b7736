package kaontest

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
)

// TestStack: the in-process stack stores and serves files of every layout
// through both HTTP endpoints, and the namespace service answers directly.
func TestStack(t *testing.T) {
	st := New(t, Options{})
	ctx := context.Background()
	data := make([]byte, 3<<20+123)
	rand.Read(data)
	for _, l := range []string{"plain", "replica:2", "ec:4+2"} {
		dir := "/" + l[:2]
		if err := st.Client.Mkdir(ctx, dir, 0, false); err != nil {
			t.Fatal(err)
		}
		if err := st.Client.SetAttr(ctx, dir, "sys.forced.layout", l); err != nil {
			t.Fatal(err)
		}
		if code := st.Put(t, dir+"/f", data); code != 201 {
			t.Fatalf("%s: PUT %d", l, code)
		}
		if code, got := st.Get(t, dir+"/f"); code != 200 || !bytes.Equal(got, data) {
			t.Fatalf("%s: GET %d, %d bytes", l, code, len(got))
		}
		n, err := st.NS.Stat(ctx, auth.Root, dir+"/f")
		if err != nil || n.Size != int64(len(data)) || len(n.Locations) == 0 {
			t.Fatalf("%s: stat %+v %v", l, n, err)
		}
	}
	if code, _ := st.Get(t, "/missing"); code != 404 {
		t.Fatalf("GET missing: %d", code)
	}
}

// TestStackIsTheBinarysWiring: the stack's endpoints are those `kaon up`
// serves (internal/role), not a bare front end: both answer /metrics with
// their role's figures, counting the requests they served and, with
// them, the connections their root:// listeners hold.
func TestStackIsTheBinarysWiring(t *testing.T) {
	st := New(t, Options{Filesystems: 2})
	if code := st.Put(t, "/f", []byte("data")); code != 201 {
		t.Fatalf("PUT: %d", code)
	}
	xrootdHandshake(t, st.XRootD)
	xrootdHandshake(t, st.FSTXrd)
	for _, c := range []struct {
		name, url string
		want      []string
	}{
		{"namespace", st.HTTP.URL, []string{"kaon_fs_up{", `kaon_http_requests_total{`, `role="mgm"`, `kaon_xrootd_connections{role="mgm"} 1`}},
		{"storage", st.Data.URL, []string{"kaon_fst_io_operations_total{", `role="fst"`, `kaon_xrootd_connections{role="fst"} 1`}},
	} {
		resp, err := http.Get(c.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s endpoint: GET /metrics: %d %s", c.name, resp.StatusCode, b)
		}
		for _, w := range c.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s endpoint's /metrics lacks %s", c.name, w)
			}
		}
	}
}

// xrootdHandshake opens a connection to the root:// listener url and
// completes the protocol's handshake; the connection stays open until
// the test ends.
func xrootdHandshake(t *testing.T, url string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "root://"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	hs := make([]byte, 20) // 0, 0, 0, 4, 2012
	hs[15], hs[18], hs[19] = 4, 2012>>8, 2012&0xff
	if _, err := c.Write(hs); err != nil {
		t.Fatalf("%s: handshake: %v", url, err)
	}
	var answer [16]byte // header and the server's protocol and type
	if _, err := io.ReadFull(c, answer[:]); err != nil {
		t.Fatalf("%s: no answer to the handshake within 30s: %v", url, err)
	}
	c.SetDeadline(time.Time{})
}

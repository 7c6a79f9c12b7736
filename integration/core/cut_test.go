package core

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// deployment is a namespace endpoint, the process that serves the data
// endpoint (whose log has its access lines) and the namespace's audit log.
type deployment struct {
	ns, fst *harness.Process
	audit   string
	ca      *x509.CertPool
	caFile  string
}

// tlsDeployments starts `kaon up --tls` and a `kaon mgm --tls` with a
// `kaon fst --tls` of six filesystems.
func tlsDeployments(t *testing.T) map[string]deployment {
	t.Helper()
	up := harness.Up(t, "--tls")
	mdir := t.TempDir()
	m := harness.Start(t, mdir, "mgm", "--data", mdir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--tls")
	fdir := t.TempDir()
	args := []string{"fst", "--data", fdir, "--http", "127.0.0.1:0", "--tls", "--tls-dir", filepath.Join(mdir, "tls"),
		"--mgm", strings.Replace(m.EP.HTTP, "http://", "https://", 1), "--key", filepath.Join(mdir, "keys", "capability.key")}
	for i := 0; i < 6; i++ {
		args = append(args, "--fs", filepath.Join(fdir, fmt.Sprintf("fs%d", i)))
	}
	f := harness.Start(t, fdir, args...)
	harness.WaitFor(t, 30*time.Second, "the storage server's 6 filesystems to boot", func() bool {
		return strings.Count(m.MustKaon("fs", "ls"), "booted") == 6
	})
	out := map[string]deployment{}
	for name, d := range map[string]deployment{"kaon up": {ns: up, fst: up}, "kaon mgm + kaon fst": {ns: m, fst: f}} {
		d.audit = filepath.Join(d.ns.Dir, "audit.log")
		d.caFile = filepath.Join(d.ns.Dir, "tls", "ca.pem")
		pem, err := os.ReadFile(d.caFile)
		if err != nil {
			t.Fatal(err)
		}
		d.ca = x509.NewCertPool()
		d.ca.AppendCertsFromPEM(pem)
		out[name] = d
	}
	return out
}

// dial connects to the host of u, over TLS for https.
func (d deployment) dial(t *testing.T, u *url.URL) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if u.Scheme == "https" {
		tc := tls.Client(c, &tls.Config{RootCAs: d.ca, ServerName: u.Hostname()})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("TLS handshake with %s: %v", u.Host, err)
		}
		return tc
	}
	return c
}

// cutUpload PUTs a chunked body to base+path over raw connections: it
// asks the namespace endpoint (Expect: 100-continue, as curl does), follows
// the 307 to the storage server, sends two chunks and, for a cut in the
// middle of a chunk, half of a third, then closes the connection without
// the last (zero-length) chunk. It returns the data URL's path.
func (d deployment) cutUpload(t *testing.T, base, path string, midChunk bool) string {
	t.Helper()
	u, _ := url.Parse(base + path)
	c := d.dial(t, u)
	fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n", u.Path, u.Host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	c.Close()
	if err != nil || resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("PUT %s at the namespace: %v %v", path, resp, err)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Scheme != u.Scheme {
		t.Fatalf("PUT %s: redirected to %q (%v)", path, resp.Header.Get("Location"), err)
	}
	c = d.dial(t, loc)
	defer c.Close()
	piece := make([]byte, 200000)
	rand.Read(piece)
	fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n", loc.RequestURI(), loc.Host)
	for i := 0; i < 2; i++ {
		fmt.Fprintf(c, "%x\r\n%s\r\n", len(piece), piece)
	}
	if midChunk {
		fmt.Fprintf(c, "%x\r\n%s", len(piece), piece[:len(piece)/2])
	}
	return loc.Path
}

// commits counts the audit log's successful commits of path.
func commits(t *testing.T, audit, path string) int {
	t.Helper()
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var rec struct{ Op, Path, Result string }
		if json.Unmarshal(l, &rec) == nil && rec.Op == "commit" && rec.Path == path && rec.Result == "ok" {
			n++
		}
	}
	return n
}

// TestCutChunkedUploadKeepsFile: a chunked upload over an existing file
// whose connection is cut before its last chunk — in the middle of a
// chunk or between two — is never committed: over http and https, on
// `kaon up` and on separate namespace and storage servers, in every
// layout, the existing file is intact afterwards and no commit of the
// cut upload is in the audit log.
func TestCutChunkedUploadKeepsFile(t *testing.T) {
	local, data := randomFile(t, 4_000_000)
	for name, d := range tlsDeployments(t) {
		for _, layout := range []string{"plain", "replica:2", "ec:4+2"} {
			dir := "/" + strings.NewReplacer(":", "", "+", "").Replace(layout)
			layoutDir(t, d.ns, dir, layout)
			for _, scheme := range []string{"http", "https"} {
				base := strings.Replace(d.ns.EP.HTTP, "http://", scheme+"://", 1)
				for _, mid := range []bool{true, false} {
					what := fmt.Sprintf("%s, %s, %s, cut between chunks", name, layout, scheme)
					if mid {
						what = fmt.Sprintf("%s, %s, %s, cut mid-chunk", name, layout, scheme)
					}
					p := fmt.Sprintf("%s/f-%s-%v", dir, scheme, mid)
					if r := curl(t, "-L", "--cacert", d.caFile, "-T", local, base+p); r.code != 201 {
						t.Fatalf("%s: PUT of the existing file: %d %s %s", what, r.code, r.body, r.stderr)
					}
					dataPath := d.cutUpload(t, base, p, mid)
					harness.WaitFor(t, 30*time.Second, what+": the storage server to finish the cut request", func() bool {
						return strings.Contains(d.fst.Logs(), "method=PUT path="+dataPath+" ")
					})
					r := curl(t, "-L", "--cacert", d.caFile, base+p)
					if r.code != 200 || !bytes.Equal(r.body, data) {
						t.Fatalf("%s: the existing file after the cut upload: HTTP %d, %d bytes (want %d), same bytes %v",
							what, r.code, len(r.body), len(data), bytes.Equal(r.body, data))
					}
					if n := commits(t, d.audit, p); n != 1 {
						t.Fatalf("%s: %d commits of %s audited, want 1 (the existing file's)", what, n, p)
					}
				}
			}
		}
	}
}

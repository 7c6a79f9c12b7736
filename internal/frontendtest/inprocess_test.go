package frontendtest_test

// The conformance scenarios in process: kaontest's stack (the roles as
// the binary assembles them, on loopback listeners), driven with Go's
// net/http and Kaon's own XRootD client (internal/xrootd). Who a client
// is comes from a test authenticator, as the unix peer's uid does in
// `kaon up`: a client whose connection comes from nobodyIP, or that logs
// in to root:// as "nobody", is nobody; any other is root.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/tokentest"
	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/token"
	"github.com/kaon-storage/kaon/internal/frontendtest"
	"github.com/kaon-storage/kaon/internal/kaontest"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// nobodyIP is the loopback address nobody's HTTP connections come from.
const nobodyIP = "127.0.0.2"

// identity authenticates every client, as root or as nobody.
type identity struct{}

func (identity) Authenticate(_ context.Context, r *auth.Request) (auth.Principal, bool, error) {
	if host, _, _ := net.SplitHostPort(r.Remote.String()); host == nobodyIP || r.Login == "nobody" {
		return auth.Nobody, true, nil
	}
	return auth.Principal{Name: "root", Method: "test"}, true, nil
}

// TestConformanceInProcess runs frontendtest.Conformance over kaontest.
func TestConformanceInProcess(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{Filesystems: 3, Auth: auth.Chain{identity{}}})
	frontendtest.Conformance(t, admin{st}, []frontendtest.Driver{newHTTPDriver(st.HTTP.URL), xrdDriver{addr: strings.TrimPrefix(st.XRootD, "root://")}})
}

// TestTokenConformanceInProcess runs frontendtest.Tokens over kaontest's
// HTTP front end, trusting a test issuer whose tokens map to uid 4242 (as
// integration/frontends does with --token-issuer ...,user=4242); no token
// reaches the stack's log (server and access log). root:// carries tokens
// in ztn over TLS, which Kaon's client does not speak: the real binary's
// run covers it.
func TestTokenConformanceInProcess(t *testing.T) {
	iss := tokentest.New(t, t.TempDir(), "https://issuer.test", "https://kaon.test")
	keys, err := token.NewFileKeys(iss.JWKSFile)
	if err != nil {
		t.Fatal(err)
	}
	v, err := token.New(token.Config{Audiences: []string{"https://kaon.test"},
		Issuers: []token.IssuerConfig{{Issuer: iss.URL, Keys: keys, Map: token.Mapping{User: "4242"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	st := kaontest.New(t, kaontest.Options{Filesystems: 3, Auth: auth.Chain{v, identity{}},
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	used := frontendtest.Tokens(t, admin{st}, iss, []func(tok string) frontendtest.Driver{
		func(tok string) frontendtest.Driver { d := newHTTPDriver(st.HTTP.URL); d.token = tok; return d },
	})
	frontendtest.CheckNoTokens(t, used, map[string]string{"server and access log": logs.String()})
}

// logBuffer is a log destination safe for concurrent handlers.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// admin sets up the scenarios through the admin API.
type admin struct{ st *kaontest.Stack }

func (a admin) Mkdir(t *testing.T, p string) {
	if err := a.st.Client.Mkdir(context.Background(), p, 0, false); err != nil {
		t.Fatal(err)
	}
}

func (a admin) Chmod(t *testing.T, p string, mode uint32) {
	if err := a.st.Client.Chmod(context.Background(), p, mode); err != nil {
		t.Fatal(err)
	}
}

func (a admin) Chown(t *testing.T, p string, uid, gid uint32) {
	if err := a.st.Client.Chown(context.Background(), p, uid, gid); err != nil {
		t.Fatal(err)
	}
}

func (a admin) Exists(t *testing.T, p string) bool {
	_, err := a.st.Client.Stat(context.Background(), p)
	return err == nil
}

// httpDriver speaks WebDAV with net/http, following redirects as curl -L
// does (the body of a PUT is sent again to the storage server), with a
// bearer token in the Authorization header when token is set (net/http
// does not send it on to the storage server).
type httpDriver struct {
	base, token  string
	root, nobody *http.Client
}

func newHTTPDriver(base string) httpDriver {
	from := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(nobodyIP)}, Timeout: 10 * time.Second}
	return httpDriver{base: base, root: &http.Client{Timeout: time.Minute},
		nobody: &http.Client{Timeout: time.Minute, Transport: &http.Transport{DialContext: from.DialContext}}}
}

func (httpDriver) Name() string { return "http" }

func (d httpDriver) Do(t *testing.T, nobody bool, op string, a ...string) frontendtest.Result {
	t.Helper()
	c := d.root
	if nobody {
		c = d.nobody
	}
	do := func(method, p string, body []byte, hdr ...string) (*http.Response, string) {
		req, err := http.NewRequest(method, d.base+p, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body == nil {
			req.Body, req.GetBody = http.NoBody, nil
		}
		if d.token != "" {
			req.Header.Set("Authorization", "Bearer "+d.token)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, p, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: reading the answer: %v", method, p, err)
		}
		return resp, string(b)
	}
	var resp *http.Response
	var body string
	r := frontendtest.Result{}
	switch op {
	case "put":
		data, err := os.ReadFile(a[0])
		if err != nil {
			t.Fatal(err)
		}
		resp, body = do(http.MethodPut, a[1], data)
	case "write":
		data, err := os.ReadFile(a[0])
		if err != nil {
			t.Fatal(err)
		}
		off, _ := strconv.Atoi(a[2])
		resp, body = do(http.MethodPut, a[1], data, "Content-Range", fmt.Sprintf("bytes %d-%d/*", off, off+len(data)-1))
	case "read":
		var hdr []string
		if n, _ := strconv.Atoi(a[2]); n >= 0 {
			off, _ := strconv.Atoi(a[1])
			hdr = []string{"Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1)}
		}
		resp, body = do(http.MethodGet, a[0], nil, hdr...)
		r.Data = []byte(body)
	case "stat", "ls":
		depth := "0"
		if op == "ls" {
			depth = "1"
		}
		resp, body = do("PROPFIND", a[0], nil, "Depth", depth)
		if resp.StatusCode == 207 {
			frontendtest.Propfind(t, a[0], body, &r)
		}
	case "mkdir":
		resp, body = do("MKCOL", a[0], nil)
	case "mv":
		resp, body = do("MOVE", a[0], nil, "Destination", d.base+a[1])
	case "rm", "rmdir":
		resp, body = do(http.MethodDelete, a[0], nil)
	case "checksum":
		resp, body = do(http.MethodHead, a[0], nil, "Want-Digest", "adler32")
		r.Sum = frontendtest.DigestSum(resp.Header)
	default:
		t.Fatalf("http driver: unknown op %s", op)
	}
	r.Outcome = frontendtest.HTTPOutcome(op, resp.StatusCode)
	r.Detail = fmt.Sprintf("HTTP %d %s", resp.StatusCode, strings.TrimSpace(body))
	return r
}

// xrdDriver speaks root:// with Kaon's own client (internal/xrootd),
// logging in as "root" or "nobody"; an upload replaces an existing file
// (kXR_delete), as xrdcp -f and the Python driver do. Opens are sent to
// the namespace server, which redirects them to a storage server with a
// capability; the client follows.
type xrdDriver struct{ addr string }

func (xrdDriver) Name() string { return "root" }

func (d xrdDriver) Do(t *testing.T, nobody bool, op string, a ...string) frontendtest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	user := "root"
	if nobody {
		user = "nobody"
	}
	cli, err := xrootd.Dial(ctx, d.addr, xrootd.ClientConfig{User: user})
	if err != nil {
		t.Fatalf("root driver: connect to %s: %v", d.addr, err)
	}
	defer cli.Close()
	// upload writes data at off into the file open() opens and closes it
	// (which commits it).
	upload := func(f *xrootd.RemoteFile, err error, data []byte, off int64) frontendtest.Result {
		if err != nil {
			return outcome(err)
		}
		defer f.Conn().Close()
		err = f.WriteAt(ctx, data, off)
		if cerr := f.Close(ctx); err == nil {
			err = cerr
		}
		return outcome(err)
	}
	var r frontendtest.Result
	switch op {
	case "put":
		data, err := os.ReadFile(a[0])
		if err != nil {
			t.Fatal(err)
		}
		f, err := cli.Create(ctx, a[1], 0o600)
		r = upload(f, err, data, 0)
	case "write":
		data, err := os.ReadFile(a[0])
		if err != nil {
			t.Fatal(err)
		}
		off, _ := strconv.ParseInt(a[2], 10, 64)
		f, err := cli.OpenUpdate(ctx, a[1])
		r = upload(f, err, data, off)
	case "read":
		f, err := cli.OpenRead(ctx, a[0])
		if err != nil {
			return outcome(err)
		}
		defer f.Conn().Close()
		defer f.Close(ctx)
		off, _ := strconv.ParseInt(a[1], 10, 64)
		n, _ := strconv.ParseInt(a[2], 10, 64)
		if n < 0 {
			n = f.Size - off
		}
		buf := make([]byte, n)
		got, err := f.ReadAt(ctx, buf, off)
		r = outcome(err)
		r.Data = buf[:got]
	case "stat":
		st, err := cli.Stat(ctx, a[0])
		r = outcome(err)
		r.Size, r.Dir = st.Size, st.IsDir()
	case "ls":
		names, err := cli.Dirlist(ctx, a[0])
		r = outcome(err)
		r.Names = names
		sort.Strings(r.Names)
	case "mkdir":
		r = outcome(cli.Mkdir(ctx, a[0], 0, false))
	case "mv":
		r = outcome(cli.Mv(ctx, a[0], a[1]))
	case "rm":
		r = outcome(cli.Rm(ctx, a[0]))
	case "rmdir":
		r = outcome(cli.Rmdir(ctx, a[0]))
	case "checksum":
		sum, err := cli.Checksum(ctx, a[0], "adler32")
		r = outcome(err)
		r.Sum = sum
	default:
		t.Fatalf("root driver: unknown op %s", op)
	}
	return r
}

// outcome is the result of a root:// request that failed with err (nil:
// succeeded), by the server's kXR_* error code.
func outcome(err error) frontendtest.Result {
	if err == nil {
		return frontendtest.Result{Outcome: frontendtest.OK}
	}
	var se *xrootd.ServerError
	code := -1
	if errors.As(err, &se) {
		code = int(se.Code)
	}
	return frontendtest.Result{Outcome: frontendtest.XRootDOutcome(code), Detail: err.Error()}
}

// Package frontends runs the front-end conformance suite
// (internal/frontendtest, whose scenarios also run in process) against
// the real binary with the real clients: HTTP/WebDAV with curl, root://
// with the XRootD client library (the Python bindings), as root and as
// uid nobody. A new front end (or a new auth method) joins by adding a
// driver here and one in frontendtest.
package frontends

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/frontendtest"
)

// run executes a client with a deadline, optionally as uid/gid 65534.
func run(t *testing.T, asNobody bool, env []string, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = "/"
	if asNobody {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s %v did not finish within 2 minutes", name, args)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// httpDriver speaks WebDAV with the real curl (with a bearer token in
// the Authorization header when token is set).
// httpDriver is curl: with a token, or with client certificates (the
// first identity's and nobody's proxy files), trusting cacert.
type httpDriver struct {
	base, token string
	certs       [2]string
	cacert      string
}

func (httpDriver) Name() string { return "http" }

func (d httpDriver) Do(t *testing.T, nobody bool, op string, a ...string) frontendtest.Result {
	t.Helper()
	curl := func(args ...string) (int, string, string) {
		full := []string{"-sS", "--path-as-is", "-w", "\n%{http_code}"}
		if d.token != "" {
			full = append(full, "-H", "Authorization: Bearer "+d.token)
		}
		if d.cacert != "" {
			full = append(full, "--cacert", d.cacert)
		}
		asNobody := nobody
		if d.certs[0] != "" {
			c := d.certs[0]
			if nobody {
				c = d.certs[1]
			}
			full = append(full, "--cert", c, "--key", c)
			asNobody = false
		}
		full = append(full, args...)
		out, errs, _ := run(t, asNobody, nil, "curl", full...)
		i := strings.LastIndexByte(out, '\n')
		code, _ := strconv.Atoi(strings.TrimSpace(out[i+1:]))
		return code, out[:max(i, 0)], errs
	}
	url := func(p string) string { return d.base + p }
	var code int
	var body, errs string
	r := frontendtest.Result{}
	switch op {
	case "put":
		code, body, errs = curl("-L", "-T", a[0], url(a[1]))
	case "write": // write LOCAL PATH OFFSET: a ranged PUT updates in place
		st, err := os.Stat(a[0])
		if err != nil {
			t.Fatal(err)
		}
		off, _ := strconv.ParseInt(a[2], 10, 64)
		code, body, errs = curl("-L", "-T", a[0], "-H", fmt.Sprintf("Content-Range: bytes %d-%d/*", off, off+st.Size()-1), url(a[1]))
	case "read":
		args := []string{"-L", url(a[0])}
		if n, _ := strconv.Atoi(a[2]); n >= 0 {
			off, _ := strconv.Atoi(a[1])
			args = append(args, "-r", fmt.Sprintf("%d-%d", off, off+n-1))
		}
		code, body, errs = curl(args...)
		r.Data = []byte(body)
	case "stat", "ls":
		depth := "0"
		if op == "ls" {
			depth = "1"
		}
		code, body, errs = curl("-X", "PROPFIND", "-H", "Depth: "+depth, url(a[0]))
		if code == 207 {
			frontendtest.Propfind(t, a[0], body, &r)
		}
	case "mkdir":
		code, body, errs = curl("-X", "MKCOL", url(a[0]))
	case "mv":
		code, body, errs = curl("-X", "MOVE", "-H", "Destination: "+url(a[1]), url(a[0]))
	case "rm", "rmdir":
		code, body, errs = curl("-X", "DELETE", url(a[0]))
	case "checksum":
		var hdr string
		code, hdr, errs = curl("-I", "-H", "Want-Digest: adler32", url(a[0]))
		body = hdr
		h := http.Header{}
		for _, l := range strings.Split(hdr, "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				h.Add(k, v)
			}
		}
		r.Sum = frontendtest.DigestSum(h)
	default:
		t.Fatalf("http driver: unknown op %s", op)
	}
	r.Outcome = frontendtest.HTTPOutcome(op, code)
	r.Detail = fmt.Sprintf("HTTP %d %s %s", code, strings.TrimSpace(body), errs)
	return r
}

// xrdDriver speaks root:// through the Python XRootD bindings (XrdCl),
// with env added to the client's environment (BEARER_TOKEN=...).
type xrdDriver struct {
	url, script string
	env         []string
	proxies     [2]string // X509_USER_PROXY of the first identity and of nobody (gsi)
}

func (xrdDriver) Name() string { return "root" }

func (d xrdDriver) Do(t *testing.T, nobody bool, op string, a ...string) frontendtest.Result {
	t.Helper()
	env := append([]string{"XRD_REQUESTTIMEOUT=60", "XRD_CONNECTIONRETRY=1"}, d.env...)
	asNobody := nobody
	if d.proxies[0] != "" {
		p := d.proxies[0]
		if nobody {
			p = d.proxies[1]
		}
		env, asNobody = append(env, "X509_USER_PROXY="+p), false
	}
	out, errs, _ := run(t, asNobody, env, "/usr/bin/python3", append([]string{d.script, d.url, op}, a...)...)
	var j struct {
		Errno int      `json:"errno"`
		Msg   string   `json:"msg"`
		Data  string   `json:"data"`
		Size  int64    `json:"size"`
		Dir   bool     `json:"dir"`
		Names []string `json:"names"`
		Value string   `json:"value"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &j); err != nil {
		t.Fatalf("root driver %s %v: %v\n%s\n%s", op, a, err, out, errs)
	}
	r := frontendtest.Result{Size: j.Size, Dir: j.Dir, Names: j.Names, Sum: j.Value, Detail: fmt.Sprintf("errno %d %s", j.Errno, j.Msg)}
	r.Data, _ = base64.StdEncoding.DecodeString(j.Data)
	r.Outcome = frontendtest.XRootDOutcome(j.Errno) // XrdCl reports the server's kXR_* error code
	return r
}

// TestConformance runs every scenario over every front end.
func TestConformance(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this suite needs root to act as another user")
	}
	k := harness.Up(t)
	// The driver script, readable by nobody.
	dir := frontendtest.LocalDir(t)
	_, file, _, _ := runtime.Caller(0)
	script, err := os.ReadFile(filepath.Join(filepath.Dir(file), "xrd_driver.py"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "xrd_driver.py"), script, 0o644)
	frontendtest.Conformance(t, cli{k}, []frontendtest.Driver{
		httpDriver{base: k.EP.HTTP},
		xrdDriver{url: k.EP.XRootD, script: filepath.Join(dir, "xrd_driver.py")},
	})
}

// cli sets up the scenarios with the kaon CLI.
type cli struct{ k *harness.Process }

func (c cli) Mkdir(t *testing.T, p string) { c.k.MustKaon("mkdir", p) }
func (c cli) Chmod(t *testing.T, p string, mode uint32) {
	c.k.MustKaon("chmod", strconv.FormatUint(uint64(mode), 8), p)
}
func (c cli) Chown(t *testing.T, p string, uid, gid uint32) {
	c.k.MustKaon("chown", fmt.Sprintf("%d:%d", uid, gid), p)
}
func (c cli) Exists(t *testing.T, p string) bool {
	_, _, code := c.k.Kaon("stat", p)
	return code == 0
}

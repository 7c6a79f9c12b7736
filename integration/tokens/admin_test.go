package tokens

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// adminRoute is a route of the admin API (/api/v1/...) with arguments
// that reach its authorization: refused to anyone but the admin, then
// harmless for the admin (a no-op, or an error about the arguments).
type adminRoute struct {
	post bool
	args map[string]any
}

// adminRoutes are the admin API's routes for the admin role only: the
// administration and what tells about the instance (its servers, disks,
// status, keys) rather than about one's files.
var adminRoutes = map[string]adminRoute{
	"fs/ls":               {},
	"fs/paths":            {},
	"fs/status":           {args: map[string]any{"id": "1"}},
	"group/ls":            {},
	"space/ls":            {},
	"fsck/stat":           {},
	"fsck/report":         {},
	"file/convert/status": {},
	"token/keys":          {},
	"ns/status":           {},
	"ns/dump":             {args: map[string]any{"path": "/"}},
	"fs/add":              {post: true, args: map[string]any{"node": "nosuch", "path": "/nosuch"}},
	"fs/config":           {post: true, args: map[string]any{"id": "1", "key": "drain.parallel", "value": "4"}},
	"fs/reinit":           {post: true, args: map[string]any{"id": "999"}},
	"quota/set":           {post: true, args: map[string]any{"path": "/p", "kind": "user", "id": "1001", "bytes": "1000000", "files": "100"}},
	"quota/rm":            {post: true, args: map[string]any{"path": "/", "kind": "user", "id": "999"}},
	"token/issue":         {post: true, args: map[string]any{"ttl": "1h", "user": "4242", "paths": []string{"/p"}, "scopes": []string{"storage.read"}}},
	"token/rotate":        {post: true},
	"space/define":        {post: true, args: map[string]any{"name": "adminonly"}},
	"space/config":        {post: true, args: map[string]any{"name": "adminonly", "key": "nosuchkey", "value": "1"}},
	"fsck/run":            {post: true},
	"fsck/repair":         {post: true, args: map[string]any{"class": "orphans_n"}},
	"group/set":           {post: true, args: map[string]any{"name": "default.0", "key": "balancer", "value": "off"}},
	"file/convert":        {post: true, args: map[string]any{"path": "/nosuch", "layout": "plain"}},
	"ns/step-down":        {post: true},
	"fusex/ls":            {},
	"fusex/caps":          {},
	"fusex/evict":         {post: true, args: map[string]any{"session": "nosuch"}},
	"fusex/dropcaps":      {post: true, args: map[string]any{"session": "nosuch"}},
	"fusex/droplocks":     {post: true, args: map[string]any{"path": "/nosuch"}},
	"fusex/conf":          {post: true},
	// The operator's verbs; the changes are refused for their arguments
	// (a subject without value, a bad target), so nothing changes.
	"access/ls":       {},
	"who":             {},
	"node/ls":         {},
	"ns/stat":         {},
	"config/ls":       {},
	"io/stat":         {},
	"access/ban":      {post: true, args: map[string]any{"kind": "user"}},
	"access/unban":    {post: true, args: map[string]any{"kind": "user"}},
	"access/allow":    {post: true, args: map[string]any{"kind": "user"}},
	"access/unallow":  {post: true, args: map[string]any{"kind": "user"}},
	"access/stall":    {post: true, args: map[string]any{"arg": "soon"}},
	"access/redirect": {post: true, args: map[string]any{"arg": "ftp://nowhere"}},
	"access/limit":    {post: true, args: map[string]any{"kind": "host", "value": "192.0.2.1", "arg": "1"}},
	"node/config":     {post: true, args: map[string]any{"name": "nosuch", "key": "configstatus", "value": "rw"}},
	"config/save":     {post: true, args: map[string]any{"name": "bad name"}},
	"config/load":     {post: true, args: map[string]any{"name": "nosuch"}},
	"debug":           {post: true, args: map[string]any{"level": "loud"}},
}

// userRoutes are the admin API's routes any client may call: the
// namespace authorizes them per path (mode bits, ACLs, token scopes), and
// they say nothing about the instance's servers and disks.
var userRoutes = []string{"stat", "ls", "mkdir", "chmod", "chown", "touch", "rm", "mv", "attr/set", "attr/rm", "attr/ls",
	"fileinfo", "quota/ls", "recycle/ls", "recycle/restore", "recycle/purge", "whoami", "file/versions", "file/restore-version",
	"srr", "truncate", "statfs", "utimes", "symlink"}

// apiRoutes are the routes the admin API's sources register: the
// entries of its route table ({"ROUTE", get|post, ...}) and the routes
// served on their own (HandleFunc("/api/v1/ROUTE", ...)).
func apiRoutes(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob("../../internal/httpfront/api*.go")
	if len(files) == 0 {
		t.Fatal("no internal/httpfront/api*.go: run from integration/tokens")
	}
	re := regexp.MustCompile(`(?:\{"([a-z/-]+)", (?:get|post),|HandleFunc\("/api/v1/([a-z/-]+)")`)
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1]+m[2])
		}
	}
	return out
}

// nonLoopback is an address of this host other clients reach it at.
func nonLoopback(t *testing.T) string {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Fatal("this test needs a non-loopback IPv4 address to reach the server from")
	return ""
}

// at is base (http://H:P) with its host replaced by host.
func at(base, host string) string {
	u, _ := url.Parse(base)
	return "http://" + net.JoinHostPort(host, u.Port())
}

// status sends a request with curl (as uid, with the token when given)
// and returns the HTTP status and the body.
func status(t *testing.T, uid int, tok, method, u string, body any) (string, string) {
	t.Helper()
	args := []string{"-sS", "-w", "\n%{http_code}", "-X", method}
	if tok != "" {
		args = append(args, "-H", "Authorization: Bearer "+tok)
	}
	if body != nil {
		b, _ := json.Marshal(body)
		args = append(args, "-H", "Content-Type: application/json", "--data-binary", string(b))
	}
	out, errs, _ := run(t, nil, uid, "curl", append(args, u)...)
	i := strings.LastIndexByte(out, '\n')
	if i < 0 || out[i+1:] == "000" {
		t.Fatalf("curl %s %s: %s", method, u, errs)
	}
	return out[i+1:], out[:i]
}

// TestAdminDataForAdminOnly: on a --auth token instance, every route of
// the admin API that administers or tells about the instance (servers,
// roles, disks, node addresses, uuids, status, keys) is refused to a
// client without credentials, local (401) or remote, even the remote
// host's root, and to a token holder (403), and still answered to the
// admin; what the other routes say about files carries no disk path or
// node; /metrics of both endpoints is for clients on this host by
// default (--metrics-access admin: the admin only); the storage server's
// internal endpoints answer only the servers' secret.
func TestAdminDataForAdminOnly(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test needs root to act as another user")
	}
	remote := nonLoopback(t)
	k := harness.Up(t, "--auth", "token", "--http", "0.0.0.0:0", "--cap-ttl", "5s")
	local, far := at(k.EP.HTTP, "127.0.0.1"), at(k.EP.HTTP, remote)
	fstLocal, fstFar := at(k.EP.FSTHTTP, "127.0.0.1"), at(k.EP.FSTHTTP, remote)
	k.MustKaon("mkdir", "/p")
	k.MustKaon("chown", "4242:4242", "/p")
	scoped := strings.TrimSpace(k.MustKaon("token", "issue", "--path", "/p", "--scope", "storage.read,storage.create", "--user", "4242", "--ttl", "1h"))
	if out, errs, code := run(t, nil, 0, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", "-H", "Authorization: Bearer "+scoped,
		"-T", "/etc/hostname", local+"/p/f"); out != "201" {
		t.Fatalf("upload with a storage.create token: %s %d %s", out, code, errs)
	}

	registered := apiRoutes(t)
	for _, r := range registered {
		if _, ok := adminRoutes[r]; !ok && !slices.Contains(userRoutes, r) {
			t.Errorf("route %s of the admin API is not classified by this test (admin or user)", r)
		}
	}
	for r := range adminRoutes {
		if !slices.Contains(registered, r) {
			t.Errorf("admin route %s is not registered any more: update the test", r)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	names := make([]string, 0, len(adminRoutes))
	for r := range adminRoutes {
		names = append(names, r)
	}
	slices.Sort(names)
	for _, r := range names {
		c := adminRoutes[r]
		method, u, body := "GET", "/api/v1/"+r, any(nil)
		if c.post {
			method, body = "POST", c.args
			if c.args == nil {
				body = map[string]any{}
			}
		} else if len(c.args) > 0 {
			q := url.Values{}
			for k, v := range c.args {
				q.Set(k, fmt.Sprint(v))
			}
			u += "?" + q.Encode()
		}
		for _, who := range []struct {
			what     string
			uid      int
			tok, url string
			want     string
		}{
			{"a local non-root client without credentials", 65534, "", local, "401"},
			{"root on another host, without credentials", 0, "", far, "401"},
			{"a storage.read,storage.create:/p token", 0, scoped, local, "403"},
		} {
			if code, resp := status(t, who.uid, who.tok, method, who.url+u, body); code != who.want {
				t.Errorf("%s %s by %s: %s %s, want %s", method, r, who.what, code, strings.TrimSpace(resp), who.want)
			}
		}
		code, resp := status(t, 0, "", method, local+u, body)
		if code == "401" || code == "403" || (!c.post && code != "200") {
			t.Errorf("%s %s by the admin (root on this host): %s %s", method, r, code, strings.TrimSpace(resp))
		}
	}

	// What the user routes say about a file names no disk or node.
	code, resp := status(t, 0, scoped, "GET", local+"/api/v1/fileinfo?path=/p/f", nil)
	if code != "200" || !strings.Contains(resp, `"stripes"`) || strings.Contains(resp, "/fs/") || strings.Contains(resp, `"node":"http`) {
		t.Errorf("fileinfo for a token holder: %s %s (want its stripes without node or physical path)", code, resp)
	}
	if code, resp := status(t, 0, "", "GET", local+"/api/v1/fileinfo?path=/p/f", nil); code != "200" || !strings.Contains(resp, "/fs/") {
		t.Errorf("fileinfo for the admin: %s %s (want the physical paths)", code, resp)
	}
	if code, resp := status(t, 0, scoped, "GET", local+"/api/v1/quota/ls?path=/p", nil); code != "200" || strings.Contains(resp, "1001") {
		t.Errorf("quota/ls for user 4242's token: %s %s (want no other user's quota)", code, resp)
	}
	if code, resp := status(t, 0, "", "GET", local+"/api/v1/quota/ls?path=/p", nil); code != "200" || !strings.Contains(resp, "1001") {
		t.Errorf("quota/ls for the admin: %s %s (want user 1001's quota)", code, resp)
	}

	// Metrics: by default, clients on this host only (a token instance).
	for _, ep := range []struct{ name, local, far string }{{"namespace", local, far}, {"storage", fstLocal, fstFar}} {
		if code, resp := status(t, 0, "", "GET", ep.far+"/metrics", nil); code != "403" {
			t.Errorf("%s /metrics from another host: %s %.200s", ep.name, code, resp)
		}
		if code, resp := status(t, 65534, "", "GET", ep.local+"/metrics", nil); code != "200" || !strings.Contains(resp, "go_goroutines") {
			t.Errorf("%s /metrics from this host: %s %.200s", ep.name, code, resp)
		}
	}
	// The storage server's internal endpoints are for servers only.
	for _, p := range []string{"/kaon/v1/stripe/1?cap=x", "/internal/v1/readfile", "/internal/v1/move", "/internal/v1/convert", "/internal/v1/fsck/repair"} {
		for _, m := range []string{"GET", "POST"} {
			if code, resp := status(t, 0, "", m, fstLocal+p, nil); code != "403" {
				t.Errorf("%s %s at the storage server without the servers' secret: %s %s", m, p, code, resp)
			}
		}
	}
	if code, resp := status(t, 0, "", "POST", local+"/internal/v1/heartbeat", map[string]any{}); code != "403" {
		t.Errorf("heartbeat at the namespace server without the servers' secret: %s %s", code, resp)
	}

	// --metrics-access admin: the admin only, on both endpoints.
	a := harness.Up(t, "--auth", "token", "--metrics-access", "admin")
	for _, u := range []string{a.EP.HTTP, a.EP.FSTHTTP} {
		if code, resp := status(t, 65534, "", "GET", u+"/metrics", nil); code != "401" && code != "403" {
			t.Errorf("%s/metrics with --metrics-access admin, by a local non-root client: %s %.200s", u, code, resp)
		}
		if code, resp := status(t, 0, "", "GET", u+"/metrics", nil); code != "200" || !strings.Contains(resp, "go_goroutines") {
			t.Errorf("%s/metrics with --metrics-access admin, by the admin: %s %.200s", u, code, resp)
		}
	}
}

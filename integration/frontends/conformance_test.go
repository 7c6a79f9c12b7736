// Package frontends is the front-end conformance suite: the same
// scenarios run over every protocol Kaon serves (HTTP/WebDAV with curl,
// root:// with the XRootD client library) against one server, and must
// end the same way — same bytes, same metadata, same class of error. A
// new front end (or a new auth method) joins by adding a driver.
package frontends

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"hash/adler32"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// Outcomes, protocol independent.
const (
	OK         = "ok"
	NotFound   = "not found"
	Permission = "permission denied"
	Exists     = "exists"
	IsDir      = "is a directory"
	Conflict   = "conflict (not a directory, not empty)"
	Unauth     = "not authenticated" // HTTP 401; root:// has only kXR_NotAuthorized (Permission)
	Other      = "other error"
)

// Result is what one operation returned.
type Result struct {
	Outcome string
	Data    []byte   // read
	Size    int64    // stat
	Dir     bool     // stat
	Names   []string // ls
	Sum     string   // checksum (adler32, hex)
	Detail  string   // protocol status and message, for failures
}

// Driver performs operations through one protocol, as root or as nobody.
type Driver interface {
	Name() string
	Do(t *testing.T, asNobody bool, op string, args ...string) Result
}

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
type httpDriver struct{ base, token string }

func (httpDriver) Name() string { return "http" }

// outcome maps an HTTP status for op; 405 and 409 depend on the method
// (RFC 4918: MKCOL on an existing resource is 405, a missing parent 409).
func (httpDriver) outcome(op string, code int) string {
	switch {
	case code >= 200 && code < 300:
		return OK
	case code == 404:
		return NotFound
	case code == 403:
		return Permission
	case code == 401:
		return Unauth
	case code == 405 && op == "mkdir":
		return Exists
	case code == 405:
		return IsDir
	case code == 409 && op == "mkdir":
		return NotFound
	case code == 409:
		return Conflict
	}
	return Other
}

type davProps struct {
	Responses []struct {
		Href       string    `xml:"href"`
		Length     int64     `xml:"propstat>prop>getcontentlength"`
		Collection *struct{} `xml:"propstat>prop>resourcetype>collection"`
	} `xml:"response"`
}

func (d httpDriver) Do(t *testing.T, nobody bool, op string, a ...string) Result {
	t.Helper()
	curl := func(args ...string) (int, string, string) {
		full := []string{"-sS", "--path-as-is", "-w", "\n%{http_code}"}
		if d.token != "" {
			full = append(full, "-H", "Authorization: Bearer "+d.token)
		}
		full = append(full, args...)
		out, errs, _ := run(t, nobody, nil, "curl", full...)
		i := strings.LastIndexByte(out, '\n')
		code, _ := strconv.Atoi(strings.TrimSpace(out[i+1:]))
		return code, out[:max(i, 0)], errs
	}
	url := func(p string) string { return d.base + p }
	var code int
	var body, errs string
	r := Result{}
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
			var ps davProps
			if err := xml.Unmarshal([]byte(body), &ps); err != nil || len(ps.Responses) == 0 {
				t.Fatalf("PROPFIND %s: %v\n%q %s", a[0], err, body, errs)
			}
			r.Size, r.Dir = ps.Responses[0].Length, ps.Responses[0].Collection != nil
			for _, e := range ps.Responses[1:] {
				r.Names = append(r.Names, path.Base(strings.TrimSuffix(e.Href, "/")))
			}
			sort.Strings(r.Names)
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
		for _, l := range strings.Split(hdr, "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "Digest") {
				r.Sum = strings.TrimPrefix(strings.TrimSpace(v), "adler32=")
			}
		}
	default:
		t.Fatalf("http driver: unknown op %s", op)
	}
	r.Outcome = d.outcome(op, code)
	r.Detail = fmt.Sprintf("HTTP %d %s %s", code, strings.TrimSpace(body), errs)
	return r
}

// xrdDriver speaks root:// through the Python XRootD bindings (XrdCl),
// with env added to the client's environment (BEARER_TOKEN=...).
type xrdDriver struct {
	url, script string
	env         []string
}

func (xrdDriver) Name() string { return "root" }

func (d xrdDriver) Do(t *testing.T, nobody bool, op string, a ...string) Result {
	t.Helper()
	out, errs, _ := run(t, nobody, append([]string{"XRD_REQUESTTIMEOUT=60", "XRD_CONNECTIONRETRY=1"}, d.env...),
		"/usr/bin/python3", append([]string{d.script, d.url, op}, a...)...)
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
	r := Result{Size: j.Size, Dir: j.Dir, Names: j.Names, Sum: j.Value, Detail: fmt.Sprintf("errno %d %s", j.Errno, j.Msg)}
	r.Data, _ = base64.StdEncoding.DecodeString(j.Data)
	// XrdCl reports the server's kXR_* error code.
	switch j.Errno {
	case 0:
		r.Outcome = OK
	case 3011: // kXR_NotFound
		r.Outcome = NotFound
	case 3010: // kXR_NotAuthorized
		r.Outcome = Permission
	case 3018: // kXR_ItExists
		r.Outcome = Exists
	case 3016: // kXR_isDirectory
		r.Outcome = IsDir
	case 3005: // kXR_FSError: what xrootd answers for ENOTDIR and ENOTEMPTY
		r.Outcome = Conflict
	default:
		r.Outcome = Other
	}
	return r
}

// TestConformance runs every scenario over every front end.
func TestConformance(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this suite needs root to act as another user")
	}
	k := harness.Up(t)
	// Local sources and the driver script, readable by nobody.
	src, err := os.MkdirTemp("", "kaon-conformance-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(src) })
	os.Chmod(src, 0o755)
	_, file, _, _ := runtime.Caller(0)
	script, err := os.ReadFile(filepath.Join(filepath.Dir(file), "xrd_driver.py"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "xrd_driver.py"), script, 0o644)
	drivers := []Driver{
		httpDriver{base: k.EP.HTTP},
		xrdDriver{url: k.EP.XRootD, script: filepath.Join(src, "xrd_driver.py")},
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 80000) // 1.25 MB
	data = append(data, "tail"...)
	small := []byte("replaced content")
	local, local2 := filepath.Join(src, "data"), filepath.Join(src, "small")
	os.WriteFile(local, data, 0o644)
	os.WriteFile(local2, small, 0o644)
	adler := fmt.Sprintf("%08x", adler32.Checksum(data))
	for _, d := range drivers {
		t.Run(d.Name(), func(t *testing.T) {
			base := "/conf-" + d.Name()
			k.MustKaon("mkdir", base)
			k.MustKaon("mkdir", base+"/private")
			k.MustKaon("chmod", "700", base+"/private")
			want := func(name string, r Result, outcome string) {
				t.Helper()
				if r.Outcome != outcome {
					t.Fatalf("%s: %s, want %s (%s)", name, r.Outcome, outcome, r.Detail)
				}
			}
			f := base + "/f"
			// create, read, ranges, stat, list, checksum
			want("create", d.Do(t, false, "put", local, f), OK)
			if r := d.Do(t, false, "read", f, "0", "-1"); r.Outcome != OK || !bytes.Equal(r.Data, data) {
				t.Fatalf("read back: %s, %d bytes equal=%v (%s)", r.Outcome, len(r.Data), bytes.Equal(r.Data, data), r.Detail)
			}
			for _, rg := range [][2]int{{0, 1}, {12345, 100000}, {len(data) - 4, 4}} {
				r := d.Do(t, false, "read", f, strconv.Itoa(rg[0]), strconv.Itoa(rg[1]))
				if r.Outcome != OK || !bytes.Equal(r.Data, data[rg[0]:rg[0]+rg[1]]) {
					t.Fatalf("range %v: %s (%s)", rg, r.Outcome, r.Detail)
				}
			}
			if r := d.Do(t, false, "stat", f); r.Outcome != OK || r.Size != int64(len(data)) || r.Dir {
				t.Fatalf("stat file: %+v", r)
			}
			if r := d.Do(t, false, "stat", base); r.Outcome != OK || !r.Dir {
				t.Fatalf("stat dir: %+v", r)
			}
			if r := d.Do(t, false, "ls", base); r.Outcome != OK || strings.Join(r.Names, ",") != "f,private" {
				t.Fatalf("list: %+v", r)
			}
			if r := d.Do(t, false, "checksum", f); r.Outcome != OK || r.Sum != adler {
				t.Fatalf("checksum: %+v, want %s", r, adler)
			}
			// an upload replaces a file atomically
			want("replace", d.Do(t, false, "put", local2, f), OK)
			if r := d.Do(t, false, "read", f, "0", "-1"); !bytes.Equal(r.Data, small) {
				t.Fatalf("read after replace: %q (%s)", r.Data, r.Detail)
			}
			// a write at an offset updates the file in place (inside, then
			// past its end); the checksum describes the new content
			model := append([]byte(nil), small...)
			want("update inside", d.Do(t, false, "write", local2, f, "4"), OK)
			model = append(model[:4], small...)
			want("update past the end", d.Do(t, false, "write", local2, f, strconv.Itoa(len(model)+10)), OK)
			model = append(append(model, make([]byte, 10)...), small...)
			if r := d.Do(t, false, "read", f, "0", "-1"); r.Outcome != OK || !bytes.Equal(r.Data, model) {
				t.Fatalf("read after updates: %q, want %q (%s)", r.Data, model, r.Detail)
			}
			if r := d.Do(t, false, "stat", f); r.Outcome != OK || r.Size != int64(len(model)) {
				t.Fatalf("stat after updates: %+v, want %d bytes", r, len(model))
			}
			if r, sum := d.Do(t, false, "checksum", f), fmt.Sprintf("%08x", adler32.Checksum(model)); r.Outcome != OK || r.Sum != sum {
				t.Fatalf("checksum after updates: %+v, want %s", r, sum)
			}
			want("nobody updates a 0644 root file", d.Do(t, true, "write", local2, f, "0"), Permission)
			want("replace the updated file", d.Do(t, false, "put", local2, f), OK)
			// an upload creates missing parents
			want("create below missing parents", d.Do(t, false, "put", local2, base+"/new/sub/g"), OK)
			// rename and delete
			want("rename", d.Do(t, false, "mv", f, base+"/g"), OK)
			want("stat renamed-away", d.Do(t, false, "stat", f), NotFound)
			if r := d.Do(t, false, "stat", base+"/g"); r.Outcome != OK || r.Size != int64(len(small)) {
				t.Fatalf("stat renamed: %+v", r)
			}
			want("delete", d.Do(t, false, "rm", base+"/g"), OK)
			want("read deleted", d.Do(t, false, "read", base+"/g", "0", "-1"), NotFound)
			// not found, exists, is a directory, not a directory
			want("stat missing", d.Do(t, false, "stat", base+"/missing"), NotFound)
			want("read missing", d.Do(t, false, "read", base+"/missing", "0", "-1"), NotFound)
			want("delete missing", d.Do(t, false, "rm", base+"/missing"), NotFound)
			want("rename missing", d.Do(t, false, "mv", base+"/missing", base+"/x"), NotFound)
			want("mkdir", d.Do(t, false, "mkdir", base+"/d"), OK)
			want("mkdir existing", d.Do(t, false, "mkdir", base+"/d"), Exists)
			want("mkdir without parent", d.Do(t, false, "mkdir", base+"/no/such"), NotFound)
			want("upload onto a directory", d.Do(t, false, "put", local2, base+"/d"), IsDir)
			want("file as directory", d.Do(t, false, "stat", base+"/new/sub/g/x"), Conflict)
			want("rmdir", d.Do(t, false, "rmdir", base+"/d"), OK)
			// permission denied, for another user
			want("create as root in private", d.Do(t, false, "put", local2, base+"/private/p"), OK)
			k.MustKaon("chmod", "600", base+"/new/sub/g")
			want("nobody reads a 0600 file", d.Do(t, true, "read", base+"/new/sub/g", "0", "-1"), Permission)
			want("nobody checksums a 0600 file", d.Do(t, true, "checksum", base+"/new/sub/g"), Permission)
			want("nobody stats below a 0700 dir", d.Do(t, true, "stat", base+"/private/p"), Permission)
			want("nobody lists a 0700 dir", d.Do(t, true, "ls", base+"/private"), Permission)
			want("nobody writes into a 0755 root dir", d.Do(t, true, "put", local2, base+"/nob"), Permission)
			want("nobody mkdirs in a 0755 root dir", d.Do(t, true, "mkdir", base+"/nobdir"), Permission)
			want("nobody deletes a root file", d.Do(t, true, "rm", base+"/new/sub/g"), Permission)
			want("nobody renames a root file", d.Do(t, true, "mv", base+"/new/sub/g", base+"/new/sub/h"), Permission)
			if r := d.Do(t, true, "stat", base+"/new/sub/g"); r.Outcome != OK || r.Size != int64(len(small)) {
				t.Fatalf("nobody stats a 0600 file in a 0755 dir: %+v", r)
			}
		})
	}
}

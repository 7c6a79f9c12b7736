// Package frontendtest is the front-end conformance suite: the same
// scenarios run over every protocol Kaon serves (HTTP/WebDAV, root://)
// against one server, and must end the same way — same bytes, same
// metadata, same class of error. A protocol joins through a Driver, the
// server through an Admin (what the scenarios set up as root).
//
// The scenarios run twice, unchanged: integration/frontends drives the
// real binary with the real clients (curl, the Python XRootD bindings)
// as root and as uid nobody; this package's own tests drive the
// in-process stack (internal/kaontest) with Go's net/http and Kaon's
// own XRootD client (internal/xrootd), so a change to a front end is checked in seconds,
// without the binary or the clients installed.
package frontendtest

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"hash/adler32"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
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

// Driver performs operations through one protocol, as root or as nobody
// (uid and gid 65534). The operations and their arguments:
//
//	put LOCAL PATH         upload the local file LOCAL as PATH, replacing
//	                       it, creating missing parents
//	write LOCAL PATH OFF   write the bytes of LOCAL at OFF of the existing
//	                       file PATH, in place (a PUT with Content-Range,
//	                       kXR_open_updt)
//	read PATH OFF LEN      LEN bytes from OFF (LEN -1: to the end)
//	stat PATH              Size, Dir
//	ls PATH                Names, sorted
//	mkdir PATH, mv FROM TO, rm PATH, rmdir PATH
//	checksum PATH          Sum (adler32)
type Driver interface {
	Name() string
	Do(t *testing.T, asNobody bool, op string, args ...string) Result
}

// Admin sets up what the scenarios need, as root, through the server's
// administration (the CLI, the admin API).
type Admin interface {
	Mkdir(t *testing.T, path string)
	Chmod(t *testing.T, path string, mode uint32)
	Chown(t *testing.T, path string, uid, gid uint32)
	Exists(t *testing.T, path string) bool
}

// HTTPOutcome maps the HTTP status of op; 405 and 409 depend on the
// method (RFC 4918: MKCOL on an existing resource is 405, a missing
// parent 409).
func HTTPOutcome(op string, code int) string {
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

// XRootDOutcome maps the server's kXR_* error code (0: success).
func XRootDOutcome(code int) string {
	switch code {
	case 0:
		return OK
	case 3011: // kXR_NotFound
		return NotFound
	case 3010: // kXR_NotAuthorized
		return Permission
	case 3018: // kXR_ItExists
		return Exists
	case 3016: // kXR_isDirectory
		return IsDir
	case 3005: // kXR_FSError: what xrootd answers for ENOTDIR and ENOTEMPTY
		return Conflict
	}
	return Other
}

// Propfind reads the PROPFIND answer (207) on p into r: the first
// response's size and type, the names of the others (sorted).
func Propfind(t *testing.T, p, body string, r *Result) {
	t.Helper()
	var ps struct {
		Responses []struct {
			Href       string    `xml:"href"`
			Length     int64     `xml:"propstat>prop>getcontentlength"`
			Collection *struct{} `xml:"propstat>prop>resourcetype>collection"`
		} `xml:"response"`
	}
	if err := xml.Unmarshal([]byte(body), &ps); err != nil || len(ps.Responses) == 0 {
		t.Fatalf("PROPFIND %s: %v\n%q", p, err, body)
	}
	r.Size, r.Dir = ps.Responses[0].Length, ps.Responses[0].Collection != nil
	for _, e := range ps.Responses[1:] {
		r.Names = append(r.Names, path.Base(strings.TrimSuffix(e.Href, "/")))
	}
	sort.Strings(r.Names)
}

// DigestSum is the adler32 value of an HTTP answer's Digest header.
func DigestSum(h http.Header) string {
	return strings.TrimPrefix(strings.TrimSpace(h.Get("Digest")), "adler32=")
}

// LocalDir is a temporary directory uid nobody can read (t.TempDir's
// parents are not), removed when the test ends.
func LocalDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kaon-conformance-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	return dir
}

// Conformance runs every scenario over every driver, each below
// /conf-<driver name>.
func Conformance(t *testing.T, a Admin, drivers []Driver) {
	ConformanceAs(t, a, drivers, "/conf-", nil)
}

// ConformanceAs runs every scenario over every driver, each below
// prefix<driver name>, whose tree belongs to owner (uid, gid) when the
// drivers' first identity is not root (grid credentials mapped to a
// local user); nil: root's.
func ConformanceAs(t *testing.T, a Admin, drivers []Driver, prefix string, owner *[2]uint32) {
	src := LocalDir(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 80000) // 1.25 MB
	data = append(data, "tail"...)
	small := []byte("replaced content")
	local, local2 := filepath.Join(src, "data"), filepath.Join(src, "small")
	os.WriteFile(local, data, 0o644)
	os.WriteFile(local2, small, 0o644)
	adler := fmt.Sprintf("%08x", adler32.Checksum(data))
	for _, d := range drivers {
		t.Run(d.Name(), func(t *testing.T) {
			base := prefix + d.Name()
			a.Mkdir(t, base)
			a.Mkdir(t, base+"/private")
			a.Chmod(t, base+"/private", 0o700)
			if owner != nil {
				a.Chown(t, base, owner[0], owner[1])
				a.Chown(t, base+"/private", owner[0], owner[1])
			}
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
			a.Chmod(t, base+"/new/sub/g", 0o600)
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

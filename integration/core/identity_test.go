package core

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// asNobody runs a command with uid/gid 65534, as another local user would.
func asNobody(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestLocalIdentity checks the namespace endpoint knows which local user
// a loopback client is (the owner of its socket) and applies mode bits.
func TestLocalIdentity(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test needs root to act as another user")
	}
	k := harness.Up(t)
	local, data := publicFile(t, 5000)
	k.MustKaon("mkdir", "/pub")
	k.MustKaon("chmod", "1777", "/pub")
	k.MustKaon("mkdir", "/private")
	k.MustKaon("chmod", "700", "/private")
	mustPut(t, k, local, "/private/secret")
	u := k.EP.HTTP
	if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", "-T", local, u+"/denied"); out != "403" {
		t.Fatalf("nobody writing to /: %s", out)
	}
	if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", u+"/private/secret"); out != "403" {
		t.Fatalf("nobody reading a 0700 directory: %s", out)
	}
	// File mode bits guard the data itself, over both protocols.
	mustPut(t, k, local, "/pub/root-only")
	k.MustKaon("chmod", "600", "/pub/root-only")
	mustPut(t, k, local, "/pub/readable")
	for _, h := range []string{"", "Want-Digest: adler32"} {
		if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", "-H", h, u+"/pub/root-only"); out != "403" {
			t.Fatalf("nobody reading a 0600 file (%q): %s", h, out)
		}
	}
	if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", u+"/pub/readable"); out != "200" {
		t.Fatalf("nobody reading a 0644 file: %s", out)
	}
	xhost := strings.TrimPrefix(k.EP.XRootD, "root://")
	if out, err := asNobody(t, "xrdcp", "-f", "root://"+xhost+"//pub/root-only", "/dev/null"); err == nil || !strings.Contains(strings.ToLower(out), "permission denied") {
		t.Fatalf("nobody xrdcp of a 0600 file: %v %s", err, out)
	}
	if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", "-T", local, u+"/pub/mine"); out != "201" {
		t.Fatalf("nobody writing to a 1777 directory: %s", out)
	}
	mustGetEqual(t, k, "/pub/mine", data)
	if out := k.MustKaon("ls", "-l", "/pub"); !strings.Contains(out, "65534  65534") {
		t.Fatalf("file not owned by its writer:\n%s", out)
	}
	if out, err := asNobody(t, harness.Binary(t), "chown", "--url", u, "0:0", "/pub/mine"); err == nil || !strings.Contains(out, "only root") {
		t.Fatalf("nobody chown: %v %s", err, out)
	}
	// root:// authenticates the same way: the socket owner, not the login name.
	host := strings.TrimPrefix(k.EP.XRootD, "root://")
	if out, err := asNobody(t, "xrdfs", host, "mkdir", "/xrd-denied"); err == nil || !strings.Contains(out, "permission denied") {
		t.Fatalf("nobody mkdir over root://: %v %s", err, out)
	}
	if out, err := asNobody(t, "xrdfs", host, "mkdir", "/pub/xrd-ok"); err != nil {
		t.Fatalf("nobody mkdir in a 1777 directory over root://: %v %s", err, out)
	}
	if out, err := exec.Command("xrdfs", host, "mkdir", "/xrd-root").CombinedOutput(); err != nil {
		t.Fatalf("root mkdir over root://: %v %s", err, out)
	}
	k.MustKaon("chown", "1000:1000", "/pub/mine")
	if out := k.MustKaon("stat", "/pub/mine"); !strings.Contains(out, "Uid: 1000  Gid: 1000") {
		t.Fatalf("chown by root:\n%s", out)
	}
}

// TestChecksumFollowsReadPermission: checksums describe the content, so a
// user who may not read a file does not get them in any protocol.
func TestChecksumFollowsReadPermission(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test needs root to act as another user")
	}
	k := harness.Up(t)
	local, data := randomFile(t, 7000)
	os.Chmod(filepath.Dir(local), 0o755)
	os.Chmod(local, 0o644)
	adler := sumsOf(data).adler
	k.MustKaon("mkdir", "/pub")
	mustPut(t, k, local, "/pub/secret")
	k.MustKaon("chmod", "600", "/pub/secret")
	u := k.EP.HTTP
	out, _ := asNobody(t, "curl", "-sS", "-I", "-H", "Want-Digest: adler32", u+"/pub/secret")
	if strings.Contains(out, adler) || !strings.Contains(out, "403") {
		t.Fatalf("HEAD Want-Digest as nobody on a 0600 file:\n%s", out)
	}
	out, _ = asNobody(t, "curl", "-sS", "-X", "PROPFIND", "-H", "Depth: 1", u+"/pub")
	if strings.Contains(out, adler) || !strings.Contains(out, "/pub/secret") {
		t.Fatalf("PROPFIND as nobody shows the checksum of a 0600 file:\n%s", out)
	}
	for _, args := range [][]string{{"stat", "/pub/secret"}, {"ls", "-l", "/pub"}, {"file", "info", "/pub/secret"}} {
		out, _ = asNobody(t, harness.Binary(t), append(args, "--url", u)...)
		if strings.Contains(out, adler) {
			t.Fatalf("kaon %v as nobody shows the checksum of a 0600 file:\n%s", args, out)
		}
	}
	if out, err := asNobody(t, "xrdfs", strings.TrimPrefix(k.EP.XRootD, "root://"), "query", "checksum", "/pub/secret"); err == nil || strings.Contains(out, adler) {
		t.Fatalf("root:// checksum query as nobody: %v %s", err, out)
	}
	// The owner still gets them everywhere.
	if r := curl(t, "-I", "-H", "Want-Digest: adler32", u+"/pub/secret"); !strings.Contains(r.headers, adler) {
		t.Fatalf("HEAD Want-Digest as the owner:\n%s", r.headers)
	}
	if out := k.MustKaon("file", "info", "/pub/secret"); !strings.Contains(out, adler) {
		t.Fatalf("file info as the owner:\n%s", out)
	}
}

// TestACLsOverProtocols: a directory ACL lets another user write where the
// mode bits do not, and its !d keeps that user from deleting, over HTTP,
// root:// and the CLI alike; whoami says who the server sees.
func TestACLsOverProtocols(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test needs root to act as another user")
	}
	k := harness.Up(t)
	local, _ := publicFile(t, 100)
	u, xhost := k.EP.HTTP, strings.TrimPrefix(k.EP.XRootD, "root://")
	bin := harness.Binary(t)
	k.MustKaon("mkdir", "/proj")
	if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", "-T", local, u+"/proj/a"); out != "403" {
		t.Fatalf("nobody writing without an ACL: %s", out)
	}
	k.MustKaon("acl", "set", "/proj", "u:65534:rwx!d")
	if out := k.MustKaon("acl", "get", "/proj"); !strings.Contains(out, "sys.acl=u:65534:rwx!d") {
		t.Fatalf("acl get: %s", out)
	}
	if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", "-T", local, u+"/proj/a"); out != "201" {
		t.Fatalf("nobody writing with u:65534:rwx: %s", out)
	}
	if out, err := asNobody(t, "xrdcp", "-s", local, "root://"+xhost+"//proj/b"); err != nil {
		t.Fatalf("nobody xrdcp with u:65534:rwx: %v %s", err, out)
	}
	if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "DELETE", u+"/proj/a"); out != "403" {
		t.Fatalf("nobody DELETE under !d: %s", out)
	}
	if out, err := asNobody(t, "xrdfs", xhost, "rm", "/proj/b"); err == nil || !strings.Contains(strings.ToLower(out), "permission") {
		t.Fatalf("nobody xrdfs rm under !d: %v %s", err, out)
	}
	if out, err := asNobody(t, bin, "rm", "--url", u, "/proj/b"); err == nil || !strings.Contains(out, "denied") {
		t.Fatalf("nobody kaon rm under !d: %v %s", err, out)
	}
	if out, err := asNobody(t, bin, "acl", "set", "--url", u, "/proj", "z:rwx"); err == nil || !strings.Contains(out, "root-only") {
		t.Fatalf("nobody setting sys.acl: %v %s", err, out)
	}
	if out, err := asNobody(t, bin, "whoami", "--url", u); err != nil || !strings.Contains(out, "uid=65534") || !strings.Contains(out, "method=unix") {
		t.Fatalf("whoami as nobody: %v %s", err, out)
	}
	if out := k.MustKaon("whoami"); !strings.Contains(out, "uid=0 ") {
		t.Fatalf("whoami as root: %s", out)
	}
	k.MustKaon("acl", "rm", "/proj")
	if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", "-T", local, u+"/proj/c"); out != "403" {
		t.Fatalf("nobody writing after acl rm: %s", out)
	}
}

// TestAuditLog: every mutation and every refused request is one JSON line
// naming the principal, its method, the protocol, the operation, the path
// and the outcome; no capability appears in it.
func TestAuditLog(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test needs root to act as another user")
	}
	k := harness.Up(t)
	local, _ := randomFile(t, 1000)
	k.MustKaon("mkdir", "/aud")
	mustPut(t, k, local, "/aud/f")
	k.MustKaon("chmod", "600", "/aud/f")
	if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", k.EP.HTTP+"/aud/f"); out != "403" {
		t.Fatalf("nobody read: %s", out)
	}
	if out, err := exec.Command("xrdfs", strings.TrimPrefix(k.EP.XRootD, "root://"), "mv", "/aud/f", "/aud/g").CombinedOutput(); err != nil {
		t.Fatalf("xrdfs mv: %v %s", err, out)
	}
	loc := curl(t, k.EP.HTTP+"/aud/g").header("Location")
	b, err := os.ReadFile(filepath.Join(k.Dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	type rec struct{ User, Method, Protocol, Op, Path, Target, Result string }
	var recs []rec
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r rec
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("audit line is not JSON: %q", l)
		}
		recs = append(recs, r)
	}
	want := []rec{
		{"root", "unix", "http", "mkdir", "/aud", "", "ok"},
		{"root", "unix", "http", "write", "/aud/f", "", "ok"},
		{"0", "upload", "internal", "commit", "/aud/f", "", "ok"},
		{"root", "unix", "http", "chmod", "/aud/f", "", "ok"},
		{"nobody", "unix", "http", "read", "/aud/f", "", "permission denied"},
		{"root", "unix", "root", "rename", "/aud/f", "/aud/g", "ok"},
	}
	if len(recs) < len(want) {
		t.Fatalf("audit log has %d lines, want at least %d:\n%s", len(recs), len(want), b)
	}
	for i, w := range want {
		if recs[i] != w {
			t.Fatalf("audit line %d: %+v, want %+v\n%s", i, recs[i], w, b)
		}
	}
	capa, _ := url.Parse(loc)
	if c := capa.Query().Get("cap"); c == "" || strings.Contains(string(b), c[:20]) || strings.Contains(k.Logs(), c[:20]) {
		t.Fatal("a capability appears in the audit or server log (or none was issued)")
	}
}

package core

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestPathsLikeXRootD: HTTP normalizes paths as root:// does ("//" and
// "." components are dropped), and an upload creates its missing parent
// directories as XRootD's own HTTP front end and xrdcp do, with the
// permission checked on the nearest existing directory; a directory with
// sys.mkpath=off refuses that with 409 Conflict (RFC 4918), never 404.
func TestPathsLikeXRootD(t *testing.T) {
	k := harness.Up(t)
	u := k.EP.HTTP
	local, data := publicFile(t, 3000)
	k.MustKaon("mkdir", "/d")
	if r := curl(t, "--path-as-is", "-L", "-T", local, u+"//d//x"); r.code != 201 {
		t.Fatalf("PUT //d//x: %d %s", r.code, r.body)
	}
	mustGetEqual(t, k, "/d/x", data)
	if r := curl(t, "--path-as-is", "-L", u+"//d/./x"); r.code != 200 || string(r.body) != string(data) {
		t.Fatalf("GET //d/./x: %d", r.code)
	}
	if r := curl(t, "--path-as-is", "-X", "PROPFIND", "-H", "Depth: 1", u+"//d//"); r.code != 207 || !strings.Contains(string(r.body), "/d/x") {
		t.Fatalf("PROPFIND //d//: %d %s", r.code, r.body)
	}
	host := strings.TrimPrefix(u, "http://")
	cmd := exec.Command("gfal-ls", "http://"+host+"//d")
	cmd.Env = append(os.Environ(), "GFAL_PYTHONBIN=/usr/bin/python3")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "x") {
		t.Fatalf("gfal-ls http://host//d: %v %s", err, out)
	}
	if r := curl(t, "--path-as-is", "-L", "-T", local, u+"/d/../etc"); r.code != 400 {
		t.Fatalf("PUT with ..: %d", r.code)
	}

	// Missing parents are created by the upload, over both protocols.
	mustPut(t, k, local, "/new/sub/deeper/f")
	mustGetEqual(t, k, "/new/sub/deeper/f", data)
	if out := k.MustKaon("stat", "/new/sub"); !strings.Contains(out, "directory") {
		t.Fatalf("/new/sub after PUT:\n%s", out)
	}
	if out, err := exec.Command("xrdcp", "-s", local, k.EP.XRootD+"//xnew/a/b/f").CombinedOutput(); err != nil {
		t.Fatalf("xrdcp into missing parents: %v %s", err, out)
	}
	mustGetEqual(t, k, "/xnew/a/b/f", data)

	// Permission is that of the nearest existing directory.
	if os.Getuid() == 0 {
		k.MustKaon("mkdir", "/closed")
		if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", "-T", local, u+"/closed/a/b"); out != "403" {
			t.Fatalf("nobody PUT below a root-owned 0755 directory: %s", out)
		}
		if _, _, code := k.Kaon("stat", "/closed/a"); code == 0 {
			t.Fatal("a refused upload created a directory")
		}
	}

	// A site can switch implicit creation off below a directory.
	k.MustKaon("mkdir", "/strict")
	k.MustKaon("attr", "set", "/strict", "sys.mkpath=off")
	r := curl(t, "-L", "-T", local, u+"/strict/missing/f")
	if r.code != 409 || !strings.Contains(string(r.body), "sys.mkpath=off") {
		t.Fatalf("PUT below sys.mkpath=off: %d %s", r.code, r.body)
	}
	if out, err := exec.Command("xrdcp", "-s", local, k.EP.XRootD+"//strict/missing/f").CombinedOutput(); err == nil {
		t.Fatalf("xrdcp below sys.mkpath=off succeeded: %s", out)
	}
	if _, _, code := k.Kaon("stat", "/strict/missing"); code == 0 {
		t.Fatal("a directory was created below sys.mkpath=off")
	}
	mustPut(t, k, local, "/strict/f") // the directory itself still takes files
	if _, errs, code := k.Kaon("attr", "set", "/strict", "sys.mkpath=maybe"); code == 0 || !strings.Contains(errs, "on or off") {
		t.Fatalf("bad sys.mkpath value accepted: %s", errs)
	}
}

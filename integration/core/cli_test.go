package core

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestCLI drives the user and operator verbs of the kaon CLI.
func TestCLI(t *testing.T) {
	k := harness.Up(t)
	k.MustKaon("mkdir", "-p", "/u/a/b")
	if _, errs, code := k.Kaon("mkdir", "/u/a"); code == 0 || !strings.Contains(errs, "/u/a") || !strings.Contains(errs, "exists") {
		t.Fatalf("mkdir existing: %d %q", code, errs)
	}
	local, data := randomFile(t, 300000)
	k.MustKaon("cp", local, "kaon:/u/a/b/")
	name := filepath.Base(local)
	if out := k.MustKaon("ls", "/u/a/b"); strings.TrimSpace(out) != name {
		t.Fatalf("ls after cp: %q", out)
	}
	if out := k.MustKaon("ls", "-l", "/u/a/b"); !strings.Contains(out, "300000") || !strings.HasPrefix(strings.TrimSpace(out), "-rw-r--r--") {
		t.Fatalf("ls -l: %q", out)
	}
	back := filepath.Join(t.TempDir(), "back")
	k.MustKaon("cp", "kaon:/u/a/b/"+name, back)
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatal("cp round trip changed the bytes")
	}
	st := k.MustKaon("stat", "/u")
	if !strings.Contains(st, "Tree: 300000 bytes, 1 files, 2 directories") {
		t.Fatalf("stat /u:\n%s", st)
	}
	k.MustKaon("mv", "/u/a/b/"+name, "/u/moved")
	if st := k.MustKaon("stat", "/u/a"); !strings.Contains(st, "Tree: 0 bytes, 0 files, 1 directories") {
		t.Fatalf("accounting after mv:\n%s", st)
	}
	if _, errs, code := k.Kaon("mv", "/u/a", "/u/a/b/c"); code == 0 || !strings.Contains(errs, "own subtree") {
		t.Fatalf("mv into own subtree: %q", errs)
	}
	// attributes
	k.MustKaon("attr", "set", "/u", "user.project=lhcb")
	k.MustKaon("attr", "set", "/u", "sys.forced.layout=replica:3")
	if out := k.MustKaon("attr", "ls", "/u"); !strings.Contains(out, `user.project="lhcb"`) || !strings.Contains(out, `sys.forced.layout="replica:3"`) {
		t.Fatalf("attr ls: %q", out)
	}
	if out := k.MustKaon("attr", "get", "/u", "user.project"); strings.TrimSpace(out) != `user.project="lhcb"` {
		t.Fatalf("attr get: %q", out)
	}
	k.MustKaon("attr", "rm", "/u", "user.project")
	if _, errs, code := k.Kaon("attr", "get", "/u", "user.project"); code == 0 || !strings.Contains(errs, "user.project") {
		t.Fatalf("attr get removed: %q", errs)
	}
	if _, errs, code := k.Kaon("attr", "set", "/u", "bogus=1"); code == 0 || !strings.Contains(errs, "sys. or user.") {
		t.Fatalf("attr without namespace: %q", errs)
	}
	k.MustKaon("cp", local, "kaon:/u/r3")
	if info := k.MustKaon("file", "info", "/u/r3"); !strings.Contains(info, "Layout: replica:3") || strings.Count(info, "/fs/") != 3 {
		t.Fatalf("file info of replica:3:\n%s", info)
	}
	// New subdirectories inherit the layout policy.
	k.MustKaon("mkdir", "/u/sub")
	if out := k.MustKaon("attr", "get", "/u/sub", "sys.forced.layout"); !strings.Contains(out, "replica:3") {
		t.Fatalf("layout not inherited: %q", out)
	}
	// rm
	if _, errs, code := k.Kaon("rm", "/u"); code == 0 || !strings.Contains(errs, "not empty") {
		t.Fatalf("rm non-empty dir: %q", errs)
	}
	k.MustKaon("rm", "/u/moved")
	k.MustKaon("rm", "-r", "/u")
	if _, errs, code := k.Kaon("stat", "/u"); code == 0 || !strings.Contains(errs, "/u") || !strings.Contains(errs, "no such") {
		t.Fatalf("stat removed: %q", errs)
	}
	// operator views
	if out := k.MustKaon("space", "ls"); !strings.Contains(out, "default") || !strings.Contains(out, " 6 ") {
		t.Fatalf("space ls:\n%s", out)
	}
	fsls := k.MustKaon("fs", "ls")
	if strings.Count(fsls, "booted") != 6 || !strings.Contains(fsls, "default.0") || !strings.Contains(fsls, "ok") {
		t.Fatalf("fs ls:\n%s", fsls)
	}
	k.MustKaon("fs", "config", "2", "configstatus=drain")
	if out := k.MustKaon("fs", "ls"); !strings.Contains(out, "drain") {
		t.Fatalf("fs config drain not shown:\n%s", out)
	}
	if _, errs, code := k.Kaon("--bogus"); code == 0 || !strings.Contains(errs, "usage") {
		t.Fatalf("bad usage: %q", errs)
	}
}

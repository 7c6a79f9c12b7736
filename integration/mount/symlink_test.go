package mount_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestSymlinks: symbolic links made through the mount are the
// namespace's (kaon ls -l shows them), read back by readlink and lstat,
// followed by the kernel (into a linked directory too), renamed and
// removed as links; the front ends follow them server-side: real curl
// and xrdfs/xrdcp read a file through a link, a dangling link is 404 /
// kXR_NotFound, and a link never takes a caller somewhere it may not
// go (curl as nobody through a link into a root-only directory: 403).
func TestSymlinks(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/sl")
	up.MustKaon("chmod", "755", "/sl")
	m := newMount(t, up.EP.HTTP, "/sl", "")
	p := func(name string) string { return filepath.Join(m.mp, name) }

	if err := os.MkdirAll(p("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p("dir/data"), []byte("through the link\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for target, link := range map[string]string{"dir/data": "lf", "dir": "ld", "nowhere": "dang", "/sl/dir/data": "abs"} {
		if err := os.Symlink(target, p(link)); err != nil {
			t.Fatalf("ln -s %s %s: %v", target, link, err)
		}
	}
	if err := os.Symlink("x", p("lf")); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("symlink over an existing link: %v, want EEXIST", err)
	}
	if err := os.Symlink(strings.Repeat("x", 4097), p("long")); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Fatalf("symlink with a 4097-byte target: %v, want ENAMETOOLONG", err)
	}

	// readlink and lstat answer for the link, stat and open for its target.
	if tgt, err := os.Readlink(p("lf")); err != nil || tgt != "dir/data" {
		t.Fatalf("readlink lf: %q %v", tgt, err)
	}
	if st, err := os.Lstat(p("lf")); err != nil || st.Mode()&os.ModeSymlink == 0 || st.Size() != int64(len("dir/data")) {
		t.Fatalf("lstat lf: %v %v", st, err)
	}
	if b, err := os.ReadFile(p("lf")); err != nil || string(b) != "through the link\n" {
		t.Fatalf("read through lf: %q %v", b, err)
	}
	if b, err := os.ReadFile(p("ld/data")); err != nil || string(b) != "through the link\n" {
		t.Fatalf("read through the linked directory: %q %v", b, err)
	}
	if st, err := os.Stat(p("ld")); err != nil || !st.IsDir() {
		t.Fatalf("stat of the link to a directory: %v %v", st, err)
	}
	if _, err := os.ReadFile(p("dang")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("read of a dangling link: %v, want ENOENT", err)
	}
	// ls -l through the mount and kaon ls -l show the link and its target.
	if out, err := exec.Command("ls", "-l", m.mp).CombinedOutput(); err != nil || !strings.Contains(string(out), "lf -> dir/data") ||
		!strings.Contains(string(out), "lrwxrwxrwx") {
		t.Fatalf("ls -l of the mount: %v\n%s", err, out)
	}
	if out := up.MustKaon("ls", "-l", "/sl"); !strings.Contains(out, "lrwxrwxrwx") || !strings.Contains(out, "ld -> dir") {
		t.Fatalf("kaon ls -l /sl:\n%s", out)
	}

	// rename moves the link, not its target; rename over a link replaces it.
	if err := os.Rename(p("lf"), p("dir/lf2")); err != nil {
		t.Fatal(err)
	}
	if tgt, err := os.Readlink(p("dir/lf2")); err != nil || tgt != "dir/data" {
		t.Fatalf("renamed link: %q %v", tgt, err)
	}
	if _, err := os.Stat(p("dir/data")); err != nil {
		t.Fatalf("the target after renaming its link: %v", err)
	}
	if err := os.WriteFile(p("plain"), []byte("p"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p("plain"), p("dir/lf2")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(p("dir/lf2")); err != nil || st.Mode()&os.ModeSymlink != 0 || st.Size() != 1 {
		t.Fatalf("a file renamed over a link: %v %v", st, err)
	}

	// rm removes the link only.
	if err := os.Remove(p("ld")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(p("ld")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("lstat after rm of the link: %v", err)
	}
	if _, err := os.Stat(p("dir/data")); err != nil {
		t.Fatalf("rm of a link to a directory touched the directory: %v", err)
	}

	// kaon ln -s makes one the mount sees.
	up.MustKaon("ln", "-s", "dir", "/sl/ld2")
	if b, err := os.ReadFile(p("ld2/data")); err != nil || string(b) != "through the link\n" {
		t.Fatalf("read through a link made by kaon ln -s: %q %v", b, err)
	}

	// curl: GET through a link serves the target; a dangling one is 404.
	curl := func(args ...string) (string, string) {
		t.Helper()
		out, _ := exec.Command("curl", append([]string{"-sS", "-L", "-w", "\n%{http_code}"}, args...)...).CombinedOutput()
		s := string(out)
		i := strings.LastIndexByte(s, '\n')
		return s[:i], s[i+1:]
	}
	if body, code := curl(up.EP.HTTP + "/sl/abs"); code != "200" || body != "through the link\n" {
		t.Fatalf("curl GET of a link: %s %q", code, body)
	}
	if body, code := curl(up.EP.HTTP + "/sl/ld2/data"); code != "200" || body != "through the link\n" {
		t.Fatalf("curl GET through a linked directory: %s %q", code, body)
	}
	if body, code := curl(up.EP.HTTP + "/sl/dang"); code != "404" || !strings.Contains(body, "/sl/dang") {
		t.Fatalf("curl GET of a dangling link: %s %q, want 404 naming the link", code, body)
	}
	if body, code := curl("-X", "PROPFIND", "-H", "Depth: 1", up.EP.HTTP+"/sl/"); code != "207" ||
		!strings.Contains(body, "<D:href>/sl/abs</D:href>") || !strings.Contains(body, "<K:symlink-target>nowhere</K:symlink-target>") {
		t.Fatalf("PROPFIND of /sl: %s\n%s", code, body)
	}
	up.MustKaon("ln", "-s", "loop", "/sl/loop")
	if body, code := curl(up.EP.HTTP + "/sl/loop"); code != "508" {
		t.Fatalf("curl GET of a link loop: %s %q, want 508", code, body)
	}

	// A link into a root-only directory leads nobody there.
	up.MustKaon("mkdir", "/private")
	up.MustKaon("chmod", "700", "/private")
	src := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(src, []byte("secret\n"), 0o644)
	up.MustKaon("cp", src, "kaon:/private/secret")
	if err := os.Symlink("/private/secret", p("peek")); err != nil {
		t.Fatal(err)
	}
	nobody := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr, cmd.Dir = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}, "/"
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, _ := nobody("curl", "-sS", "-L", "-w", "\n%{http_code}", up.EP.HTTP+"/sl/peek"); !strings.HasSuffix(out, "\n403") || strings.Contains(out, "secret\n") {
		t.Fatalf("nobody's curl through a link into /private: %q, want 403", out)
	}

	// root://: xrdfs stat and xrdcp follow a link; ls -l lists what it leads to.
	xrd := up.EP.XRootD
	if out, err := exec.Command("xrdfs", xrd, "stat", "/sl/abs").CombinedOutput(); err != nil || !strings.Contains(string(out), "Size:   17") {
		t.Fatalf("xrdfs stat of a link: %v\n%s", err, out)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("xrdcp", "-s", xrd+"//sl/ld2/data", dst).CombinedOutput(); err != nil {
		t.Fatalf("xrdcp through a linked directory: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(dst); string(b) != "through the link\n" {
		t.Fatalf("xrdcp through a link copied %q", b)
	}
	if out, err := exec.Command("xrdfs", xrd, "stat", "/sl/dang").CombinedOutput(); err == nil || !strings.Contains(string(out), "/sl/dang") {
		t.Fatalf("xrdfs stat of a dangling link: %v\n%s", err, out)
	}
	if out, err := exec.Command("xrdfs", xrd, "ls", "-l", "/sl/ld2").CombinedOutput(); err != nil || !strings.Contains(string(out), "/sl/ld2/data") {
		t.Fatalf("xrdfs ls -l through a linked directory: %v\n%s", err, out)
	}
	if out, err := exec.Command("xrdfs", xrd, "ls", "-l", "/sl").CombinedOutput(); err != nil || !strings.Contains(string(out), "dr") ||
		!dirLine(string(out), "/sl/ld2") {
		t.Fatalf("xrdfs ls -l /sl: %v\n%s", err, out)
	}
}

// dirLine says whether a line of out ends with name and starts with
// d (a directory, as a link to one is listed).
func dirLine(out, name string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasSuffix(strings.TrimSpace(l), " "+name) && strings.HasPrefix(l, "d") {
			return true
		}
	}
	return false
}

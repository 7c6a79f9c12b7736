// Package webview tests the web view in a real browser: headless
// Chromium, driven by chromedriver, against `kaon up`; what the page did
// is checked with curl.
package webview

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

func curl(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command("curl", append([]string{"-sS", "-o", "-", "-w", "\n%{http_code}"}, args...)...).Output()
	if err != nil {
		t.Fatalf("curl %v: %v", args, err)
	}
	s := string(out)
	i := strings.LastIndex(s, "\n")
	code := 0
	for _, c := range s[i+1:] {
		code = code*10 + int(c-'0')
	}
	return s[:i], code
}

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

func TestBrowserBrowsesUploadsMakesAndDeletes(t *testing.T) {
	d := startDriver(t) // skips without chromium
	up := harness.Up(t)
	base := up.EP.HTTP
	src := filepath.Join(t.TempDir(), "hello.txt")
	if err := os.WriteFile(src, []byte("hello from curl\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, code := curl(t, "-L", "-T", src, base+"/web/hello.txt"); code != 201 {
		t.Fatalf("curl upload: %d", code)
	}

	// Browse: the directory's page lists the file with its size and checksum.
	d.open(base + "/web/")
	if got := d.title(); !strings.Contains(got, "/web") {
		t.Fatalf("page title %q, want the directory's path", got)
	}
	listing := d.waitText("#listing", "hello.txt", "the directory page")
	for _, want := range []string{"hello.txt", "16 B", "adler32:"} {
		if !strings.Contains(listing, want) {
			t.Errorf("the listing lacks %q:\n%s", want, listing)
		}
	}

	// mkdir through the page; curl sees the directory.
	d.typeInto("#mkdir-name", "made-by-chromium")
	d.click("#mkdir-button")
	d.waitText("#message", "/web/made-by-chromium created", "mkdir through the page")
	if body, _ := curl(t, base+"/web/"); !strings.Contains(body, `href="/web/made-by-chromium/"`) {
		t.Errorf("curl's listing after mkdir through the page:\n%s", body)
	}

	// Upload through the page; curl reads the file back.
	local := filepath.Join(t.TempDir(), "from-browser.dat")
	content := bytes.Repeat([]byte("kaon web view upload\n"), 5000)
	if err := os.WriteFile(local, content, 0o644); err != nil {
		t.Fatal(err)
	}
	d.typeInto("#file", local)
	d.click("#upload-button")
	d.waitText("#message", "1 file(s) uploaded to /web", "upload through the page")
	if body, code := curl(t, "-L", base+"/web/from-browser.dat"); code != 200 || body != string(content) {
		t.Errorf("curl GET of the file uploaded through the page: %d, %d bytes (want %d)", code, len(body), len(content))
	}

	// Delete through the page; curl finds nothing.
	d.click(`button[title="delete hello.txt"]`)
	d.waitText("#message", "/web/hello.txt deleted", "delete through the page")
	if _, code := curl(t, "-L", base+"/web/hello.txt"); code != 404 {
		t.Errorf("curl GET of the file deleted through the page: %d, want 404", code)
	}

	// The page after the three actions, as a PNG.
	png := d.screenshot()
	if len(png) < 1000 || !bytes.HasPrefix(png, pngMagic) {
		t.Fatalf("screenshot of the directory page: %d bytes, not a PNG", len(png))
	}

	// A refusal for the status page: another local user may not list
	// root's 0700 directory.
	up.MustKaon("mkdir", "/locked")
	up.MustKaon("chmod", "700", "/locked")
	nobody := exec.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", base+"/locked/")
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := nobody.Output(); err != nil || string(out) != "403" {
		t.Fatalf("curl as nobody GET /locked/: %s %v, want 403", out, err)
	}

	// The admin's status page (root, as kaon up's unix authentication
	// sees this browser): filesystems and nodes, the refusal, reloading
	// itself.
	d.open(base + "/?status")
	fs := d.waitText("#filesystems", "booted", "the status page")
	if ref := d.waitText("#refusals", "/locked", "the refusal on the status page"); !strings.Contains(ref, "nobody") {
		t.Errorf("the refusal does not name who was refused:\n%s", ref)
	}
	if !strings.Contains(fs, "booted") || !strings.Contains(fs, "%") {
		t.Errorf("the status page's filesystems:\n%s", fs)
	}
	if src := d.source(); !strings.Contains(src, `http-equiv="refresh"`) {
		t.Errorf("the status page does not reload itself")
	}

	// Chromium's own --screenshot of the status page.
	shot := filepath.Join(t.TempDir(), "status.png")
	cmd := exec.Command(d.browser, append(chromeArgs(t.TempDir()), "--screenshot="+shot, base+"/?status")...)
	done := make(chan error, 1)
	go func() { out, err := cmd.CombinedOutput(); _ = out; done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chromium --screenshot: %v", err)
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("chromium --screenshot did not finish within 60s")
	}
	b, err := os.ReadFile(shot)
	if err != nil || len(b) < 1000 || !bytes.HasPrefix(b, pngMagic) {
		t.Fatalf("chromium --screenshot of the status page: %d bytes (%v), not a PNG", len(b), err)
	}
}

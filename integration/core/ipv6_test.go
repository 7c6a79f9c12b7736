package core

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestIPv6Loopback: kaon up on [::1] names bracketed URLs in
// endpoints.json and serves curl, the CLI, xrdcp both ways and xrdfs there;
// the namespace's root:// redirects to the storage server carry the
// bracketed address XRootD clients build a URL from.
func TestIPv6Loopback(t *testing.T) {
	k := harness.Up(t, "--http", "[::1]:0", "--xrootd", "[::1]:0")
	for what, u := range map[string]string{"http": k.EP.HTTP, "xrootd": k.EP.XRootD} {
		if !strings.Contains(u, "://[::1]:") {
			t.Fatalf("endpoints.json %s: %q, want a URL on [::1]", what, u)
		}
	}
	local, data := randomFile(t, 1<<20+5)
	if r := curl(t, "-g", "--max-time", "60", "-L", "-T", local, k.EP.HTTP+"/curl"); r.code != 201 {
		t.Fatalf("curl PUT on [::1]: %d %s %s", r.code, r.body, r.stderr)
	}
	if r := curl(t, "-g", "--max-time", "60", "-L", k.EP.HTTP+"/curl"); r.code != 200 || !bytes.Equal(r.body, data) {
		t.Fatalf("curl GET on [::1]: %d, %d bytes (want %d) %s", r.code, len(r.body), len(data), r.stderr)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("%s %v did not finish within 2 minutes", name, args)
		}
		if err != nil {
			t.Fatalf("%s %v on [::1]: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	run("xrdcp", "-s", "-f", local, k.EP.XRootD+"//xrd")
	back := filepath.Join(t.TempDir(), "back")
	run("xrdcp", "-s", "-f", k.EP.XRootD+"//curl", back)
	if b, _ := os.ReadFile(back); !bytes.Equal(b, data) {
		t.Fatalf("xrdcp from [::1]: %d bytes, want %d", len(b), len(data))
	}
	if out := run("xrdfs", strings.TrimPrefix(k.EP.XRootD, "root://"), "ls", "/"); !strings.Contains(out, "/xrd") || !strings.Contains(out, "/curl") {
		t.Fatalf("xrdfs ls on [::1]: %q", out)
	}
	if out := k.MustKaon("ls", "/"); !strings.Contains(out, "xrd") {
		t.Fatalf("kaon ls with KAON_URL on [::1]: %q", out)
	}
}

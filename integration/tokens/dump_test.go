package tokens

import (
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestNSDump: `kaon ns dump --path P` lists every file below P, one path
// per line (version folders left out), over the admin API; the same over
// HTTP with curl; refused to a non-root local user and for a missing
// path with its name.
func TestNSDump(t *testing.T) {
	k := harness.Up(t)
	k.MustKaon("mkdir", "-p", "/rucio/a/b")
	k.MustKaon("mkdir", "-p", "/rucio/c")
	k.MustKaon("mkdir", "/elsewhere")
	for _, p := range []string{"/rucio/top", "/rucio/a/b/deep", "/rucio/c/x", "/elsewhere/no"} {
		mustRun(t, nil, "curl", "-sSf", "-L", "-T", "/etc/hostname", k.EP.HTTP+p)
	}
	k.MustKaon("attr", "set", "/rucio/c", "sys.versioning=2")
	mustRun(t, nil, "curl", "-sSf", "-L", "-T", "/etc/hostname", k.EP.HTTP+"/rucio/c/x") // one version kept: not listed
	want := "/rucio/top\n/rucio/a/b/deep\n/rucio/c/x\n"
	if out := k.MustKaon("ns", "dump", "--path", "/rucio"); out != want {
		t.Fatalf("kaon ns dump --path /rucio:\n%s\nwant:\n%s", out, want)
	}
	if out := mustRun(t, nil, "curl", "-sSf", k.EP.HTTP+"/api/v1/ns/dump?path=/rucio"); out != want {
		t.Fatalf("GET /api/v1/ns/dump?path=/rucio:\n%s", out)
	}
	if out, errs, code := kaonCLI(t, k, nil, 65534, "ns", "dump", "--path", "/rucio"); code == 0 || out != "" || !strings.Contains(errs, "root only") {
		t.Fatalf("ns dump by a non-root user: exit %d, %q %q", code, out, errs)
	}
	if _, errs, code := k.Kaon("ns", "dump", "--path", "/missing"); code == 0 || !strings.Contains(errs, "/missing") {
		t.Fatalf("ns dump of a missing path: exit %d %q", code, errs)
	}
}

package tpc

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// httpsURL is the https:// namespace URL of a `kaon up --tls`.
func httpsURL(t *testing.T, dir string) string {
	t.Helper()
	var ep struct{ HTTPS string }
	b, err := os.ReadFile(filepath.Join(dir, "endpoints.json"))
	if err != nil || json.Unmarshal(b, &ep) != nil || ep.HTTPS == "" {
		t.Fatalf("endpoints.json of kaon up --tls in %s: %v %s", dir, err, b)
	}
	return ep.HTTPS
}

// TestHTTPTPCOverTLS: two --tls instances sharing a site CA (the second
// uses the first's --tls-dir) copy over https with curl -X COPY, pull and
// push: the storage servers' outbound https trusts --tls-ca-dir besides
// the system's CAs. An instance with a CA of its own refuses the first's
// certificate and says so.
func TestHTTPTPCOverTLS(t *testing.T) {
	a := up(t, "--tls")
	b := up(t, "--tls", "--tls-dir", filepath.Join(a.Dir, "tls"))
	ha, hb := httpsURL(t, a.Dir), httpsURL(t, b.Dir)
	ca := filepath.Join(a.Dir, "tls", "ca.pem")
	local, data, sum := randomFile(t, 8<<20+4321)
	mustRun(t, "upload over https", time.Minute, "curl", "-sS", "-f", "-L", "--cacert", ca, "-T", local, ha+"/d/src.bin")
	for _, tc := range []struct{ mode, target string }{
		{"pull", hb + "/e/pulled.bin"},
		{"push", hb + "/e/pushed.bin"},
	} {
		args := []string{"-sS", "-L", "--cacert", ca, "-X", "COPY", "-H", "TransferHeaderAuthorization: " + secret}
		if tc.mode == "pull" {
			args = append(args, "-H", "Source: "+ha+"/d/src.bin", tc.target)
		} else {
			args = append(args, "-H", "Destination: "+tc.target, ha+"/d/src.bin")
		}
		out := mustRun(t, "curl COPY over https "+tc.mode, 2*time.Minute, "curl", args...)
		if lastLine(out) != "success: Created" {
			t.Fatalf("%s over https: last line %q, want success: Created\n%s", tc.mode, lastLine(out), out)
		}
		got := filepath.Join(t.TempDir(), "got")
		mustRun(t, "download "+tc.target, time.Minute, "curl", "-sS", "-f", "-L", "--cacert", ca, "-o", got, tc.target)
		if b, _ := os.ReadFile(got); !bytes.Equal(b, data) {
			t.Fatalf("%s over https: %d bytes arrived, differing from the %d sent", tc.mode, len(b), len(data))
		}
		if s := adlerOf(t, strings.Replace(tc.target, hb, b.EP.HTTP, 1)); s != sum {
			t.Fatalf("%s over https: adler32 %s at the destination, source %s", tc.mode, s, sum)
		}
	}
	// Another CA: the copy fails, naming the certificate problem.
	c := up(t, "--tls")
	hc, cca := httpsURL(t, c.Dir), filepath.Join(c.Dir, "tls", "ca.pem")
	out, _ := run(t, "COPY from a server of an unknown CA", 2*time.Minute, "curl", "-sS", "-L", "--cacert", cca, "-X", "COPY",
		"-H", "Source: "+ha+"/d/src.bin", hc+"/e/untrusted.bin")
	if !strings.HasPrefix(lastLine(out), "failure:") || !strings.Contains(out, "certificate") {
		t.Fatalf("COPY from a server whose CA is not trusted: %s", out)
	}
	for _, p := range []interface{ Logs() string }{a, b, c} {
		if strings.Contains(p.Logs(), "tpc-secret") {
			t.Fatal("a TransferHeader value appears in a server log")
		}
	}
}

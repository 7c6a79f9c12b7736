package core

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestConfigFile: a TOML file sets the same settings as the flags (flags
// override it), for every role; an unknown setting is refused by name.
func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(t.TempDir(), "kaon.toml")
	os.WriteFile(conf, []byte(`
http = "127.0.0.1:0"
xrootd = ""
fs = 3
cap-ttl = "2m"
recycle-lifetime = "1h"
stream-memory = 64
audit-log = ""
v = true
`), 0o644)
	k := harness.Start(t, dir, "up", "--config", conf, "--data", dir, "--xrootd", "127.0.0.1:0")
	rows := strings.Count(k.MustKaon("fs", "ls"), "booted")
	if rows != 3 {
		t.Fatalf("fs = 3 in the config file: %d filesystems\n%s", rows, k.MustKaon("fs", "ls"))
	}
	if k.EP.XRootD == "" {
		t.Fatal("--xrootd on the command line did not override the file")
	}
	if _, err := os.Stat(filepath.Join(dir, "audit.log")); !os.IsNotExist(err) {
		t.Fatal(`audit-log = "" did not turn the audit log off`)
	}
	// One access log line per request, naming the principal.
	if !strings.Contains(k.Logs(), "msg=http method=GET path=/api/v1/fs/ls status=200") || !strings.Contains(k.Logs(), "principal=root/unix") {
		t.Fatalf("no access log line for the fs ls request:\n%s", k.Logs())
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(bad, []byte("http = \"127.0.0.1:0\"\nno-such-setting = 1\n"), 0o644)
	for _, role := range []string{"up", "mgm", "fst"} {
		out, err := exec.Command(harness.Binary(t), role, "--config", bad).CombinedOutput()
		if err == nil || !strings.Contains(string(out), `"no-such-setting" is not a setting of kaon `+role) {
			t.Fatalf("kaon %s with an unknown setting: %v %s", role, err, out)
		}
	}
}

package ops

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestDebug: `kaon debug error --role mgm` silences the namespace
// server's access log at once and `kaon debug info` brings it back;
// `kaon debug debug --role fst` reaches the storage server with its next
// heartbeat; bad levels and roles are refused.
func TestDebug(t *testing.T) {
	k := harness.Up(t)
	get := func(path string) {
		t.Helper()
		exec.Command("curl", "-s", "-o", "/dev/null", k.EP.HTTP+path).Run()
	}
	if out := k.MustKaon("debug", "error", "--role", "mgm"); !strings.Contains(out, "namespace server ERROR") {
		t.Fatalf("debug error --role mgm: %s", out)
	}
	get("/silenced")
	if out := k.MustKaon("debug", "info"); !strings.Contains(out, "namespace server INFO, storage servers INFO") {
		t.Fatalf("debug info: %s", out)
	}
	get("/logged")
	harness.WaitFor(t, 10*time.Second, "the access log line of /logged", func() bool { return strings.Contains(k.Logs(), "path=/logged") })
	if strings.Contains(k.Logs(), "path=/silenced") {
		t.Errorf("a request at level error was access-logged")
	}
	k.MustKaon("debug", "debug", "--role", "fst")
	harness.WaitFor(t, 10*time.Second, "the storage server at level debug", func() bool {
		return strings.Contains(k.Logs(), `level=INFO msg="log level set by the namespace server (kaon debug)" level=DEBUG`)
	})
	for _, bad := range [][]string{{"debug", "loud"}, {"debug", "info", "--role", "nosuch"}} {
		if _, errs, code := k.Kaon(bad...); code != 1 || !strings.Contains(errs, "unknown") {
			t.Errorf("kaon %v: %d %s", bad, code, errs)
		}
	}
}

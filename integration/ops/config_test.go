package ops

import (
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestConfigSaveLoad: `kaon config save NAME` keeps the runtime settings
// (a filesystem's configstatus, a space, a group's balancer, an access
// rule, a quota) as versions of NAME that survive a restart; `kaon config
// load NAME --version 1` brings back what was saved after they changed.
func TestConfigSaveLoad(t *testing.T) {
	k := harness.Up(t)
	k.MustKaon("mkdir", "/q")
	k.MustKaon("fs", "config", "1", "configstatus=ro")
	k.MustKaon("space", "define", "tape")
	k.MustKaon("group", "set", "default.0", "balancer=on")
	k.MustKaon("access", "ban", "--user", "4444")
	k.MustKaon("quota", "set", "--path", "/q", "-u", "1001", "--bytes", "1M", "--files", "10")
	if out := k.MustKaon("config", "save", "base"); !strings.Contains(out, "saved base version 1: 1 spaces, 1 groups, 6 filesystems, 1 access rules, 1 quotas") {
		t.Fatalf("config save:\n%s", out)
	}

	k.MustKaon("fs", "config", "1", "configstatus=rw")
	k.MustKaon("group", "set", "default.0", "balancer=off")
	k.MustKaon("access", "unban", "--user", "4444")
	k.MustKaon("access", "ban", "--host", "192.0.2.1")
	k.MustKaon("quota", "rm", "--path", "/q", "-u", "1001")
	k.MustKaon("quota", "set", "--path", "/", "-g", "7", "--bytes", "5G")
	if out := k.MustKaon("config", "save", "base"); !strings.Contains(out, "version 2") {
		t.Fatalf("second config save:\n%s", out)
	}

	k.Restart()
	if out := k.MustKaon("config", "ls"); !strings.Contains(out, "base  1 ") || !strings.Contains(out, "base  2 ") {
		t.Fatalf("config ls after a restart:\n%s", out)
	}
	if out := k.MustKaon("config", "load", "base", "--version", "1"); !strings.Contains(out, "loaded base version 1") {
		t.Fatalf("config load:\n%s", out)
	}
	if fs := k.MustKaon("fs", "ls"); !strings.Contains(strings.Split(fs, "\n")[1], " ro ") {
		t.Errorf("fs 1 after load (want ro):\n%s", fs)
	}
	if g := k.MustKaon("group", "ls"); len(strings.Fields(strings.Split(g, "\n")[1])) < 7 || strings.Fields(strings.Split(g, "\n")[1])[6] != "on" {
		t.Errorf("group ls after load (want the balancer on):\n%s", g)
	}
	if a := k.MustKaon("access", "ls"); !strings.Contains(a, "user 4444") || strings.Contains(a, "192.0.2.1") {
		t.Errorf("access ls after load (want the ban of 4444 alone):\n%s", a)
	}
	q := k.MustKaon("quota", "ls")
	if !strings.Contains(q, "/q    user  1001") || strings.Contains(q, "group") {
		t.Errorf("quota ls after load (want user 1001's on /q alone):\n%s", q)
	}
	if _, errs, code := k.Kaon("config", "load", "nosuch"); code != 1 || !strings.Contains(errs, "nosuch: no such saved configuration") {
		t.Errorf("config load of an unknown name: %d %s", code, errs)
	}
}

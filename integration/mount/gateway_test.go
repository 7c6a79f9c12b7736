package mount_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kaon-storage/kaon/integration/fusetest"
	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/auth/gateway"
	"golang.org/x/sys/unix"
)

// gatewayKey writes a new random gateway key file (0600) in dir.
func gatewayKey(t *testing.T, dir, name string) (path, secret string) {
	t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	secret = hex.EncodeToString(b)
	path = filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, secret
}

// TestGatewayIdentity: on a host the instance trusts as a gateway (its
// key given to the namespace server with --gateway-key), a mount with
// -o gateway=KEY acts for each caller as the caller's uid and groups,
// asserted with the key: two non-root users with no token each own what
// they create and are refused the other's private file, supplementary
// groups count, root is squashed to nobody. The server has no unix
// method, so without the assertion the callers would be refused. A
// client sending the header without the key is refused with the reason;
// a mount with a key the server does not trust does not start and says
// why. The key appears in no log.
func TestGatewayIdentity(t *testing.T) {
	d := fusetest.TempDir(t)
	key, secret := gatewayKey(t, d, "gateway.key")
	wrong, wrongSecret := gatewayKey(t, d, "wrong.key")
	up := harness.Up(t, "--auth", "gateway,token", "--gateway-key", key)
	up.MustKaon("mkdir", "/gw")
	up.MustKaon("chmod", "777", "/gw")
	m := newMount(t, up.EP.HTTP, "/gw", "", "-o", "_netdev,gateway="+key)

	as := func(uid uint32, groups []uint32, script string) (string, int) {
		t.Helper()
		return fusetest.AsUser(t, uid, uid, groups, m.mp, script)
	}
	if out, code := as(1000, []uint32{1000, 3000}, "echo mine > a && chmod 600 a && echo shared > s && chgrp 3000 s && chmod 640 s"); code != 0 {
		t.Fatalf("uid 1000 creating a and s through the gateway mount: exit %d: %s", code, out)
	}
	if out, code := as(1001, nil, "echo theirs > b && chmod 600 b"); code != 0 {
		t.Fatalf("uid 1001 creating b through the gateway mount: exit %d: %s", code, out)
	}
	if out, code := as(0, nil, "echo root > r"); code != 0 {
		t.Fatalf("root creating r through the gateway mount: exit %d: %s", code, out)
	}
	// What the namespace recorded, not what the mount shows.
	for name, want := range map[string]string{"a": "Uid: 1000 ", "b": "Uid: 1001 ", "s": "Gid: 3000", "r": "Uid: 65534 "} {
		if out := up.MustKaon("stat", "/gw/"+name); !strings.Contains(out, want) {
			t.Errorf("kaon stat /gw/%s: want %q in\n%s", name, want, out)
		}
	}
	for _, c := range []struct {
		uid    uint32
		groups []uint32
		file   string
		want   string // "" for a refusal
	}{
		{1000, nil, "a", "mine"},
		{1001, nil, "b", "theirs"},
		{1001, nil, "a", ""},
		{1000, nil, "b", ""},
		{1001, []uint32{3000}, "s", "shared"}, // a member of the file's group
		{1002, nil, "s", ""},
		{0, nil, "a", ""}, // root is nobody
	} {
		out, code := as(c.uid, c.groups, "cat "+c.file)
		switch {
		case c.want != "" && (code != 0 || strings.TrimSpace(out) != c.want):
			t.Errorf("uid %d (groups %v) reading %s: exit %d %q, want %q", c.uid, c.groups, c.file, code, out, c.want)
		case c.want == "" && (code == 0 || !strings.Contains(out, "Permission denied")):
			t.Errorf("uid %d (groups %v) reading %s: exit %d %q, want Permission denied", c.uid, c.groups, c.file, code, out)
		}
	}

	// The daemon runs as root, squashed to nobody, yet its host key lets
	// it learn where the filesystems live: this host's stripes are read
	// by the daemon itself (the direct path), not by the storage server.
	buf := make([]byte, 64)
	if n, err := unix.Getxattr(filepath.Join(m.mp, "a"), "kaon.datapath", buf); err != nil || string(buf[:max(n, 0)]) != "local" {
		t.Errorf("uid 1000's read of a through the gateway mount: kaon.datapath %q, %v; want \"local\"\n%s", buf[:max(n, 0)], err, m.log)
	}

	// Without the key, the header asserts nothing.
	wk, err := gateway.LoadKey(wrong)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ header, reason string }{
		"forged":    {"uid=1000 gid=1000", "not a gateway assertion"},
		"wrong key": {wk.Assert("GET", "/gw/a", 1000, 1000, nil), "does not trust"},
	} {
		out, err := exec.Command("curl", "-sS", "-w", "\n%{http_code}", "-H", gateway.Header+": "+c.header, up.EP.HTTP+"/gw/a").CombinedOutput()
		if err != nil || !strings.HasSuffix(string(out), "\n401") || !strings.Contains(string(out), c.reason) || strings.Contains(string(out), "mine") {
			t.Errorf("curl with a %s assertion: %v %q, want 401 naming %q", name, err, out, c.reason)
		}
	}

	// A mount with a key the server does not trust stops with the reason;
	// so does one whose server takes no assertions (it would take every
	// caller for its socket's owner).
	plain := harness.Up(t)
	plain.MustKaon("mkdir", "/gw")
	failed := func(what, url, key, want string) {
		t.Helper()
		mp := filepath.Join(d, what)
		os.Mkdir(mp, 0o755)
		cmd := exec.Command(harness.Binary(t), "mount", "-f", "--url", url+"/gw", "-o", "gateway="+key, "--cache", filepath.Join(d, what+"-cache"), mp)
		out := &syncBuf{}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// It exits, or it mounts (which it must not).
		var err error
		waitFor(t, upDeadline, "kaon mount "+what+": exit or mount", func() bool {
			select {
			case err = <-done:
				return true
			default:
			}
			if _, mounted := fusetest.MountDev(mp); mounted {
				fusetest.Exec(t, harness.Binary(t), "umount", "-f", mp)
				if werr := fusetest.Within("kaon mount "+what+": exit after umount -f", stopDeadline, func() error { <-done; return nil }); werr != nil {
					cmd.Process.Kill()
					t.Error(werr)
				}
				t.Errorf("kaon mount %s: mounted, want a refusal", what)
				return true
			}
			return false
		})
		if err == nil || !strings.Contains(out.String(), want) {
			t.Errorf("kaon mount %s: %v\n%s\nwant a failure saying %q", what, err, out, want)
		}
		if strings.Contains(out.String(), secret) || strings.Contains(out.String(), wrongSecret) {
			t.Errorf("kaon mount %s: a key is in its output:\n%s", what, out)
		}
	}
	failed("with-an-untrusted-key", up.EP.HTTP, wrong, "gateway assertion refused: signed with key \""+wk.ID+"\", which this instance does not trust")
	failed("on-a-server-without-gateways", plain.EP.HTTP, key, "does not take gateway assertions")
	// Neither key is in any log.
	for _, l := range []string{up.Logs(), plain.Logs(), m.log.String()} {
		if strings.Contains(l, secret) || strings.Contains(l, wrongSecret) {
			t.Errorf("a gateway key is in a log:\n%s", l)
		}
	}
}

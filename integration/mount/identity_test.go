package mount_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kaon-storage/kaon/integration/fusetest"
	"github.com/kaon-storage/kaon/integration/harness"
)

// TestIdentity: every caller acts as itself, never as the daemon (root):
// a process with a bearer token in its environment (BEARER_TOKEN, or a
// file named by BEARER_TOKEN_FILE) as the token's user; one without, as
// its own uid (a unix peer of a server on this host). A token file the
// caller could not read itself is not used for it.
func TestIdentity(t *testing.T) {
	up := harness.Up(t, "--auth", "unix,token")
	up.MustKaon("mkdir", "/id")
	up.MustKaon("chmod", "777", "/id")
	tok := strings.TrimSpace(up.MustKaon("token", "issue", "--path", "/id", "--scope", "storage.read,storage.create,storage.modify",
		"--ttl", "10m", "--user", "4242"))
	m := newMount(t, up.EP.HTTP, "/id", "")
	d := fusetest.TempDir(t)
	userFile := filepath.Join(d, "user-token")
	os.WriteFile(userFile, []byte(tok+"\n"), 0o600)
	os.Chown(userFile, 1000, 1000)
	rootFile := filepath.Join(d, "root-token")
	os.WriteFile(rootFile, []byte(tok+"\n"), 0o600)

	create := func(name string, uid uint32, env ...string) {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", "echo x > "+filepath.Join(m.mp, name))
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		if out, err := fusetest.ExecCmd(t, "create "+name, cmd); err != nil {
			t.Fatalf("uid %d creating %s through the mount: %v\n%s", uid, name, err, out)
		}
	}
	create("by-token", 0, "BEARER_TOKEN="+tok)
	create("by-token-file", 1000, "BEARER_TOKEN_FILE="+userFile)
	create("by-root", 0)
	create("by-uid", 1000)
	create("by-foreign-file", 1000, "BEARER_TOKEN_FILE="+rootFile)
	for name, want := range map[string]uint32{"by-token": 4242, "by-token-file": 4242, "by-root": 0, "by-uid": 1000, "by-foreign-file": 1000} {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(m.mp, name), &st); err != nil || st.Uid != want {
			t.Errorf("%s: owner %d, %v; want %d", name, st.Uid, err, want)
		}
		// What the namespace recorded, not what the mount shows.
		if out := up.MustKaon("stat", "/id/"+name); !strings.Contains(out, fmt.Sprintf("Uid: %d ", want)) {
			t.Errorf("kaon stat /id/%s: want Uid %d in\n%s", name, want, out)
		}
	}
}

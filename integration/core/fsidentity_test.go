package core

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// fsRow returns the `kaon fs ls` line of filesystem id.
func fsRow(t *testing.T, k *harness.Process, id string) string {
	t.Helper()
	for _, l := range strings.Split(k.MustKaon("fs", "ls"), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[1] == id {
			return l
		}
	}
	t.Fatalf("fs %s not in fs ls:\n%s", id, k.MustKaon("fs", "ls"))
	return ""
}

func mustRunCmd(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v %s", name, args, err, out)
	}
}

// TestFilesystemMountVanishes: a filesystem directory is a mount; when the
// mount goes away under the running server, the filesystem goes offline
// with the reason, the bare mountpoint stays empty (nothing recreated,
// no data written there, also across a restart), reads and writes go on
// with the other filesystems, and the filesystem comes back when its
// mount does.
func TestFilesystemMountVanishes(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test needs root to mount")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "fs", "03")
	disk := filepath.Join(t.TempDir(), "disk")
	for _, d := range []string{mnt, disk} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustRunCmd(t, "mount", "-t", "tmpfs", "-o", "size=256m", "kaon-test-disk", disk)
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run(); exec.Command("umount", "-l", disk).Run() })
	mustRunCmd(t, "mount", "--bind", disk, mnt)
	k := harness.Start(t, dir, "up", "--data", dir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0")
	if _, err := os.Stat(filepath.Join(disk, ".kaon-fsid")); err != nil {
		t.Fatalf("filesystem 3 was not initialized on its mount: %v", err)
	}
	local, data := randomFile(t, 50000)
	layoutDir(t, k, "/r", "replica:6") // a stripe on every filesystem, fs 3 included
	mustPut(t, k, local, "/r/f")

	mustRunCmd(t, "umount", mnt)
	waitFor(t, 15*time.Second, func() bool {
		row := fsRow(t, k, "3")
		return strings.Contains(row, "offline") && strings.Contains(row, ".kaon-fsid missing")
	}, "fs 3 to show offline with the missing marker in fs ls")
	if !strings.Contains(k.Logs(), "filesystem offline") {
		t.Fatal("no log line for the offline filesystem")
	}
	mustGetEqual(t, k, "/r/f", data)
	layoutDir(t, k, "/p", "plain")
	for i := 0; i < 12; i++ {
		p := "/p/f" + string(rune('a'+i))
		mustPut(t, k, local, p)
		for _, id := range stripeColumn(t, k, p, 1) {
			if id == "3" {
				t.Fatalf("%s placed on offline fs 3", p)
			}
		}
	}
	bare := func(when string) {
		t.Helper()
		if ents, err := os.ReadDir(mnt); err != nil || len(ents) != 0 {
			t.Fatalf("%s: the bare mountpoint was written to: %v %v", when, ents, err)
		}
	}
	bare("while running")
	k.Restart()
	waitFor(t, 15*time.Second, func() bool { return strings.Contains(fsRow(t, k, "3"), "offline") }, "fs 3 offline after restart")
	bare("after restart")

	mustRunCmd(t, "mount", "--bind", disk, mnt)
	waitFor(t, 15*time.Second, func() bool {
		row := fsRow(t, k, "3")
		return strings.Contains(row, "booted") && strings.HasSuffix(strings.TrimSpace(row), "ok")
	}, "fs 3 to come back online after remount")
	mustGetEqual(t, k, "/r/f", data)
}

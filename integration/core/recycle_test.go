package core

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// recycleKeys returns the keys of `kaon recycle ls` by original path.
func recycleKeys(t *testing.T, k *harness.Process) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(k.MustKaon("recycle", "ls"), "\n")[1:] {
		if f := strings.Fields(l); len(f) >= 7 {
			out[f[len(f)-1]] = f[0]
		}
	}
	return out
}

// TestRecycleBin: deletes below sys.recycle, over any protocol, are
// recoverable with their bytes; restore never overwrites; purge removes
// the data from the storage servers; the lifetime is enforced.
func TestRecycleBin(t *testing.T) {
	k := harness.Up(t, "--recycle-lifetime", "0")
	local, data := randomFile(t, 70000)
	k.MustKaon("mkdir", "/r")
	k.MustKaon("attr", "set", "/r", "sys.recycle=on")
	mustPut(t, k, local, "/r/http")
	if out, err := exec.Command("xrdcp", "-s", local, k.EP.XRootD+"//r/xrd").CombinedOutput(); err != nil {
		t.Fatalf("xrdcp: %v %s", err, out)
	}
	mustPut(t, k, local, "/r/tree/a/f")
	phys := stripeColumn(t, k, "/r/http", 3)[0]
	if r := curl(t, "-X", "DELETE", k.EP.HTTP+"/r/http"); r.code != 204 {
		t.Fatalf("DELETE: %d", r.code)
	}
	if out, err := exec.Command("xrdfs", strings.TrimPrefix(k.EP.XRootD, "root://"), "rm", "/r/xrd").CombinedOutput(); err != nil {
		t.Fatalf("xrdfs rm: %v %s", err, out)
	}
	k.MustKaon("rm", "-r", "/r/tree")
	if out := k.MustKaon("ls", "/r"); strings.TrimSpace(out) != "" {
		t.Fatalf("deleted entries still listed: %q", out)
	}
	keys := recycleKeys(t, k)
	if len(keys) != 3 || keys["/r/http"] == "" || keys["/r/xrd"] == "" || keys["/r/tree"] == "" {
		t.Fatalf("recycle ls: %v\n%s", keys, k.MustKaon("recycle", "ls"))
	}
	if _, err := os.Stat(phys); err != nil {
		t.Fatalf("recycled data left the storage server: %v", err)
	}
	k.MustKaon("recycle", "restore", keys["/r/tree"])
	mustGetEqual(t, k, "/r/tree/a/f", data)
	mustPut(t, k, local, "/r/http") // something new at the old name
	if _, errs, code := k.Kaon("recycle", "restore", keys["/r/http"]); code == 0 || !strings.Contains(errs, "--force-rename") {
		t.Fatalf("restore over an existing file: %d %s", code, errs)
	}
	out := k.MustKaon("recycle", "restore", "--force-rename", keys["/r/http"])
	restored := strings.TrimSpace(strings.TrimPrefix(out, "restored"))
	if !strings.HasPrefix(restored, "/r/http.restored-") {
		t.Fatalf("restore beside: %q", out)
	}
	mustGetEqual(t, k, restored, data)
	if out := k.MustKaon("recycle", "purge", "--older-than", "1d"); !strings.Contains(out, "purged 0") {
		t.Fatalf("purge of nothing old enough: %s", out)
	}
	xphys := "" // the xrd file's stripe: gone once purged
	k.MustKaon("recycle", "restore", keys["/r/xrd"])
	xphys = stripeColumn(t, k, "/r/xrd", 3)[0]
	k.MustKaon("rm", "/r/xrd")
	if out := k.MustKaon("recycle", "purge"); !strings.Contains(out, "purged 1") {
		t.Fatalf("purge: %s", out)
	}
	waitFor(t, 20*time.Second, func() bool { _, err := os.Stat(xphys); return os.IsNotExist(err) }, "purged data to be removed from its filesystem")

	// The lifetime is enforced in the background.
	k2 := harness.Up(t, "--recycle-lifetime", "2s")
	k2.MustKaon("mkdir", "/r")
	k2.MustKaon("attr", "set", "/r", "sys.recycle=on")
	mustPut(t, k2, local, "/r/f")
	k2.MustKaon("rm", "/r/f")
	if len(recycleKeys(t, k2)) != 1 {
		t.Fatal("nothing recycled")
	}
	waitFor(t, 20*time.Second, func() bool { return len(recycleKeys(t, k2)) == 0 }, "the 2s recycle lifetime to purge the entry")
}

package core

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// quotaRow returns the fields of the `kaon quota ls` line for path and kind.
func quotaRow(t *testing.T, k *harness.Process, path, kind string) []string {
	t.Helper()
	for _, l := range strings.Split(k.MustKaon("quota", "ls"), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == path && f[1] == kind {
			return f
		}
	}
	t.Fatalf("no %s quota on %s:\n%s", kind, path, k.MustKaon("quota", "ls"))
	return nil
}

// TestQuotaOverProtocols: a quota node refuses what would exceed it with
// HTTP 507 and kXR_overQuota and a message naming the quota; racing
// uploads never exceed it; failed uploads release their booking; usage
// survives a restart.
func TestQuotaOverProtocols(t *testing.T) {
	k := harness.Up(t)
	local, _ := randomFile(t, 600<<10)
	k.MustKaon("mkdir", "/q")
	k.MustKaon("quota", "set", "--path", "/q", "-p", "--bytes", "1M", "--files", "100")
	mustPut(t, k, local, "/q/a")
	r := put(t, k, local, "/q/b")
	if r.code != 507 || !strings.Contains(string(r.body), "quota exceeded") {
		t.Fatalf("PUT over quota: %d %s", r.code, r.body)
	}
	out, err := exec.Command("xrdcp", "-s", local, k.EP.XRootD+"//q/c").CombinedOutput()
	if err == nil || !strings.Contains(strings.ToLower(string(out)), "quota") {
		t.Fatalf("xrdcp over quota: %v %s", err, out)
	}
	if row := quotaRow(t, k, "/q", "project"); row[3] != "600.00" || row[len(row)-2] != "0" {
		t.Fatalf("quota ls after refusals: %v", row)
	}

	// 16 uploads of 100 KiB race for 1 MiB: exactly 10 fit.
	small, _ := randomFile(t, 100<<10)
	k.MustKaon("mkdir", "/race")
	k.MustKaon("quota", "set", "--path", "/race", "-p", "--bytes", "1000K")
	var wg sync.WaitGroup
	codes := make([]int, 16)
	for i := range codes {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			codes[i] = put(t, k, small, fmt.Sprintf("/race/f%d", i)).code
		}(i)
	}
	wg.Wait()
	ok := 0
	for _, c := range codes {
		switch c {
		case 201:
			ok++
		case 507:
		default:
			t.Fatalf("racing upload: HTTP %d", c)
		}
	}
	if ok != 10 {
		t.Fatalf("%d of 16 racing 100 KiB uploads committed under a 1000 KiB quota (%v)", ok, codes)
	}
	check := func(when string) {
		t.Helper()
		row := quotaRow(t, k, "/race", "project")
		if row[3] != "1000.00" || row[len(row)-1] != "B" {
			t.Fatalf("%s: race quota row %v", when, row)
		}
		files, _ := strconv.Atoi(row[7]) // used, limit are "N unit" pairs
		if ls := strings.Fields(k.MustKaon("ls", "/race")); files != 10 || len(ls) != 10 {
			t.Fatalf("%s: %d files counted, %d listed", when, files, len(ls))
		}
	}
	check("after the race")
	k.Restart()
	check("after a restart")
}

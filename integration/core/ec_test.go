package core

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// stripeRows returns the stripe table of `kaon file info`: for each stripe
// its index, fsid, node and physical path.
func stripeRows(t *testing.T, k *harness.Process, p string) [][]string {
	t.Helper()
	var out [][]string
	for _, l := range strings.Split(k.MustKaon("file", "info", p), "\n") {
		if f := strings.Fields(l); len(f) == 4 && strings.HasPrefix(f[3], "/") {
			out = append(out, f)
		}
	}
	return out
}

// stripeColumn returns one column of stripeRows (1 fsid, 2 node, 3 path).
func stripeColumn(t *testing.T, k *harness.Process, p string, col int) []string {
	t.Helper()
	var out []string
	for _, r := range stripeRows(t, k, p) {
		out = append(out, r[col])
	}
	return out
}

func corrupt(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 16)
	f.ReadAt(b, off)
	for i := range b {
		b[i] ^= 0xff
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestECSurvivesMFailures damages M stripes of ec files in every way a disk
// can (deleted, truncated, corrupted) and reads them back byte-exact; the
// truncated and corrupted ones are rebuilt as they were; M+1 stripes gone
// must give an error, never wrong bytes.
func TestECSurvivesMFailures(t *testing.T) {
	k := harness.Up(t, "--fs", "18")
	for _, layout := range []string{"ec:4+2", "ec:8+2", "ec:16+2"} {
		k_, m_ := 0, 0
		fmt.Sscanf(layout, "ec:%d+%d", &k_, &m_)
		dir := "/" + strings.NewReplacer(":", "", "+", "_").Replace(layout)
		layoutDir(t, k, dir, layout+":65536")
		local, data := randomFile(t, int64(k_)*65536*3+12345)
		damages := []string{"delete", "truncate", "corrupt"}
		for round := range damages {
			p := fmt.Sprintf("%s/f%d", dir, round)
			mustPut(t, k, local, p)
			phys := stripeColumn(t, k, p, 3)
			if len(phys) != k_+m_ {
				t.Fatalf("%s: %d stripes, want %d", p, len(phys), k_+m_)
			}
			seen := map[string]bool{}
			for _, id := range stripeColumn(t, k, p, 1) {
				if seen[id] {
					t.Fatalf("%s: two stripes on fs %s", p, id)
				}
				seen[id] = true
			}
			orig := map[int][]byte{}
			for i := range m_ {
				orig[i], _ = os.ReadFile(phys[i])
			}
			// Damage M stripes, starting with data stripes (they matter most).
			for i := 0; i < m_; i++ {
				switch damages[(round+i)%3] {
				case "delete":
					os.Remove(phys[i])
				case "truncate":
					os.Truncate(phys[i], 70000)
				case "corrupt":
					corrupt(t, phys[i], 65536+4+100) // inside the second frame
				}
			}
			mustGetEqual(t, k, p, data)
			r := get(t, k, p, "-r", "65000-140000")
			if r.code != 206 || string(r.body) != string(data[65000:140001]) {
				t.Fatalf("%s degraded range read: %d", p, r.code)
			}
			// The stripes the reads found truncated or corrupt (not the deleted
			// ones) are rebuilt in the background, as they were.
			for i := range m_ {
				if damages[(round+i)%3] == "delete" {
					continue
				}
				waitFor(t, 30*time.Second, func() bool {
					b, err := os.ReadFile(phys[i])
					return err == nil && bytes.Equal(b, orig[i])
				}, fmt.Sprintf("%s: the damaged stripe %s to be rebuilt", p, phys[i]))
			}
			// One more failure than M: the file is lost and the client is told,
			// by an error status or (when the first rows were still readable
			// and the status was sent) by a transfer cut short. Never silently
			// wrong bytes.
			for i := 0; i <= m_; i++ {
				os.Remove(phys[i])
			}
			r = get(t, k, p)
			switch {
			case r.code == 200 && string(r.body) == string(data):
				t.Fatalf("%s: read succeeded with %d stripes gone", p, m_+1)
			case r.code == 200 && !strings.Contains(r.stderr, "transfer closed"):
				t.Fatalf("%s: 200 with wrong bytes and no transfer error after losing %d stripes", p, m_+1)
			case r.code != 200 && r.code < 500:
				t.Fatalf("%s: status %d for an unreadable file", p, r.code)
			}
		}
	}
}

// TestPlacementRespectsState sets filesystems off/ro and checks new stripes
// avoid them, and that too few usable filesystems is a clear, fast error.
func TestPlacementRespectsState(t *testing.T) {
	k := harness.Up(t, "--fs", "7")
	layoutDir(t, k, "/ec", "ec:4+2")
	k.MustKaon("fs", "config", "3", "configstatus=off")
	if out := k.MustKaon("fs", "ls"); !strings.Contains(out, " off ") {
		t.Fatalf("fs ls does not show off:\n%s", out)
	}
	local, data := randomFile(t, 100000)
	for i := 0; i < 5; i++ {
		p := fmt.Sprintf("/ec/f%d", i)
		mustPut(t, k, local, p)
		for _, id := range stripeColumn(t, k, p, 1) {
			if id == "3" {
				t.Fatalf("%s placed a stripe on an off filesystem", p)
			}
		}
		mustGetEqual(t, k, p, data)
	}
	k.MustKaon("fs", "config", "5", "configstatus=ro")
	r := put(t, k, local, "/ec/toofew")
	if r.code != 507 || !strings.Contains(string(r.body), "needs 6 writable filesystems, 5 available") {
		t.Fatalf("too few filesystems: %d %s", r.code, r.body)
	}
	if _, _, code := k.Kaon("stat", "/ec/toofew"); code == 0 {
		t.Fatal("failed placement left a file behind")
	}
	// A read-only filesystem still serves reads.
	mustGetEqual(t, k, "/ec/f0", data)
	if _, errs, code := k.Kaon("fs", "config", "5", "configstatus=broken"); code == 0 || !strings.Contains(errs, "configstatus must be") {
		t.Fatalf("bad configstatus accepted: %s", errs)
	}
	if _, errs, code := k.Kaon("fs", "config", "99", "configstatus=rw"); code == 0 || !strings.Contains(errs, "fs 99") {
		t.Fatalf("unknown fs: %s", errs)
	}
}

// TestECTooFewStripes: with fewer than K stripes left, HTTP answers 503
// with the reason before any status line promises the file (no 200 cut
// short), root:// gives the same reason; stripes found damaged while a
// read was served by reconstruction are logged with the path and stripe.
func TestECTooFewStripes(t *testing.T) {
	k := harness.Up(t)
	layoutDir(t, k, "/ec", "ec:4+2:65536")
	local, data := randomFile(t, 4*65536*5+999)
	mustPut(t, k, local, "/ec/lost")
	mustPut(t, k, local, "/ec/damaged")
	phys := stripeColumn(t, k, "/ec/lost", 3)
	// Lose three stripes, data and parity, beyond stripe 0 so the first
	// bytes would still be readable.
	for _, i := range []int{1, 2, 5} {
		if err := os.Remove(phys[i]); err != nil {
			t.Fatal(err)
		}
	}
	r := get(t, k, "/ec/lost")
	if r.code != 503 || !strings.Contains(string(r.body), "unrecoverable") || !strings.Contains(string(r.body), "/ec/lost") {
		t.Fatalf("GET with 3 of 6 stripes gone: %d %q %s", r.code, r.body, r.stderr)
	}
	if r := get(t, k, "/ec/lost", "-r", "0-99"); r.code != 503 {
		t.Fatalf("range GET with 3 of 6 stripes gone: %d %q", r.code, r.body)
	}
	out, err := exec.Command("xrdcp", "-f", k.EP.XRootD+"//ec/lost", "/dev/null").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unrecoverable") {
		t.Fatalf("xrdcp with 3 of 6 stripes gone: %v %s", err, out)
	}
	// A corrupted stripe is repaired on the fly, and recorded.
	dphys := stripeColumn(t, k, "/ec/damaged", 3)
	corrupt(t, dphys[1], 65536+4+10)
	mustGetEqual(t, k, "/ec/damaged", data)
	waitFor(t, 10*time.Second, func() bool {
		return strings.Contains(k.Logs(), "damaged stripes") && strings.Contains(k.Logs(), "path=/ec/damaged") &&
			strings.Contains(k.Logs(), "stripe 1")
	}, "a log line naming /ec/damaged and its corrupted stripe 1")
}

package move

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestDrainKill9: a drain goes on through kill -9 of the storage server
// holding the draining filesystem, of the other storage server (where
// copies are being written), and of the namespace server, each in the
// middle of the drain and restarted: the drain completes, every file is
// byte-exact with its adler32, no file has a stripe on the drained
// filesystem, and the disks hold exactly the registered stripes (no
// half-copied stripe registered, none left behind).
func TestDrainKill9(t *testing.T) {
	mdir := t.TempDir()
	port := harness.FreePort(t)
	m := harness.Start(t, mdir, "mgm", "--data", mdir, "--http", fmt.Sprintf("127.0.0.1:%d", port), "--cap-ttl", "5s")
	key := filepath.Join(mdir, "keys", "capability.key")
	fst := func(node string, fs ...string) (*harness.Process, []string) {
		d := t.TempDir()
		args := []string{"fst", "--mgm", m.EP.HTTP, "--key", key, "--http", "127.0.0.1:0", "--node", node, "--data", d}
		var roots []string
		for _, f := range fs {
			roots = append(roots, filepath.Join(d, f))
			args = append(args, "--fs", filepath.Join(d, f))
		}
		return harness.Start(t, d, args...), roots
	}
	a, rootsA := fst("a", "a1", "a2")
	b, rootsB := fst("b", "b1", "b2", "b3", "b4")
	roots := append(rootsA, rootsB...)
	harness.WaitFor(t, 30*time.Second, "6 filesystems to boot", func() bool { return strings.Count(m.MustKaon("fs", "ls"), "booted") == 6 })
	var drained string
	for _, l := range strings.Split(m.MustKaon("fs", "ls"), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[2] == rootsA[0] {
			drained = f[1]
		}
	}
	files := map[string][]byte{}
	for li, l := range []string{"plain", "replica:2", "ec:2+1:65536"} {
		dir := fmt.Sprintf("/d%d", li)
		layoutDir(t, m, dir, l)
		for i := range 12 {
			local, data := randomBytes(t, 256<<10+rand.IntN(6<<20))
			p := fmt.Sprintf("%s/f%d", dir, i)
			if err := putHTTP(m, local, p); err != nil {
				t.Fatal(err)
			}
			files[p] = data
		}
	}
	m.MustKaon("fs", "config", drained, "drain.rate=1M")
	m.MustKaon("fs", "config", drained, "drain.parallel=1")
	m.MustKaon("fs", "config", drained, "configstatus=drain")
	// Kill each process once stripes move, restart it, and let the drain
	// move more before the next.
	for _, victim := range []struct {
		name string
		p    *harness.Process
	}{{"the storage server holding the draining filesystem", a}, {"the other storage server", b}, {"the namespace server", m}} {
		before := movedStripes(t, m, drained)
		harness.WaitFor(t, 2*time.Minute, "the drain to move 2 stripes before killing "+victim.name, func() bool {
			return movedStripes(t, m, drained) >= before+2 || strings.Contains(fsRow(t, m, drained), " drained ")
		})
		if strings.Contains(fsRow(t, m, drained), " drained ") {
			t.Fatalf("the drain ended before %s was killed: not enough data to test", victim.name)
		}
		victim.p.Kill9()
		time.Sleep(time.Second)
		victim.p.Restart()
		harness.WaitFor(t, 30*time.Second, "6 filesystems to boot after restarting "+victim.name, func() bool {
			return strings.Count(m.MustKaon("fs", "ls"), "booted") == 6
		})
	}
	harness.WaitFor(t, 5*time.Minute, "the drain to end in drained", func() bool { return strings.Contains(fsRow(t, m, drained), " drained ") })
	if n := fsStatusField(t, m, drained, "failures"); !strings.HasPrefix(n, "0 now") {
		t.Fatalf("drained with failures: %s\n%s", n, m.MustKaon("fs", "status", drained))
	}
	verifyAll(t, m, files)
	var id uint32
	fmt.Sscan(drained, &id)
	checkNoOrphans(t, m, roots, files, id)
	if strings.Contains(m.Logs(), "rolled back stripe moves") {
		t.Log("the namespace server rolled back a move in flight at its restart")
	}
}

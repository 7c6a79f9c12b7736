package core

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestSeparateProcesses runs the namespace server and three storage servers
// as separate processes registering over HTTP, spreads ec:4+2 stripes over
// them, and reads a file back after one storage server is killed.
func TestSeparateProcesses(t *testing.T) {
	mdir := t.TempDir()
	m := harness.Start(t, mdir, "mgm", "--data", mdir, "--http", "127.0.0.1:0")
	key := filepath.Join(mdir, "keys", "capability.key")
	var fsts []*harness.Process
	for i := 0; i < 3; i++ {
		d := t.TempDir()
		fsts = append(fsts, harness.Start(t, d, "fst", "--mgm", m.EP.HTTP, "--key", key, "--http", "127.0.0.1:0",
			"--node", fmt.Sprintf("node%d", i), "--data", d, "--fs", filepath.Join(d, "a"), "--fs", filepath.Join(d, "b")))
	}
	out := m.MustKaon("fs", "ls")
	for i := 0; i < 3; i++ {
		if strings.Count(out, fmt.Sprintf("node%d ", i)) != 2 {
			t.Fatalf("fs ls should list 2 filesystems per node:\n%s", out)
		}
	}
	if strings.Count(out, "booted") != 6 {
		t.Fatalf("not all filesystems booted:\n%s", out)
	}
	layoutDir(t, m, "/ec", "ec:4+2:65536")
	local, data := randomFile(t, 5<<20+99)
	mustPut(t, m, local, "/ec/f")
	mustGetEqual(t, m, "/ec/f", data)
	perNode := map[string]int{}
	for _, node := range stripeColumn(t, m, "/ec/f", 2) {
		perNode[node]++
	}
	if len(perNode) != 3 {
		t.Fatalf("stripes not spread over the 3 storage servers: %v", perNode)
	}
	for n, c := range perNode {
		if c != 2 {
			t.Fatalf("node %s holds %d stripes, want 2: %v", n, c, perNode)
		}
	}
	// fs add: a new filesystem on a running storage server boots by itself.
	newPath := filepath.Join(fsts[0].Dir, "c")
	m.MustKaon("fs", "add", "--node", "node0", "--path", newPath)
	waitFor(t, 15*time.Second, func() bool {
		for _, l := range strings.Split(m.MustKaon("fs", "ls"), "\n") {
			if strings.Contains(l, newPath) && strings.Contains(l, "booted") {
				return true
			}
		}
		return false
	}, "added filesystem to boot")
	if _, errs, code := m.Kaon("fs", "add", "--node", "nosuchnode", "--path", "/x"); code == 0 || !strings.Contains(errs, "nosuchnode") {
		t.Fatalf("fs add on unknown node: %d %s", code, errs)
	}
	// Lose a whole storage server: 2 stripes of an ec:4+2 file.
	fsts[1].Kill9()
	waitFor(t, 20*time.Second, func() bool {
		return strings.Count(m.MustKaon("fs", "ls"), " down ") >= 2
	}, "killed node's filesystems to show down")
	mustGetEqual(t, m, "/ec/f", data)
	// New files avoid the dead node.
	mustPut(t, m, local, "/plainfile")
	mustGetEqual(t, m, "/plainfile", data)
}

func waitFor(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

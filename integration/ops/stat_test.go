package ops

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// adminGet reads admin route r of k's namespace server (as root, a unix
// peer) into out.
func adminGet(t *testing.T, k *harness.Process, r string, out any) {
	t.Helper()
	b, err := exec.Command("curl", "-sSf", k.EP.HTTP+"/api/v1/"+r).Output()
	if err != nil {
		t.Fatalf("GET /api/v1/%s: %v", r, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET /api/v1/%s: %v: %s", r, err, b)
	}
}

// TestNodeAndNSStat: `kaon node ls` shows the storage server online with
// its filesystems, heartbeat and I/O rates; `kaon node config` sets a key
// on all its filesystems; `kaon ns stat` counts files, directories and
// the pending upload of a transfer in flight, and requests by protocol.
func TestNodeAndNSStat(t *testing.T) {
	k := harness.Up(t)
	k.MustKaon("mkdir", "-p", "/a/b")
	out := k.MustKaon("node", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], " online ") || !strings.Contains(lines[1], " ago ") || !strings.Contains(lines[1], k.EP.FSTHTTP) {
		t.Fatalf("node ls of kaon up (one storage server, online):\n%s", out)
	}
	var nodes []struct {
		Name        string  `json:"name"`
		Filesystems int     `json:"filesystems"`
		Booted      int     `json:"booted"`
		WriteRate   float64 `json:"write_rate"`
		Release     string  `json:"release"`
	}
	adminGet(t, k, "node/ls", &nodes)
	if len(nodes) != 1 || nodes[0].Filesystems != 6 || nodes[0].Booted != 6 || nodes[0].Release == "" {
		t.Fatalf("node/ls: %+v (want one node, 6 filesystems booted, its version)", nodes)
	}
	// Writes show as a write rate in the heartbeats that follow.
	harness.WaitFor(t, 30*time.Second, "a write rate in node ls after uploads", func() bool {
		if b, err := exec.Command("curl", "-sSf", "-L", "-T", "/etc/services", k.EP.HTTP+"/a/b/f").CombinedOutput(); err != nil {
			t.Fatalf("upload: %v %s", err, b)
		}
		adminGet(t, k, "node/ls", &nodes)
		return nodes[0].WriteRate > 0
	})
	k.MustKaon("node", "config", nodes[0].Name, "configstatus=ro")
	if fs := k.MustKaon("fs", "ls"); strings.Count(fs, " ro ") != 6 {
		t.Errorf("fs ls after node config configstatus=ro (want 6 ro):\n%s", fs)
	}
	if _, errs, code := k.Kaon("node", "config", "nosuch", "configstatus=ro"); code != 1 || !strings.Contains(errs, "nosuch: no filesystem") {
		t.Errorf("node config of an unknown node: %d %s", code, errs)
	}
	k.MustKaon("node", "config", nodes[0].Name, "configstatus=rw")

	// An upload in flight: curl streams from a pipe held open.
	cmd := exec.Command("curl", "-sSf", "-L", "-T", "-", k.EP.HTTP+"/a/inflight")
	in, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("some bytes"))
	var st struct {
		Files          int64              `json:"files"`
		Directories    int64              `json:"directories"`
		PendingUploads int                `json:"pending_uploads"`
		Requests       map[string]int64   `json:"requests"`
		Rates          map[string]float64 `json:"rates"`
		EngineBytes    int64              `json:"engine_bytes"`
	}
	harness.WaitFor(t, 30*time.Second, "the upload in flight pending in ns stat", func() bool {
		adminGet(t, k, "ns/stat", &st)
		return st.PendingUploads == 1
	})
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the upload in flight: %v", err)
	}
	xhost := strings.TrimPrefix(k.EP.XRootD, "root://")
	if out, err := exec.Command("xrdfs", xhost, "stat", "/a").CombinedOutput(); err != nil {
		t.Fatalf("xrdfs stat: %v %s", err, out)
	}
	adminGet(t, k, "ns/stat", &st)
	if st.Files != 2 || st.Directories != 2 || st.PendingUploads != 0 || st.Requests["http"] == 0 || st.Requests["root"] == 0 ||
		st.Rates["http"] <= 0 || st.EngineBytes <= 0 {
		t.Errorf("ns/stat after two uploads: %+v (want 2 files, 2 directories, none pending, http and root requests, the engine's size)", st)
	}
	if out := k.MustKaon("ns", "stat"); !strings.Contains(out, "files:            2") || !strings.Contains(out, "requests root:") {
		t.Errorf("kaon ns stat:\n%s", out)
	}
}

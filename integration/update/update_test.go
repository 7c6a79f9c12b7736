// Package update drives files that change in place (issue 22) through the
// real kaon binary with the real clients: root:// update sessions with the
// Python XRootD bindings side by side with Debian's xrootd (same calls,
// same bytes), ranged PUTs with curl, and what stays true across them
// (data versions, stale replicas never read, checksums never out of date).
package update

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// driverScript is update_driver.py copied where every user can read it.
func driverScript(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "update_driver.py"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	p := filepath.Join(dir, "update_driver.py")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// outcome is what update_driver.py printed.
type outcome struct {
	Error       string   `json:"error"`
	SHA256      string   `json:"sha256"`
	Size        int64    `json:"size"`
	ModelSHA256 string   `json:"model_sha256"`
	ModelSize   int64    `json:"model_size"`
	Problems    []string `json:"problems"`
}

func drive(t *testing.T, script, url, path string, seed int) outcome {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", script, url, path, fmt.Sprint(seed))
	cmd.Env = append(os.Environ(), "XRD_REQUESTTIMEOUT=60", "XRD_CONNECTIONRETRY=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("update_driver.py %s %s did not finish within 3 minutes", url, path)
	}
	var o outcome
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &o); err != nil {
		t.Fatalf("update_driver.py %s %s: %v\n%s\n%s", url, path, err, out.String(), errb.String())
	}
	return o
}

// TestUpdateSessionsLikeXRootD runs one scenario of update sessions
// (writes at offsets, reads through the handle, kXR_sync, truncations by
// handle and by path, appends) with the Python XRootD client against
// Kaon, on a plain, a replica:2 and an ec:2+1 file, and against Debian's
// xrootd: every server must end with the model's bytes, the same ones.
func TestUpdateSessionsLikeXRootD(t *testing.T) {
	k := harness.Up(t, "--fs", "4")
	xrd, _ := harness.XRootD(t, nil)
	script := driverScript(t)
	k.MustKaon("mkdir", "/r2")
	k.MustKaon("attr", "set", "/r2", "sys.forced.layout=replica:2")
	k.MustKaon("mkdir", "/ec")
	k.MustKaon("attr", "set", "/ec", "sys.forced.layout=ec:2+1:4096")
	const seed = 22
	peer := drive(t, script, "root://"+xrd, "/peer/f", seed)
	if peer.Error != "" || len(peer.Problems) > 0 || peer.SHA256 != peer.ModelSHA256 {
		t.Fatalf("Debian's xrootd does not follow the model: %+v", peer)
	}
	for _, p := range []string{"/plain/f", "/r2/f", "/ec/f"} {
		o := drive(t, script, k.EP.XRootD, p, seed)
		switch {
		case o.Error != "":
			t.Errorf("%s: %s", p, o.Error)
		case len(o.Problems) > 0:
			t.Errorf("%s: %s", p, strings.Join(o.Problems, "; "))
		case o.SHA256 != o.ModelSHA256 || o.Size != o.ModelSize:
			t.Errorf("%s: %d bytes sha256 %s, the model %d bytes %s", p, o.Size, o.SHA256, o.ModelSize, o.ModelSHA256)
		case o.SHA256 != peer.SHA256:
			t.Errorf("%s: sha256 %s, Debian's xrootd %s", p, o.SHA256, peer.SHA256)
		}
	}
}

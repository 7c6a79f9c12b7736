package update

import (
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/harness"
)

// quotaUsed is the used column of `kaon quota ls` for the project quota
// on path.
func quotaUsed(t *testing.T, k *harness.Process, path string) string {
	t.Helper()
	for _, l := range strings.Split(k.MustKaon("quota", "ls"), "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == path && f[1] == "project" {
			return f[3]
		}
	}
	t.Fatalf("no project quota on %s:\n%s", path, k.MustKaon("quota", "ls"))
	return ""
}

// updateScript writes the file named by argv[3] at offset argv[4] into
// argv[1]+argv[2] in one kXR_open_updt session; on failure it prints the
// server's message and exits 1.
const updateScript = `import sys
from XRootD import client
from XRootD.client.flags import OpenFlags
f = client.File()
st, _ = f.open(sys.argv[1] + "/" + sys.argv[2], OpenFlags.UPDATE)
if st.ok:
    st, _ = f.write(open(sys.argv[3], "rb").read(), int(sys.argv[4]))
    cst, _ = f.close()
    st = st if not st.ok else cst
if not st.ok:
    print("errno %d: %s" % (st.errno, st.message))
    sys.exit(1)
`

// TestUpdatesWithinQuota: updates that extend a file are charged to its
// quota as uploads are, and one that would exceed it is refused — HTTP 507
// for a ranged PUT, kXR_overQuota for a kXR_open_updt session, both
// naming the file and the quota — leaving the file and the usage as they
// were; a truncation gives the bytes back.
func TestUpdatesWithinQuota(t *testing.T) {
	k := harness.Up(t, "--fs", "2")
	k.MustKaon("mkdir", "/q")
	k.MustKaon("attr", "set", "/q", "sys.forced.layout=replica:2")
	k.MustKaon("quota", "set", "--path", "/q", "-p", "--bytes", "1M", "--files", "10")
	src := t.TempDir()
	content := make([]byte, 600<<10)
	rand.Read(content)
	local := filepath.Join(src, "content")
	os.WriteFile(local, content, 0o644)
	url := k.EP.HTTP + "/q/f"
	curlOut(t, "-f", "-T", local, url)
	chunk := make([]byte, 100<<10)
	rand.Read(chunk)
	os.WriteFile(filepath.Join(src, "chunk"), chunk, 0o644)
	unchanged := func(step string, want []byte, used string) {
		t.Helper()
		if got := []byte(curlOut(t, "-f", url)); !bytes.Equal(got, want) {
			t.Fatalf("%s: /q/f is %d bytes, want %d unchanged", step, len(got), len(want))
		}
		if u := quotaUsed(t, k, "/q"); u != used {
			t.Fatalf("%s: quota used %s, want %s", step, u, used)
		}
	}

	// Within the quota: 600K -> 800K.
	curlOut(t, "-f", "-T", filepath.Join(src, "chunk"), "-H", "Content-Range: bytes 716800-819199/*", url)
	content = append(append(content, make([]byte, 100<<10)...), chunk...)
	unchanged("an extension within the quota", content, "800.00")

	// Past it by HTTP: 800K -> 1100K refused.
	out, _ := exec.Command("curl", "-sS", "-L", "-w", "\n%{http_code}", "-T", filepath.Join(src, "chunk"),
		"-H", "Content-Range: bytes 1024000-1126399/*", url).CombinedOutput()
	if !strings.HasSuffix(strings.TrimSpace(string(out)), "507") || !strings.Contains(string(out), "/q/f") || !strings.Contains(string(out), "quota") {
		t.Fatalf("a ranged PUT past the quota: %s", out)
	}
	unchanged("a ranged PUT past the quota", content, "800.00")

	// Past it by root://: kXR_overQuota (3024 in XRootD 5's numbering) at close.
	cmd := exec.Command("/usr/bin/python3", "-c", updateScript, k.EP.XRootD, "/q/f", filepath.Join(src, "chunk"), "1024000")
	cmd.Env = append(os.Environ(), "XRD_REQUESTTIMEOUT=60", "XRD_CONNECTIONRETRY=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(strings.ToLower(string(out)), "quota") || !strings.Contains(string(out), "/q/f") {
		t.Fatalf("an update session past the quota over root://: %v %s", err, out)
	}
	unchanged("an update session past the quota", content, "800.00")

	// A truncation gives bytes back, and the room is usable again.
	if out, err := exec.Command("xrdfs", strings.TrimPrefix(k.EP.XRootD, "root://"), "truncate", "/q/f", "102400").CombinedOutput(); err != nil {
		t.Fatalf("xrdfs truncate: %v %s", err, out)
	}
	content = content[:100<<10]
	unchanged("a truncation", content, "100.00")
	cmd = exec.Command("/usr/bin/python3", "-c", updateScript, k.EP.XRootD, "/q/f", filepath.Join(src, "chunk"), "921600")
	cmd.Env = append(os.Environ(), "XRD_REQUESTTIMEOUT=60", "XRD_CONNECTIONRETRY=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("an update session within the quota after the truncation: %v %s", err, out)
	}
	content = append(append(content, make([]byte, 800<<10)...), chunk...)
	unchanged("an update session within the quota", content, "1000.00")
}

package core

import (
	"bytes"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// versionIDs returns the version ids `kaon file versions` lists (oldest
// first) and their lines.
func versionIDs(t *testing.T, k *harness.Process, p string) ([]string, []string) {
	t.Helper()
	var ids, lines []string
	for _, l := range strings.Split(strings.TrimSpace(k.MustKaon("file", "versions", p)), "\n")[1:] {
		if f := strings.Fields(l); len(f) == 4 {
			ids, lines = append(ids, f[0]), append(lines, l)
		}
	}
	return ids, lines
}

// davPath is p with what a URL path must escape ('#' of .sys.v#.).
func davPath(p string) string { return (&url.URL{Path: p}).EscapedPath() }

// TestVersions: below sys.versioning=2, for every layout, four writes
// over HTTP and root:// keep the two contents before the current one;
// they are listed with their sizes and checksums, hidden from listings
// of the directory, read by path over both protocols (only by who may
// read the file), restored by swapping, and the purged one's stripes
// leave the disks.
func TestVersions(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test needs root to act as another user")
	}
	k := harness.Up(t, "--fs", "6")
	xhost := strings.TrimPrefix(k.EP.XRootD, "root://")
	for _, layout := range []string{"plain", "replica:2", "ec:4+2"} {
		dir := "/v-" + strings.ReplaceAll(strings.ReplaceAll(layout, ":", ""), "+", "")
		layoutDir(t, k, dir, layout)
		k.MustKaon("attr", "set", dir, "sys.versioning=2")
		f := dir + "/f"
		var gen [][]byte
		var locals []string
		for i := range 4 {
			local, data := publicFile(t, int64(100000+i*1000))
			locals, gen = append(locals, local), append(gen, data)
		}
		mustPut(t, k, locals[0], f)
		phys0 := stripeColumn(t, k, f, 3)
		if out, err := exec.Command("xrdcp", "-f", "-s", locals[1], k.EP.XRootD+"/"+f).CombinedOutput(); err != nil {
			t.Fatalf("%s: xrdcp overwrite: %v %s", layout, err, out)
		}
		mustPut(t, k, locals[2], f)
		if out, err := exec.Command("xrdcp", "-f", "-s", locals[3], k.EP.XRootD+"/"+f).CombinedOutput(); err != nil {
			t.Fatalf("%s: xrdcp overwrite: %v %s", layout, err, out)
		}
		mustGetEqual(t, k, f, gen[3])
		ids, lines := versionIDs(t, k, f)
		if len(ids) != 2 {
			t.Fatalf("%s: file versions lists %d, want 2:\n%s", layout, len(ids), k.MustKaon("file", "versions", f))
		}
		for i, want := range [][]byte{gen[1], gen[2]} {
			s := sumsOf(want)
			if !strings.Contains(lines[i], " "+strconv.Itoa(len(want))+" ") || !strings.Contains(lines[i], "adler32:"+s.adler) {
				t.Fatalf("%s: version line %q, want size %d and adler32 %s", layout, lines[i], len(want), s.adler)
			}
		}
		// Hidden from listings of the directory, over every protocol.
		if out := k.MustKaon("ls", dir); strings.TrimSpace(out) != "f" {
			t.Fatalf("%s: kaon ls %s: %q", layout, dir, out)
		}
		if r := curl(t, "-X", "PROPFIND", "-H", "Depth: 1", k.EP.HTTP+dir); r.code != 207 || bytes.Contains(r.body, []byte(".sys.v")) {
			t.Fatalf("%s: PROPFIND %s: %d\n%s", layout, dir, r.code, r.body)
		}
		if out, err := exec.Command("xrdfs", xhost, "ls", dir).CombinedOutput(); err != nil || strings.Contains(string(out), ".sys.v") {
			t.Fatalf("%s: xrdfs ls %s: %v %s", layout, dir, err, out)
		}
		// ... and listed when asked for by path.
		vdir := dir + "/.sys.v#.f"
		if out, err := exec.Command("xrdfs", xhost, "ls", vdir).CombinedOutput(); err != nil || strings.Count(string(out), vdir+"/") != 2 {
			t.Fatalf("%s: xrdfs ls %s: %v %s", layout, vdir, err, out)
		}
		if r := curl(t, "-X", "PROPFIND", "-H", "Depth: 1", k.EP.HTTP+davPath(vdir)); r.code != 207 || !bytes.Contains(r.body, []byte(ids[0])) || !bytes.Contains(r.body, []byte(ids[1])) {
			t.Fatalf("%s: PROPFIND %s: %d\n%s", layout, vdir, r.code, r.body)
		}
		// An old version read by path over both protocols.
		mustGetEqual(t, k, davPath(vdir+"/"+ids[0]), gen[1])
		dst := filepath.Join(t.TempDir(), "v")
		if out, err := exec.Command("xrdcp", "-f", "-s", k.EP.XRootD+"/"+vdir+"/"+ids[0], dst).CombinedOutput(); err != nil {
			t.Fatalf("%s: xrdcp of a version: %v %s", layout, err, out)
		}
		if b, _ := os.ReadFile(dst); !bytes.Equal(b, gen[1]) {
			t.Fatalf("%s: xrdcp of version %s: %d bytes, not generation 1", layout, ids[0], len(b))
		}
		// The purged generation 0 leaves the disks.
		waitFor(t, 30*time.Second, func() bool {
			for _, p := range phys0 {
				if _, err := os.Stat(p); err == nil {
					return false
				}
			}
			return true
		}, layout+": the purged version's stripes to be removed")
		// Restore swaps: generation 1 is current, generation 3 a version.
		k.MustKaon("file", "restore-version", f, ids[0])
		mustGetEqual(t, k, f, gen[1])
		after, _ := versionIDs(t, k, f)
		if len(after) != 2 || after[0] != ids[1] {
			t.Fatalf("%s: versions after restore: %v (before %v)", layout, after, ids)
		}
		mustGetEqual(t, k, davPath(vdir+"/"+after[1]), gen[3])
	}

	// Only who may read the file reads its versions.
	f, vdir := "/v-plain/f", "/v-plain/.sys.v#.f"
	ids, _ := versionIDs(t, k, f)
	vurl := k.EP.HTTP + davPath(vdir+"/"+ids[0])
	if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", vurl); out != "200" {
		t.Fatalf("nobody reading a version of a 0644 file: %s", out)
	}
	k.MustKaon("chmod", "600", f)
	if out, _ := asNobody(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-L", vurl); out != "403" {
		t.Fatalf("nobody reading a version of a 0600 file over HTTP: %s", out)
	}
	if out, err := asNobody(t, "xrdcp", "-f", "root://"+xhost+"/"+vdir+"/"+ids[0], "/dev/null"); err == nil || !strings.Contains(strings.ToLower(out), "permission denied") {
		t.Fatalf("nobody xrdcp of a version of a 0600 file: %v %s", err, out)
	}
	if out, err := asNobody(t, harness.Binary(t), "file", "versions", "--url", k.EP.HTTP, f); err == nil || !strings.Contains(out, "read permission denied") {
		t.Fatalf("nobody kaon file versions of a 0600 file: %v %s", err, out)
	}
	if out, err := asNobody(t, harness.Binary(t), "file", "restore-version", "--url", k.EP.HTTP, f, ids[0]); err == nil || !strings.Contains(out, "denied") {
		t.Fatalf("nobody restoring a version: %v %s", err, out)
	}

	// Under sys.recycle the versions are recycled with their file.
	k.MustKaon("attr", "set", "/v-plain", "sys.recycle=on")
	k.MustKaon("rm", f)
	keys := recycleKeys(t, k)
	if keys[f] == "" || keys[vdir] == "" {
		t.Fatalf("recycle ls after rm of a versioned file: %v", keys)
	}
	k.MustKaon("recycle", "restore", keys[vdir])
	k.MustKaon("recycle", "restore", keys[f])
	if got, _ := versionIDs(t, k, f); len(got) != 2 {
		t.Fatalf("versions after restoring from the recycle bin: %v", got)
	}
}

// TestVersionsKeepCutOffOverwrite: the case that asked for versioning. A
// chunked upload cut off before its last chunk must never destroy the
// content it would replace: below sys.versioning either the file is
// unchanged or its replaced content is its newest version, whole.
func TestVersionsKeepCutOffOverwrite(t *testing.T) {
	k := harness.Up(t)
	k.MustKaon("mkdir", "/v")
	k.MustKaon("attr", "set", "/v", "sys.versioning=3")
	local, whole := randomFile(t, 4<<20)
	mustPut(t, k, local, "/v/f")
	cut := exec.Command("bash", "-c", `(head -c 300000 /dev/urandom; sleep 5) | timeout -s KILL 2 curl -sS -L -H 'Transfer-Encoding: chunked' -T - "$0"`, k.EP.HTTP+"/v/f")
	out, _ := cut.CombinedOutput()
	t.Logf("cut-off upload: %s", out)
	// Wait until the storage server is done with the cut-off upload
	// (committed or aborted): its data endpoint logs a request when it
	// has answered, the first upload's and this one's.
	waitFor(t, 60*time.Second, func() bool { return strings.Count(k.Logs(), "msg=http method=PUT path=/kaon/v1/data/") == 2 },
		"the storage server to end the cut-off upload")
	t.Logf("settled: %d commits of /v/f (2: the cut-off upload was committed)", commitsOf(t, k, "/v/f"))
	// Whatever the namespace made of it, the previous content is reachable.
	intact := func() bool {
		if r := get(t, k, "/v/f"); r.code == 200 && bytes.Equal(r.body, whole) {
			return true
		}
		r := curl(t, "-X", "PROPFIND", "-H", "Depth: 1", k.EP.HTTP+davPath("/v/.sys.v#.f"))
		if r.code != 207 {
			return false
		}
		for _, href := range hrefs(r.body) {
			if strings.HasSuffix(href, "/") {
				continue
			}
			if g := curl(t, "-L", k.EP.HTTP+href); g.code == 200 && bytes.Equal(g.body, whole) {
				return true
			}
		}
		return false
	}
	if !intact() {
		r := get(t, k, "/v/f")
		t.Fatalf("the cut-off overwrite destroyed the previous content: /v/f has %d bytes, no version holds the %d before", len(r.body), len(whole))
	}
}

// commitsOf counts the successful commits of path in k's audit log.
func commitsOf(t *testing.T, k *harness.Process, path string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k.Dir, "audit.log"))
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		var r struct{ Op, Path, Result string }
		if json.Unmarshal([]byte(l), &r) == nil && r.Op == "commit" && r.Path == path && r.Result == "ok" {
			n++
		}
	}
	return n
}

// hrefs returns the D:href values of a PROPFIND answer.
func hrefs(body []byte) []string {
	var out []string
	for _, part := range strings.Split(string(body), "<D:href>")[1:] {
		if i := strings.Index(part, "</D:href>"); i >= 0 {
			out = append(out, part[:i])
		}
	}
	return out
}

// TestVersionsCLI: the CLI verbs, their errors (naming the path and the
// version) and versions following kaon cp and kaon mv.
func TestVersionsCLI(t *testing.T) {
	k := harness.Up(t)
	k.MustKaon("mkdir", "/c")
	if _, errs, code := k.Kaon("attr", "set", "/c", "sys.versioning=some"); code == 0 || !strings.Contains(errs, "sys.versioning") {
		t.Fatalf("a bad sys.versioning: %d %q", code, errs)
	}
	k.MustKaon("attr", "set", "/c", "sys.versioning=5")
	k.MustKaon("mkdir", "/c/sub")
	if out := k.MustKaon("attr", "get", "/c/sub", "sys.versioning"); !strings.Contains(out, `"5"`) {
		t.Fatalf("sys.versioning not inherited by a new directory: %q", out)
	}
	if _, errs, code := k.Kaon("file", "versions"); code != 2 || !strings.Contains(errs, "file versions PATH") {
		t.Fatalf("file versions without a path: %d %q", code, errs)
	}
	first, data := randomFile(t, 5000)
	second, _ := randomFile(t, 6000)
	k.MustKaon("cp", first, "kaon:/c/f")
	if ids, _ := versionIDs(t, k, "/c/f"); len(ids) != 0 {
		t.Fatalf("versions of a file never replaced: %v", ids)
	}
	k.MustKaon("cp", second, "kaon:/c/f")
	ids, lines := versionIDs(t, k, "/c/f")
	if len(ids) != 1 || !strings.Contains(lines[0], " 5000 ") {
		t.Fatalf("versions after kaon cp over the file: %v", lines)
	}
	if out := k.MustKaon("ls", "/c/.sys.v#.f"); strings.TrimSpace(out) != ids[0] {
		t.Fatalf("kaon ls of the version folder: %q", out)
	}
	if _, errs, code := k.Kaon("file", "versions", "/c"); code == 0 || !strings.Contains(errs, "/c: is a directory") {
		t.Fatalf("file versions of a directory: %d %q", code, errs)
	}
	if _, errs, code := k.Kaon("file", "restore-version", "/c/f", "1.0000abcd"); code == 0 ||
		!strings.Contains(errs, "/c/f") || !strings.Contains(errs, "1.0000abcd") {
		t.Fatalf("restore of a version that does not exist: %d %q", code, errs)
	}
	k.MustKaon("mv", "/c/f", "/c/g")
	if out := k.MustKaon("file", "restore-version", "/c/g", ids[0]); !strings.Contains(out, "restored /c/g") {
		t.Fatalf("restore-version: %q", out)
	}
	mustGetEqual(t, k, "/c/g", data)
	if ids, lines := versionIDs(t, k, "/c/g"); len(ids) != 1 || !strings.Contains(lines[0], " 6000 ") {
		t.Fatalf("versions after the restore: %v", lines)
	}
}

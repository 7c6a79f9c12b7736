package move

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestConvert: `kaon file convert` rewrites a file from replica:2 to
// ec:4+2 in its space, and from the default space's disks to another
// space (new disks added with fs add --space) with another layout; a
// directory policy (sys.convert.space) moves every file below to that
// space. Bytes and adler32 stay the same (read back with xrdcp and curl),
// the old stripes are deleted, only root may convert, and a missing space
// is named in the error.
func TestConvert(t *testing.T) {
	k := harness.Up(t, "--fs", "6", "--cap-ttl", "3s")
	node := strings.Fields(fsRow(t, k, "1"))[0]
	k.MustKaon("space", "define", "fast")
	var roots []string
	for i := range 3 {
		p := filepath.Join(k.Dir, "fast", fmt.Sprint(i))
		k.MustKaon("fs", "add", "--node", node, "--path", p, "--space", "fast")
		roots = append(roots, p)
	}
	harness.WaitFor(t, 30*time.Second, "the fast filesystems to boot", func() bool { return strings.Count(k.MustKaon("fs", "ls"), "booted") == 9 })
	layoutDir(t, k, "/r", "replica:2")
	files := map[string][]byte{}
	for _, name := range []string{"a", "b"} {
		local, data := randomBytes(t, 3<<20+17)
		if err := putHTTP(k, local, "/r/"+name); err != nil {
			t.Fatal(err)
		}
		files["/r/"+name] = data
	}
	layoutDir(t, k, "/pol/sub", "plain")
	for _, name := range []string{"/pol/x", "/pol/sub/y"} {
		local, data := randomBytes(t, 1<<20+5)
		if err := putXrd(k, local, name); err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
	fastIDs := map[uint32]bool{7: true, 8: true, 9: true}

	out := k.MustKaon("file", "convert", "/r/a", "--layout", "ec:4+2")
	st := stripesOf(t, k, "/r/a")
	if !strings.Contains(out, "layout ec:4+2") || len(st) != 6 {
		t.Fatalf("replica:2 to ec:4+2: %s, stripes %v", out, st)
	}
	out = k.MustKaon("file", "convert", "/r/b", "--space", "fast", "--layout", "ec:2+1")
	st = stripesOf(t, k, "/r/b")
	for fs := range st {
		if !fastIDs[fs] {
			t.Fatalf("converted to space fast but a stripe is on fs %d: %s", fs, out)
		}
	}
	if len(st) != 3 {
		t.Fatalf("ec:2+1 in fast: stripes %v", st)
	}
	// The directory policy: every file below goes to fast.
	k.MustKaon("attr", "set", "/pol", "sys.convert.space=fast")
	harness.WaitFor(t, time.Minute, "the policy to move /pol's files to space fast", func() bool {
		for _, p := range []string{"/pol/x", "/pol/sub/y"} {
			for fs := range stripesOf(t, k, p) {
				if !fastIDs[fs] {
					return false
				}
			}
		}
		return true
	})
	if out := k.MustKaon("file", "convert", "--status"); !strings.Contains(out, "converted:   2 files") {
		t.Fatalf("convert --status:\n%s", out)
	}
	dir := t.TempDir()
	for p, want := range files {
		if got, err := getXrd(k, dir, p); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("xrdcp %s after conversion: %v, %d bytes", p, err, len(got))
		}
	}
	verifyAll(t, k, files)
	checkNoOrphans(t, k, append(upRoots(k, 6), roots...), files, 0)

	if _, errs, code := k.Kaon("file", "convert", "/r/a", "--space", "nosuch"); code == 0 || !strings.Contains(errs, "nosuch") {
		t.Fatalf("convert to a missing space: %d %s", code, errs)
	}
	cmd := exec.Command(harness.Binary(t), "file", "convert", "/r/a", "--layout", "plain")
	cmd.Env = append(os.Environ(), "KAON_URL="+k.EP.HTTP)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "/r/a: root only") {
		t.Fatalf("nobody converting a file: %v %s", err, out)
	}
}

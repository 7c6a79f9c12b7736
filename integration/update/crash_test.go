package update

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/backend/posix"
)

// TestUpdatesThroughKill9: update sessions run without a pause on a
// replica:2 and an ec:2+1 file (stripes on two storage servers) while
// each storage server and the namespace server are killed with kill -9
// in turn and restarted; each session commits twice (kXR_sync after two
// writes, the close after the third). Then what the clients were told is
// checked against what is stored, as Jepsen does (crash_check.py): the
// file holds every write an acknowledged sync or close committed and, of
// the commits whose outcome the client never learnt, each whole or not
// at all, in session order — no acknowledged write lost, no write torn,
// no byte from nowhere; and on disk
// every stripe the namespace does not call stale is at the file's data
// version (a replica byte-equal to what clients read) or holds the
// journal that takes it there: no replica disagrees unnoticed.
func TestUpdatesThroughKill9(t *testing.T) {
	m, a, b, booted := crashCluster(t)
	work := t.TempDir()
	os.Chmod(work, 0o755)
	for _, s := range []string{"crash_writer.py", "crash_check.py"} {
		src, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(work, s), src, 0o644)
	}
	initial := make([]byte, 256<<10)
	rand.Read(initial)
	initialPath := filepath.Join(work, "initial")
	os.WriteFile(initialPath, initial, 0o644)
	type writer struct {
		path, log, stop string
		cmd             *exec.Cmd
	}
	var writers []*writer
	for i, l := range []string{"replica:2", "ec:2+1:4096"} {
		dir := fmt.Sprintf("/d%d", i)
		m.MustKaon("mkdir", dir)
		m.MustKaon("attr", "set", dir, "sys.forced.layout="+l)
		p := dir + "/f"
		m.MustKaon("cp", initialPath, "kaon:"+p)
		w := &writer{path: p, log: filepath.Join(work, fmt.Sprintf("log%d", i)), stop: filepath.Join(work, fmt.Sprintf("stop%d", i))}
		w.cmd = exec.Command("/usr/bin/python3", filepath.Join(work, "crash_writer.py"), m.EP.XRootD, p, strconv.Itoa(i+1), w.log, w.stop)
		w.cmd.Env = append(os.Environ(), "XRD_CONNECTIONRETRY=1", "XRD_REQUESTTIMEOUT=20", "XRD_STREAMERRORWINDOW=0")
		var errb bytes.Buffer
		w.cmd.Stderr = &errb
		if err := w.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			os.WriteFile(w.stop, nil, 0o644)
			w.cmd.Wait()
			if t.Failed() && errb.Len() > 0 {
				t.Logf("writer of %s: %s", w.path, errb.String())
			}
		})
		writers = append(writers, w)
	}
	acked := func(w *writer) int {
		b, _ := os.ReadFile(w.log)
		return strings.Count(string(b), `"closed": true`)
	}
	progress := func(step string) {
		var before []int
		for _, w := range writers {
			before = append(before, acked(w))
		}
		harness.WaitFor(t, 2*time.Minute, "3 more acknowledged sessions on every file "+step, func() bool {
			for i, w := range writers {
				if acked(w) < before[i]+3 {
					return false
				}
			}
			return true
		})
	}
	for _, victim := range []struct {
		name string
		p    *harness.Process
	}{{"storage server a", a}, {"storage server b", b}, {"the namespace server", m}, {"storage server a", a}} {
		progress("before killing " + victim.name)
		victim.p.Kill9()
		time.Sleep(500 * time.Millisecond)
		victim.p.Restart()
		harness.WaitFor(t, time.Minute, "4 filesystems to boot after restarting "+victim.name, booted)
	}
	progress("after the kills")
	for _, w := range writers {
		os.WriteFile(w.stop, nil, 0o644)
	}
	for _, w := range writers {
		done := make(chan error, 1)
		go func() { done <- w.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			w.cmd.Process.Kill()
			t.Fatalf("the writer of %s did not stop within 2 minutes", w.path)
		}
	}
	for i, w := range writers {
		out, err := exec.Command("/usr/bin/python3", filepath.Join(work, "crash_check.py"), m.EP.XRootD, w.path,
			strconv.Itoa(i+1), w.log, initialPath).Output()
		var r struct {
			OK        bool   `json:"ok"`
			Why       string `json:"why"`
			Committed int    `json:"committed"`
			Unknown   []int  `json:"unknown"`
			Applied   []int  `json:"applied_unknown"`
			Size      int    `json:"size"`
		}
		if jerr := json.Unmarshal(out, &r); jerr != nil {
			t.Fatalf("crash_check.py %s: %v %v\n%s", w.path, err, jerr, out)
		}
		if !r.OK {
			t.Fatalf("%s: %s\n%s\nhistory:\n%s", w.path, r.Why, out, readFile(w.log))
		}
		t.Logf("%s: %d sessions acknowledged, %d of unknown outcome (%v applied), %d bytes", w.path, r.Committed, len(r.Unknown), r.Applied, r.Size)
		checkStripesOnDisk(t, m, w.path, i == 0, true)
	}
}

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }

// crashCluster starts a namespace server and two storage servers, a and
// b, of two filesystems each; booted says whether all four are booted
// (it is waited for here).
func crashCluster(t *testing.T) (m, a, b *harness.Process, booted func() bool) {
	mdir := t.TempDir()
	port, xport := harness.FreePort(t), harness.FreePort(t)
	m = harness.Start(t, mdir, "mgm", "--data", mdir, "--http", fmt.Sprintf("127.0.0.1:%d", port),
		"--xrootd", fmt.Sprintf("127.0.0.1:%d", xport))
	key := filepath.Join(mdir, "keys", "capability.key")
	fst := func(node string, fs ...string) *harness.Process {
		d := t.TempDir()
		args := []string{"fst", "--mgm", m.EP.HTTP, "--mgm-xrootd", fmt.Sprintf("127.0.0.1:%d", xport), "--key", key,
			"--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--node", node, "--data", d}
		for _, f := range fs {
			args = append(args, "--fs", filepath.Join(d, f))
		}
		return harness.Start(t, d, args...)
	}
	a = fst("a", "a1", "a2")
	b = fst("b", "b1", "b2")
	booted = func() bool { return strings.Count(m.MustKaon("fs", "ls"), "booted") == 4 }
	harness.WaitFor(t, 30*time.Second, "4 filesystems to boot", booted)
	return m, a, b, booted
}

// TestKill9BetweenReplyAndApply: a session of 2000 random 4 KiB writes
// into a replica:2 file commits with kXR_sync; the moment the client has
// the acknowledgement both storage servers are killed with kill -9. With
// the applies after the reply (the default)
// they are still under way then; with them before it (stripes on
// filesystems with blocksums=off), the kill falls just after the
// acknowledgement.
// After the restart the file reads byte-exact as acknowledged, and every
// replica is at the file's version, byte-equal, or holds the journal
// that takes it there. The test logs how many journals the kill left
// unapplied (where the kill fell).
func TestKill9BetweenReplyAndApply(t *testing.T) {
	m, a, b, booted := crashCluster(t)
	work := t.TempDir()
	os.Chmod(work, 0o755)
	m.MustKaon("mkdir", "/k")
	m.MustKaon("attr", "set", "/k", "sys.forced.layout=replica:2")
	want := make([]byte, 16<<20)
	rand.Read(want)
	initial := filepath.Join(work, "initial")
	os.WriteFile(initial, want, 0o644)
	m.MustKaon("cp", initial, "kaon:/k/f")
	var ops bytes.Buffer
	for range 2000 {
		var rec [8 + 4096]byte
		rand.Read(rec[:])
		off := int64(binary.BigEndian.Uint64(rec[:8])%uint64(len(want)/4096)) * 4096
		binary.BigEndian.PutUint64(rec[:8], uint64(off))
		ops.Write(rec[:])
		copy(want[off:], rec[8:])
	}
	opsPath := filepath.Join(work, "ops")
	os.WriteFile(opsPath, ops.Bytes(), 0o644)
	script := filepath.Join(work, "sync_then_wait.py")
	src, err := os.ReadFile("sync_then_wait.py")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(script, src, 0o644)
	cmd := exec.Command("/usr/bin/python3", script, m.EP.XRootD, "/k/f", opsPath)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, _ := cmd.StdoutPipe()
	in, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		b := make([]byte, 64)
		n, _ := out.Read(b)
		line <- string(b[:n])
	}()
	select {
	case l := <-line:
		if !strings.HasPrefix(l, "synced") {
			t.Fatalf("the session's writes and sync: %q %s", l, errb.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the session's writes and sync did not end within 2 minutes: %s", errb.String())
	}
	a.Kill9()
	b.Kill9()
	in.Close()
	unapplied := 0
	for _, p := range []*harness.Process{a, b} {
		js, _ := filepath.Glob(filepath.Join(p.Dir, "*", "*", "*.journal"))
		unapplied += len(js)
	}
	t.Logf("the kill -9 after the acknowledged sync left %d of 2 journals unapplied", unapplied)
	a.Restart()
	b.Restart()
	harness.WaitFor(t, time.Minute, "4 filesystems to boot after the restarts", booted)
	local := filepath.Join(work, "read")
	m.MustKaon("cp", "kaon:/k/f", local)
	if got, _ := os.ReadFile(local); !bytes.Equal(got, want) {
		t.Fatalf("/k/f after kill -9 of both storage servers right after the acknowledged sync: %d bytes, the acknowledged content: %v", len(got), bytes.Equal(got, want))
	}
	checkStripesOnDisk(t, m, "/k/f", true, false)
}

var (
	versionLine = regexp.MustCompile(`(?m)^Data version: (\d+)$`)
	staleLine   = regexp.MustCompile(`(?m)^Stale stripes: ([\d ]+) `)
)

// checkStripesOnDisk: every stripe of path the namespace does not call
// stale is at its data version or holds a journal that takes it there;
// a replica at it holds what clients read (and, appended to, its sums
// file).
func checkStripesOnDisk(t *testing.T, m *harness.Process, path string, replica, appended bool) {
	t.Helper()
	info := m.MustKaon("file", "info", path)
	vm := versionLine.FindStringSubmatch(info)
	if vm == nil {
		t.Fatalf("file info %s has no data version:\n%s", path, info)
	}
	version, _ := strconv.ParseUint(vm[1], 10, 64)
	stale := map[string]bool{}
	if sm := staleLine.FindStringSubmatch(info); sm != nil {
		for _, f := range strings.Fields(sm[1]) {
			stale[f] = true
		}
	}
	local := filepath.Join(t.TempDir(), "read")
	m.MustKaon("cp", "kaon:"+path, local)
	want, _ := os.ReadFile(local)
	current := 0
	for _, l := range strings.Split(info, "\n") {
		f := strings.Fields(l)
		if len(f) != 4 || !strings.HasPrefix(f[3], "/") || stale[f[0]] {
			continue
		}
		v := stripeVersion(t, f[3])
		switch {
		case v == version:
			if replica {
				if err := sameReplica(f[3], want); err != nil {
					t.Errorf("%s: stripe %s (%s) is at data version %d but %v", path, f[0], f[3], v, err)
				}
				// Appended to (crash_writer's odd sessions): its block
				// sums moved beside it (posix format 3).
				if _, err := os.Stat(f[3] + ".sums"); appended && err != nil {
					t.Errorf("%s: stripe %s was appended to and has no sums file: %v", path, f[0], err)
				}
			}
			current++
		case v < version:
			if jv, ok := journalVersion(f[3] + ".journal"); !ok || jv != version {
				t.Errorf("%s: stripe %s is at data version %d, the file at %d, not recorded stale, and no journal takes it there", path, f[0], v, version)
			}
		default:
			t.Errorf("%s: stripe %s is at data version %d, past the file's %d", path, f[0], v, version)
		}
	}
	t.Logf("%s: data version %d, %d stripes current on disk, stale %v", path, version, current, stale)
}

// sameReplica checks that the replica file p holds want, every block of
// it verifying against the block sums after its data (the updates kept
// them current through the crashes).
func sameReplica(p string, want []byte) error {
	fid, err := strconv.ParseUint(filepath.Base(p), 16, 64)
	if err != nil {
		return err
	}
	r, err := posix.New(filepath.Dir(filepath.Dir(p)), posix.Options{}).Open(fid)
	if err != nil {
		return err
	}
	defer r.Close()
	if !r.BlockSums() {
		return fmt.Errorf("has no block sums")
	}
	got := make([]byte, r.Size())
	if n, err := r.ReadAt(got, 0); n != len(got) || (err != nil && err != io.EOF) {
		return fmt.Errorf("reads %d of %d bytes: %w", n, len(got), err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("differs from what clients read (%d bytes, they read %d)", len(got), len(want))
	}
	return nil
}

// stripeVersion is the user.kaon.version of a stripe file (0 without).
func stripeVersion(t *testing.T, p string) uint64 {
	buf := make([]byte, 32)
	n, err := unix.Getxattr(p, "user.kaon.version", buf)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(string(buf[:n]), 10, 64)
	return v
}

// journalVersion is the version a prepared journal (backend/posix
// journal.go) takes its stripe to.
func journalVersion(p string) (uint64, bool) {
	b, err := os.ReadFile(p)
	if err != nil || len(b) < 16 || string(b[len(b)-8:]) != "KAONJRN1" {
		return 0, false
	}
	hl := int(binary.BigEndian.Uint32(b[len(b)-16:]))
	if hl > len(b)-16 {
		return 0, false
	}
	var h struct{ Meta struct{ Version uint64 } }
	if json.Unmarshal(b[len(b)-16-hl:len(b)-16], &h) != nil {
		return 0, false
	}
	return h.Meta.Version, true
}

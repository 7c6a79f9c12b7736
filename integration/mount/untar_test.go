package mount_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/integration/harness"
)

// auditOps counts the namespace's audited mutations of path by op
// (DATA/audit.log): "update" is an update session's commit, "commit" an
// upload's.
func auditOps(t *testing.T, up *harness.Process, path string) map[string]int {
	t.Helper()
	f, err := os.Open(filepath.Join(up.Dir, "audit.log"))
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	ops := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l struct{ Op, Path, Result string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Path == path && l.Result == "ok" {
			ops[l.Op]++
		}
	}
	return ops
}

var statLine = regexp.MustCompile(`Mode: (\d+) .*Uid: (\d+)\s+Gid: (\d+)`)

// nsOwner is path's mode, uid and gid as the namespace holds them.
func nsOwner(t *testing.T, up *harness.Process, path string) (mode, uid, gid int) {
	t.Helper()
	m := statLine.FindStringSubmatch(up.MustKaon("stat", path))
	if m == nil {
		t.Fatalf("kaon stat %s: no mode line", path)
	}
	mo, _ := strconv.ParseInt(m[1], 8, 32)
	u, _ := strconv.Atoi(m[2])
	g, _ := strconv.Atoi(m[3])
	return int(mo), u, g
}

var idLine = regexp.MustCompile(`(?m)^\s*ID: (\d+)$`)

// nsID is path's id in the namespace (which names its stripes).
func nsID(t *testing.T, up *harness.Process, path string) uint64 {
	t.Helper()
	m := idLine.FindStringSubmatch(up.MustKaon("stat", path))
	if m == nil {
		t.Fatalf("kaon stat %s: no id line", path)
	}
	id, _ := strconv.ParseUint(m[1], 10, 64)
	return id
}

// curlGet reads path from the namespace's HTTP front end (another client
// of the files a mount closed).
func curlGet(t *testing.T, up *harness.Process, path string) []byte {
	t.Helper()
	out, err := exec.Command("curl", "-sSf", "-L", up.EP.HTTP+path).Output()
	if err != nil {
		t.Fatalf("curl GET %s: %v", path, err)
	}
	return out
}

// TestUntarUploads: a file the mount created (or cut to 0) and wrote
// whole is sent at close as one upload that rewrites it — the namespace
// audits an upload's commit and no update session — and keeps what was
// set on it through the mount before the close: tar's owner and mode
// (fchown, fchmod), an extended attribute; content, mode and owner as
// curl and `kaon stat` see them after close. A locked file is updated in
// place instead (the namespace refuses to rewrite it): its lock, the
// namespace's of its id, still excludes another open file description
// after an fsync.
func TestUntarUploads(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/ut")
	m := newMount(t, up.EP.HTTP, "/ut", "")

	type ent struct {
		name     string
		mode     int64
		uid, gid int
		size     int
	}
	files := []ent{{"a/x.go", 0o644, 0, 0, 3000}, {"a/b/run.sh", 0o755, 1234, 5678, 1},
		{"a/b/secret", 0o600, 1234, 0, 100 << 10}, {"a/big", 0o640, 0, 5678, 1<<20 + 7}}
	content := map[string][]byte{}
	mtime := time.Date(2020, 2, 3, 4, 5, 6, 0, time.UTC)
	var arch bytes.Buffer
	tw := tar.NewWriter(&arch)
	for _, d := range []string{"a/", "a/b/"} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: mtime})
	}
	for _, f := range files {
		b := make([]byte, f.size)
		rand.Read(b)
		content[f.name] = b
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, Size: int64(f.size), ModTime: mtime})
		tw.Write(b)
	}
	tw.Close()
	tf := filepath.Join(t.TempDir(), "a.tar")
	os.WriteFile(tf, arch.Bytes(), 0o644)
	if out, err := exec.Command("tar", "-C", m.mp, "-xpf", tf).CombinedOutput(); err != nil {
		t.Fatalf("tar -x into the mount: %v\n%s", err, out)
	}
	for _, f := range files {
		p := "/ut/" + f.name
		if got := curlGet(t, up, p); !bytes.Equal(got, content[f.name]) {
			t.Errorf("%s: curl reads %d bytes after tar closed it, want the %d written", p, len(got), f.size)
		}
		if mo, u, g := nsOwner(t, up, p); mo != int(f.mode) || u != f.uid || g != f.gid {
			t.Errorf("%s: mode %o uid %d gid %d in the namespace, want %o %d %d (tar's)", p, mo, u, g, f.mode, f.uid, f.gid)
		}
		if ops := auditOps(t, up, p); ops["update"] != 0 || ops["commit"] != 1 {
			t.Errorf("%s: audited %v; want one upload's commit and no update session", p, ops)
		}
	}

	// Set through the descriptor before the close: kept by the rewrite.
	p := filepath.Join(m.mp, "kept")
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(fd, []byte("hello"))
	if err := unix.Fsetxattr(fd, "user.k", []byte("v"), 0); err != nil {
		t.Fatalf("fsetxattr: %v", err)
	}
	if err := unix.Fchmod(fd, 0o640); err != nil {
		t.Fatalf("fchmod: %v", err)
	}
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close: %v", err)
	}
	// Cut to 0 and written again: a rewrite too.
	if err := os.WriteFile(p, []byte("rewritten"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := string(curlGet(t, up, "/ut/kept")); got != "rewritten" {
		t.Errorf("kept: curl reads %q after the rewrite", got)
	}
	if mo, _, _ := nsOwner(t, up, "/ut/kept"); mo != 0o640 {
		t.Errorf("kept: mode %o in the namespace, want 0640 (fchmod before the close)", mo)
	}
	if v := up.MustKaon("attr", "get", "/ut/kept", "user.k"); v != "user.k=\"v\"\n" && v != "user.k=\"v\"" {
		t.Errorf("kept: user.k is %q in the namespace, want \"v\" (set before the close)", v)
	}
	// The truncation itself may go first as a change of its own: with
	// the write-back cache the kernel sends times with it, and an
	// explicit time flushes what the journal holds.
	if ops := auditOps(t, up, "/ut/kept"); ops["commit"] != 2 || ops["update"] > ops["truncate"] {
		t.Errorf("kept: audited %v; want two uploads' commits, no update session but a truncation's", ops)
	}

	// Locked through the mount: updated in place, the lock holds on.
	lp := filepath.Join(m.mp, "locked")
	lf, err := os.OpenFile(lp, os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("flock: %v", err)
	}
	lf.Write([]byte("under a lock"))
	if err := lf.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	other, err := os.Open(lp)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != syscall.EWOULDBLOCK {
		t.Errorf("flock by another open file description after the fsync: %v, want EWOULDBLOCK (the lock held)", err)
	}
	if ops := auditOps(t, up, "/ut/locked"); ops["update"] != 1 {
		t.Errorf("locked: audited %v; want its fsync as one update in place", ops)
	}
}

// TestAttrsCommittedWithContent: a mode and a modification time set on
// a file the mount created, before its close, travel with the file's
// content in its upload's one commit — the namespace audits no chmod
// and no utimes of their own — while other clients see the file as it
// was created (its create mode) until the close, and what the close
// acknowledged stays when the daemon is killed right after: content,
// mode and time as curl and `kaon stat` see them. Tar's fchown to the
// owner the file has and fchmod commit nothing of their own either.
func TestAttrsCommittedWithContent(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/ca")
	m := newMount(t, up.EP.HTTP, "/ca", "")

	p := filepath.Join(m.mp, "f")
	// Without O_CLOEXEC: nsOwner below execs `kaon stat` while fd is
	// open, and an exec closing its copy would send a FLUSH — which
	// commits the file with its mode before the check that it is not
	// committed yet; the child's copy is closed at its exit instead,
	// after it answered.
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(fd, []byte("content"))
	if err := unix.Fchmod(fd, 0o751); err != nil {
		t.Fatalf("fchmod: %v", err)
	}
	mt := time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)
	ts := []unix.Timespec{unix.NsecToTimespec(mt.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), ts, 0); err != nil {
		t.Fatalf("futimens: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&0o7777 != 0o751 || st.Mtim.Sec != mt.Unix() {
		t.Errorf("fstat through the mount before the close: mode %o mtime %d, %v; want 0751 and %d (what the caller set)", st.Mode&0o7777, st.Mtim.Sec, err, mt.Unix())
	}
	// Not committed yet: others see the file as created.
	if mo, _, _ := nsOwner(t, up, "/ca/f"); mo != 0o600 {
		t.Errorf("before the close the namespace shows mode %o, want 0600 (the create's; the chmod is not committed)", mo)
	}
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close: %v", err)
	}
	m.kill()

	if got := string(curlGet(t, up, "/ca/f")); got != "content" {
		t.Errorf("curl reads %q after close and kill -9 of the daemon, want %q", got, "content")
	}
	if mo, _, _ := nsOwner(t, up, "/ca/f"); mo != 0o751 {
		t.Errorf("mode %o in the namespace after close and kill -9, want 0751 (fchmod before the close)", mo)
	}
	out, err := exec.Command("curl", "-sSfI", up.EP.HTTP+"/ca/f").Output()
	if want := "Last-Modified: " + mt.Format(http.TimeFormat); err != nil || !strings.Contains(string(out), want) {
		t.Errorf("curl HEAD after close and kill -9: %v\n%s\nwant %q (futimens before the close)", err, out, want)
	}
	if ops := auditOps(t, up, "/ca/f"); ops["chmod"] != 0 || ops["utimes"] != 0 || ops["commit"] != 1 || ops["update"] != 0 {
		t.Errorf("audited %v; want the upload's one commit carrying mode and time, no chmod, utimes or update of their own", ops)
	}

	// tar (root, -p) extracting root's files: fchown to the owner the file
	// has and fchmod go with the content.
	m2 := newMount(t, up.EP.HTTP, "/ca", m.mp)
	var arch bytes.Buffer
	tw := tar.NewWriter(&arch)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "t.go", Mode: 0o640, Size: 5, ModTime: mt})
	tw.Write([]byte("hello"))
	tw.Close()
	tf := filepath.Join(t.TempDir(), "t.tar")
	os.WriteFile(tf, arch.Bytes(), 0o644)
	if out, err := exec.Command("tar", "-C", m2.mp, "-xpf", tf).CombinedOutput(); err != nil {
		t.Fatalf("tar -x into the mount: %v\n%s", err, out)
	}
	if mo, u, g := nsOwner(t, up, "/ca/t.go"); mo != 0o640 || u != 0 || g != 0 {
		t.Errorf("t.go: mode %o uid %d gid %d in the namespace, want 0640 0 0 (tar's)", mo, u, g)
	}
	if ops := auditOps(t, up, "/ca/t.go"); ops["chmod"] != 0 || ops["chown"] != 0 || ops["commit"] != 1 {
		t.Errorf("t.go: audited %v; want tar's fchown and fchmod in the upload's commit, none of their own", ops)
	}
}

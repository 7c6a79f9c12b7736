package mount_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/integration/fusetest"
	"github.com/kaon-storage/kaon/integration/harness"
)

// fstDataSent is what the storage server sent of file data so far
// (kaon_http_sent_bytes_total of its data route) and how many data
// requests it answered.
func fstDataSent(t *testing.T, up *harness.Process) (bytesSent, requests float64) {
	t.Helper()
	resp, err := http.Get(up.EP.FSTHTTP + "/metrics")
	if err != nil {
		t.Fatalf("storage server metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `role="fst"`) || !strings.Contains(line, `route="data"`) {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		switch {
		case strings.HasPrefix(line, "kaon_http_sent_bytes_total{"):
			bytesSent += v
		case strings.HasPrefix(line, "kaon_http_requests_total{"):
			requests += v
		}
	}
	return bytesSent, requests
}

func xattr(t *testing.T, p, name string) string {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := unix.Getxattr(p, name, buf)
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", p, name, err)
	}
	return string(buf[:n])
}

// stripeOf finds the stripe file of the file with inode ino under the
// data directory dir (posix.PhysPath: <fs root>/<%08x ino/10000>/<%08x ino>).
func stripeOf(t *testing.T, dir string, ino uint64) string {
	t.Helper()
	want := filepath.Join(fmt.Sprintf("%08x", ino/10000), fmt.Sprintf("%08x", ino))
	var found string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && strings.HasSuffix(p, "/"+want) {
			found = p
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no stripe %s under %s", want, dir)
	}
	return found
}

// TestDirectRead: on `kaon up` (posix filesystems on this host) a file
// read through the mount is read from its stripe on this host, never
// from the storage server (its data route sends nothing): through the
// daemon when the stripe carries block sums, by the kernel itself (FUSE
// passthrough) when the stripe is the file's bytes exactly; content
// byte-equal either way (the latter on a filesystem set to keep no
// block sums). A caller the namespace does not let read the
// file gets EACCES at the open, with no descriptor, even where the mode
// bits the kernel sees would let it. A file changed elsewhere after an
// open is read new by the next open (close-to-open), still directly.
func TestDirectRead(t *testing.T) {
	up := harness.Up(t, "--auth", "unix,token")
	up.MustKaon("mkdir", "/direct")
	up.MustKaon("chmod", "777", "/direct")
	m := newMount(t, up.EP.HTTP, "/direct", "", "-o", "nowriteback") // the kernel refuses passthrough with write-back
	if !strings.Contains(m.log.String(), "passthrough true") {
		t.Errorf("the kernel did not take FUSE passthrough (kernel >= 6.9, root):\n%s", m.log)
	}
	p := filepath.Join(m.mp, "f")
	want := make([]byte, 3<<20+12345)
	rand.Read(want)
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	read := func(step, path, wantPath string, want []byte) {
		t.Helper()
		sent, reqs := fstDataSent(t, up)
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: read %d bytes, %v; want %d bytes equal", step, len(got), err, len(want))
		}
		if sent2, reqs2 := fstDataSent(t, up); sent2 != sent || reqs2 != reqs {
			t.Errorf("%s: the storage server served the data: %v bytes in %v requests", step, sent2-sent, reqs2-reqs)
		}
		buf := make([]byte, 64)
		n, err := unix.Getxattr(path, "kaon.datapath", buf)
		if dp := string(buf[:max(n, 0)]); err != nil || dp != wantPath && (wantPath != "direct" || dp != "local" && dp != "passthrough") {
			t.Errorf("%s: kaon.datapath %q, %v; want %q\n%s", step, dp, err, wantPath, m.log)
		}
	}

	// From now on the filesystems keep no block sums (fs config
	// blocksums=off; set before the mount's first direct open, which
	// lists the filesystems and their settings).
	for _, line := range strings.Split(up.MustKaon("fs", "ls"), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 1 {
			up.MustKaon("fs", "config", f[1], "blocksums=off")
		}
	}
	// A stripe written before, with block sums: the daemon reads the
	// local file.
	read("stripe with block sums", p, "local", want)

	// A new stripe is the file's bytes exactly: the kernel reads it
	// itself. The setting reaches the storage server with its next
	// heartbeat: files are written until one lands without sums.
	i := 0
	waitFor(t, time.Minute, "fs config blocksums=off: a new stripe without block sums", func() bool {
		// A new file each time: an existing stripe keeps its sums
		// through updates.
		p = filepath.Join(m.mp, fmt.Sprintf("plain-%d", i))
		i++
		if err := os.WriteFile(p, want, 0o644); err != nil {
			t.Fatal(err)
		}
		// The namespace's id names the stripe: a file written whole from
		// empty is rewritten under a new one, which the mount's inode
		// number follows only once the kernel looked the file up again.
		fi, err := os.Stat(stripeOf(t, up.Dir, nsID(t, up, "/direct/"+filepath.Base(p))))
		if err == nil && fi.Size() == int64(len(want)) {
			return true
		}
		time.Sleep(200 * time.Millisecond) // a file each poll: not every 5 ms
		return false
	})
	var before struct {
		BytesOut int64 `json:"bytes_out"`
	}
	json.Unmarshal([]byte(xattr(t, m.mp, "kaon.stats")), &before)
	read("stripe without block sums", p, "passthrough", want)
	var after struct {
		BytesOut int64 `json:"bytes_out"`
		Extra    struct {
			Direct map[string]any `json:"direct"`
		} `json:"extra"`
	}
	stats := xattr(t, m.mp, "kaon.stats")
	json.Unmarshal([]byte(stats), &after)
	if after.BytesOut != before.BytesOut || after.Extra.Direct["passthrough"] != true {
		t.Errorf("passthrough read: the daemon sent %d bytes; kaon.stats: %s", after.BytesOut-before.BytesOut, stats)
	}

	// An update in place made elsewhere while a passthrough descriptor is
	// open: the kernel reads the stripe itself, and once the update's
	// commit returned its bytes are there — a stripe a mount may hand to
	// the kernel has its journal applied before the commit's reply.
	pt, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	patch := make([]byte, 2<<20) // an apply that takes a while: written and synced
	rand.Read(patch)
	patchSrc := filepath.Join(fusetest.TempDir(t), "patch")
	os.WriteFile(patchSrc, patch, 0o644)
	rng := fmt.Sprintf("Content-Range: bytes 70000-%d/*", 70000+len(patch)-1)
	if out, err := exec.Command("curl", "-sSf", "-L", "-T", patchSrc, "-H", rng, up.EP.HTTP+"/direct/"+filepath.Base(p)).CombinedOutput(); err != nil {
		t.Fatalf("curl PUT %s: %v\n%s", rng, err, out)
	}
	got := make([]byte, len(patch))
	if n, err := pt.ReadAt(got, 70000); n != len(patch) || !bytes.Equal(got, patch) {
		t.Errorf("the passthrough descriptor open during an update, right after its commit returned: %d bytes, %v, the update's bytes %v", n, err, bytes.Equal(got, patch))
	}
	pt.Close()

	// A flock taken through a passthrough open is released at its last
	// close, as any other open's: another open may then take it.
	flockOpen := func(step string, how int) *os.File {
		t.Helper()
		fd, err := os.Open(p)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if err := syscall.Flock(int(fd.Fd()), how); err != nil {
			t.Errorf("%s: flock: %v", step, err)
		}
		return fd
	}
	flockOpen("exclusive flock through a passthrough open", syscall.LOCK_EX|syscall.LOCK_NB).Close()
	flockOpen("exclusive flock after the first open's close", syscall.LOCK_EX|syscall.LOCK_NB).Close()

	// The namespace decides who opens what: user 1000 owns a file only it
	// may read (0600), and the kernel sees a process of uid 1000; the
	// process's token makes it user 4242 to the namespace, which refuses.
	secret := filepath.Join(m.mp, "secret")
	as := func(uid uint32, script string, env ...string) (string, error) {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		return fusetest.ExecCmd(t, script, cmd)
	}
	if out, err := as(1000, "echo secret > "+secret+" && chmod 600 "+secret); err != nil {
		t.Fatalf("uid 1000 writing %s: %v\n%s", secret, err, out)
	}
	tok := strings.TrimSpace(up.MustKaon("token", "issue", "--path", "/direct", "--scope", "storage.read", "--ttl", "10m", "--user", "4242"))
	// The open alone (no read): refused, so no descriptor exists.
	out, err := as(1000, "exec 3< "+secret, "BEARER_TOKEN="+tok)
	if err == nil || !strings.Contains(out, "ermission denied") {
		t.Errorf("user 4242 opening %s (mode 0600, user 1000's): %v %q, want permission denied at the open", secret, err, out)
	}
	if out, err := as(1000, "cat "+secret); err != nil || out != "secret\n" {
		t.Errorf("user 1000 reading its own %s: %v %q", secret, err, out)
	}

	// Close-to-open: a file open here (passthrough) is replaced with
	// curl; an open after that reads the new bytes (new size), directly
	// ("direct": passthrough or local: a new inode, or the daemon's read
	// where the held open's backing file is the old content).
	held, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	next := make([]byte, 1<<20+777)
	rand.Read(next)
	src := filepath.Join(fusetest.TempDir(t), "next")
	os.WriteFile(src, next, 0o644)
	if out, err := exec.Command("curl", "-sSf", "-L", "-T", src, up.EP.HTTP+"/direct/"+filepath.Base(p)).CombinedOutput(); err != nil {
		t.Fatalf("curl PUT: %v\n%s", err, out)
	}
	read("after a change elsewhere", p, "direct", next)
}

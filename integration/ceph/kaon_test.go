package ceph_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/cephtest"
	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Kaon on the project's Ceph cluster: filesystems inside a CephFS mount
// (spaces on the replicated and the erasure-coded data pool), and, with
// -tags ceph, on RADOS pools (kaon_rados_test.go).

// ioDeadline is the storage server's I/O deadline in these tests: longer
// than Ceph's own pause when an OSD dies, short enough for the test.
const ioDeadline = 20 * time.Second

// kaonUp starts an all-in-one kaon with one local filesystem (the
// default space) and returns it with its node name.
func kaonUp(t *testing.T, extra ...string) (*harness.Process, string) {
	t.Helper()
	k := harness.Up(t, append([]string{"--fs", "1", "--io-timeout", ioDeadline.String()}, extra...)...)
	node, err := os.Hostname()
	if err != nil || node == "" {
		node = "localhost"
	}
	return k, node
}

func api(k *harness.Process) *client.Client { return client.New(k.EP.HTTP) }

// waitFs waits until cond holds for the filesystems whose path contains
// part, and returns them.
func waitFs(t *testing.T, k *harness.Process, part, what string, cond func(nsapi.Filesystem) bool) []nsapi.Filesystem {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		fss, err := api(k).Filesystems(context.Background())
		var match []nsapi.Filesystem
		ok := err == nil
		for _, f := range fss {
			if strings.Contains(f.Path, part) {
				match = append(match, f)
				ok = ok && cond(f)
			}
		}
		if ok && len(match) > 0 {
			return match
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for filesystems %s to be %s: no result within 2m; fs ls:\n%s", part, what, k.MustKaon("fs", "ls"))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func booted(f nsapi.Filesystem) bool { return f.BootStatus == "booted" && f.Health == "ok" }

// run runs a client tool with a deadline naming the step and returns its
// combined output and error.
func run(t *testing.T, step string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s: %s %v: no result within 3m", step, name, args)
	}
	return string(out), err
}

// putHTTP uploads local to path with curl and returns the HTTP status.
func putHTTP(t *testing.T, k *harness.Process, local, path string) (string, error) {
	out, err := run(t, "curl PUT "+path, "curl", "-sS", "-L", "-T", local, "-o", "/dev/null", "-w", "%{http_code}", k.EP.HTTP+path)
	if err == nil && out != "201" {
		err = fmt.Errorf("HTTP %s", out)
	}
	return out, err
}

func putXrd(t *testing.T, k *harness.Process, local, path string) (string, error) {
	return run(t, "xrdcp upload "+path, "xrdcp", "-f", "-s", local, k.EP.XRootD+"/"+path)
}

// readBack reads path through Kaon (HTTP and root://) and compares.
func readBack(t *testing.T, k *harness.Process, path string, want []byte) error {
	dir := t.TempDir()
	for i, args := range [][]string{
		{"curl", "-sS", "-f", "-L", "-o", filepath.Join(dir, "h"), k.EP.HTTP + path},
		{"xrdcp", "-f", "-s", k.EP.XRootD + "/" + path, filepath.Join(dir, "x")},
	} {
		if out, err := run(t, "read "+path, args[0], args[1:]...); err != nil {
			return fmt.Errorf("%s %s: %v %s", args[0], path, err, out)
		}
		got, err := os.ReadFile(filepath.Join(dir, []string{"h", "x"}[i]))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("%s %s: %d bytes that differ from the %d written", args[0], path, len(got), len(want))
		}
	}
	return nil
}

// file is a test file: local copy and its place in Kaon.
type file struct {
	local, path string
	data        []byte
	xrd         bool // uploaded with xrdcp, else curl
}

func makeFiles(t *testing.T, dirs []string, n, size int) []file {
	var fs []file
	local := t.TempDir()
	for i := range n {
		f := file{local: filepath.Join(local, fmt.Sprint(i)), data: randomBytes(t, size), xrd: i%2 == 1}
		f.path = fmt.Sprintf("%s/f%d", dirs[i%len(dirs)], i)
		if err := os.WriteFile(f.local, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	return fs
}

func (f file) put(t *testing.T, k *harness.Process) error {
	var out string
	var err error
	if f.xrd {
		out, err = putXrd(t, k, f.local, f.path)
	} else {
		out, err = putHTTP(t, k, f.local, f.path)
	}
	if err != nil {
		return fmt.Errorf("upload %s: %v %s", f.path, err, out)
	}
	return nil
}

// parallel runs fns at once and returns their errors.
func parallel(fns ...func() error) []error {
	var wg sync.WaitGroup
	errs := make([]error, len(fns))
	for i, fn := range fns {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = fn() }()
	}
	wg.Wait()
	return errs
}

// osdFailureDuringIO writes and reads files through Kaon while osd.1 is
// killed and while it is down: no client sees an error, and every file
// reads back byte-exact after recovery.
func osdFailureDuringIO(t *testing.T, c *cephtest.Cluster, k *harness.Process, dirs []string) {
	t.Helper()
	files := makeFiles(t, dirs, 4*len(dirs), 12<<20)
	before, during, down := files[:len(dirs)], files[len(dirs):2*len(dirs)], files[2*len(dirs):]
	for _, f := range before {
		if err := f.put(t, k); err != nil {
			t.Fatal(err)
		}
	}
	var fns []func() error
	for _, f := range during {
		fns = append(fns, func() error { return f.put(t, k) })
	}
	for _, f := range before {
		fns = append(fns, func() error { return readBack(t, k, f.path, f.data) })
	}
	fns = append(fns, func() error { c.KillOSD(t, 1); return nil })
	for _, err := range parallel(fns...) {
		if err != nil {
			t.Errorf("while osd.1 was killed: %v", err)
		}
	}
	// With osd.1 down: degraded writes and reads.
	fns = nil
	for _, f := range down {
		fns = append(fns, func() error { return f.put(t, k) })
	}
	for _, f := range during {
		fns = append(fns, func() error { return readBack(t, k, f.path, f.data) })
	}
	for _, err := range parallel(fns...) {
		if err != nil {
			t.Errorf("with osd.1 down: %v", err)
		}
	}
	c.StartOSD(t, 1)
	for _, f := range files {
		if err := readBack(t, k, f.path, f.data); err != nil {
			t.Errorf("after recovery: %v", err)
		}
	}
}

// TestKaonOnCephFS: filesystems inside a CephFS mount are detected as
// cephfs and written buffered; two of them count the CephFS once; a space
// whose layout names the EC pool puts its stripes there; files survive an
// OSD failure during writes and reads.
func TestKaonOnCephFS(t *testing.T) {
	c := cephtest.Start(t)
	mnt := t.TempDir()
	c.Mount(t, mnt)
	top := filepath.Join(mnt, fmt.Sprintf("kaon-test-%d", time.Now().UnixNano()))
	within(t, "mkdir on CephFS", func() error { return os.Mkdir(top, 0o755) })
	k, node := kaonUp(t)

	k.MustKaon("space", "config", "cephec", "cephfs.pool="+c.ECPool)
	k.MustKaon("space", "config", "cephec", "cephfs.object-size=16M")
	for _, sp := range []string{"cephrep", "cephec"} {
		for i := 1; i <= 2; i++ {
			k.MustKaon("fs", "add", "--node", node, "--path", filepath.Join(top, fmt.Sprintf("%s%d", sp, i)), "--space", sp)
		}
	}
	fss := waitFs(t, k, top, "booted as cephfs", func(f nsapi.Filesystem) bool { return booted(f) && f.Kind == "cephfs" })
	for _, f := range fss {
		if f.IOInUse != "buffered" || !strings.HasPrefix(f.Backend, "cephfs:"+c.FSID) || f.BackendHealth == "" {
			t.Fatalf("fs %d on CephFS: io %q, backend %q, backend health %q; want buffered, cephfs:%s, a health",
				f.ID, f.IOInUse, f.Backend, f.BackendHealth, c.FSID)
		}
	}
	if out := k.MustKaon("fs", "ls"); !strings.Contains(out, "cephfs") || !strings.Contains(out, "buffered/auto") {
		t.Fatalf("fs ls shows no cephfs filesystem written buffered:\n%s", out)
	}
	// The local filesystem of the default space stays direct.
	if local := waitFs(t, k, "/fs/01", "booted", booted); local[0].IOInUse != "direct" || local[0].Kind != "posix" {
		t.Fatalf("local filesystem: %+v", local[0])
	}
	spaces, err := api(k).Spaces(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range spaces {
		if sp.Name == "cephrep" && (sp.Filesystems != 2 || sp.Backends != 1 || sp.Capacity != fss[0].Capacity) {
			t.Fatalf("space cephrep: %+v, want 2 filesystems on 1 backend with the capacity of one (%d)", sp, fss[0].Capacity)
		}
	}

	k.MustKaon("mkdir", "/rep")
	k.MustKaon("mkdir", "/ec")
	k.MustKaon("attr", "set", "/rep", "sys.forced.space=cephrep")
	k.MustKaon("attr", "set", "/rep", "sys.forced.layout=replica:2")
	k.MustKaon("attr", "set", "/ec", "sys.forced.space=cephec")
	if _, errs, code := k.Kaon("attr", "set", "/ec", "sys.forced.space=nosuch"); code == 0 || !strings.Contains(errs, "nosuch") {
		t.Fatalf("sys.forced.space=nosuch accepted: %d %s", code, errs)
	}

	// A stripe in the EC space lies in the EC pool, in 16 MiB objects.
	probe := makeFiles(t, []string{"/ec"}, 1, 1<<20)[0]
	if err := probe.put(t, k); err != nil {
		t.Fatal(err)
	}
	e, err := api(k).FileInfo(context.Background(), probe.path)
	if err != nil || len(e.Stripes) != 1 || !strings.HasPrefix(e.Stripes[0].PhysPath, top) {
		t.Fatalf("file info %s: %+v %v", probe.path, e, err)
	}
	if got := xattr(t, "ceph.file.layout.pool", e.Stripes[0].PhysPath); got != c.ECPool {
		t.Fatalf("stripe %s in pool %q, want %q", e.Stripes[0].PhysPath, got, c.ECPool)
	}
	if got := xattr(t, "ceph.file.layout.object_size", e.Stripes[0].PhysPath); got != fmt.Sprint(16<<20) {
		t.Fatalf("stripe %s has object size %s, want 16 MiB", e.Stripes[0].PhysPath, got)
	}

	osdFailureDuringIO(t, c, k, []string{"/rep", "/ec"})
}

// TestCephFSHangs: a cluster that stops answering (every OSD frozen)
// gives uploads a 503 within the I/O deadline, never a hang, and the
// filesystem shows offline; it is back once the cluster is.
func TestCephFSHangs(t *testing.T) {
	c := cephtest.Start(t)
	mnt := t.TempDir()
	c.Mount(t, mnt)
	top := filepath.Join(mnt, fmt.Sprintf("kaon-hang-%d", time.Now().UnixNano()))
	within(t, "mkdir on CephFS", func() error { return os.Mkdir(top, 0o755) })
	k, node := kaonUp(t)
	k.MustKaon("fs", "add", "--node", node, "--path", top+"/fs", "--space", "hang")
	waitFs(t, k, top, "booted", booted)
	k.MustKaon("mkdir", "/h")
	k.MustKaon("attr", "set", "/h", "sys.forced.space=hang")
	f := makeFiles(t, []string{"/h"}, 3, 4<<20)
	if err := f[0].put(t, k); err != nil {
		t.Fatal(err)
	}

	c.Freeze(t)
	start := time.Now()
	code, err := putHTTP(t, k, f[1].local, f[1].path)
	if err == nil || code != "503" {
		t.Fatalf("upload to a frozen CephFS: HTTP %s %v, want 503", code, err)
	}
	t.Logf("upload to the frozen cluster failed after %v", time.Since(start).Round(time.Second))
	if out, err := putXrd(t, k, f[2].local, f[2].path); err == nil {
		t.Fatalf("xrdcp to a frozen CephFS succeeded: %s", out)
	}
	waitFs(t, k, top, "offline", func(f nsapi.Filesystem) bool { return f.BootStatus == "offline" })
	c.Thaw(t)
	waitFs(t, k, top, "booted again", booted)
	if err := f[1].put(t, k); err != nil {
		t.Fatalf("upload after the cluster came back: %v", err)
	}
	for _, g := range f[:2] {
		if err := readBack(t, k, g.path, g.data); err != nil {
			t.Fatal(err)
		}
	}
}

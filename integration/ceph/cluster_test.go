// Package ceph_test checks the development Ceph cluster Kaon's Ceph
// backends are tested and measured on (scripts/ceph-dev.sh, docs/CEPH.md):
// CephFS through ceph-fuse on the replicated and the erasure-coded data
// pool, the RADOS pool, and reads through an OSD failure.
package ceph_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/cephtest"
)

func TestMain(m *testing.M) { os.Exit(cephtest.Main(m)) }

const ioTimeout = 2 * time.Minute

// within runs fn with a deadline: file I/O on a CephFS mount blocks, not
// fails, when the cluster cannot serve it.
func within(t *testing.T, step string, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	case <-time.After(ioTimeout):
		t.Fatalf("%s: no result within %v", step, ioTimeout)
	}
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeSynced(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readEqual(path string, want []byte) error {
	got, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s: read %d bytes that differ from the %d written", path, len(got), len(want))
	}
	return nil
}

// xattr reads a virtual xattr with getfattr, the tool users have.
func xattr(t *testing.T, name, path string) string {
	t.Helper()
	var out []byte
	within(t, "getfattr "+name+" "+path, func() (err error) {
		var errb bytes.Buffer
		cmd := exec.Command("getfattr", "--absolute-names", "--only-values", "-n", name, path)
		cmd.Stderr = &errb
		out, err = cmd.Output()
		if err != nil {
			err = fmt.Errorf("%v: %s", err, errb.String())
		}
		return err
	})
	return string(out)
}

// objectSize is the size RADOS reports for pool/obj, or -1 if it has no such object.
func objectSize(t *testing.T, c *cephtest.Cluster, pool, obj string) int64 {
	t.Helper()
	var out bytes.Buffer
	cmd := c.Command(t.Context(), "rados", "-p", pool, "stat", obj)
	cmd.Stdout, cmd.Stderr = &out, &out
	within(t, "rados stat "+pool+"/"+obj, func() error {
		err := cmd.Run()
		if err != nil && strings.Contains(out.String(), "No such file or directory") {
			return nil
		}
		return err
	})
	i := strings.LastIndex(out.String(), "size ")
	if i < 0 {
		return -1
	}
	var n int64
	if _, err := fmt.Sscan(out.String()[i+len("size "):], &n); err != nil {
		t.Fatalf("rados stat %s/%s: %q: %v", pool, obj, out.String(), err)
	}
	return n
}

// checkObjects checks that the file's data objects (CephFS names them
// <inode hex>.<index as 8 hex digits>, 4 MiB each) are in pool and not in
// other.
func checkObjects(t *testing.T, c *cephtest.Cluster, path string, size int64, pool, other string) {
	t.Helper()
	var st syscall.Stat_t
	within(t, "stat "+path, func() error { return syscall.Stat(path, &st) })
	const objSize = 4 << 20
	for i := int64(0); i*objSize < size; i++ {
		obj := fmt.Sprintf("%x.%08x", st.Ino, i)
		if got, want := objectSize(t, c, pool, obj), min(objSize, size-i*objSize); got != want {
			t.Errorf("%s: object %s in pool %s has size %d, want %d", path, obj, pool, got, want)
		}
		if i > 0 { // object 0 of every file also holds a backtrace in the default data pool
			if got := objectSize(t, c, other, obj); got != -1 {
				t.Errorf("%s: object %s also in pool %s (size %d)", path, obj, other, got)
			}
		}
	}
}

func TestCluster(t *testing.T) {
	c := cephtest.Start(t)
	mnt := t.TempDir()
	c.Mount(t, mnt)

	// A directory per run, so a shared cluster (KAON_CEPH_DIR) can run it again.
	top := filepath.Join(mnt, fmt.Sprintf("cluster-test-%d", time.Now().UnixNano()))
	repDir, ecDir := filepath.Join(top, "rep"), filepath.Join(top, "ec")
	within(t, "mkdir on CephFS", func() error {
		if err := os.MkdirAll(repDir, 0o755); err != nil {
			return err
		}
		return os.Mkdir(ecDir, 0o755)
	})
	within(t, "set the EC layout", func() error {
		out, err := exec.Command("setfattr", "-n", "ceph.dir.layout.pool", "-v", c.ECPool, ecDir).CombinedOutput()
		if err != nil {
			return fmt.Errorf("setfattr ceph.dir.layout.pool=%s %s: %v: %s", c.ECPool, ecDir, err, out)
		}
		return nil
	})

	// 9 MiB: three objects, the last one partial.
	const size = 9 << 20
	repData, ecData := randomBytes(t, size), randomBytes(t, size)
	repFile, ecFile := filepath.Join(repDir, "f"), filepath.Join(ecDir, "f")
	within(t, "write to the replicated pool", func() error { return writeSynced(repFile, repData) })
	within(t, "write to the EC pool", func() error { return writeSynced(ecFile, ecData) })
	within(t, "read back from the replicated pool", func() error { return readEqual(repFile, repData) })
	within(t, "read back from the EC pool", func() error { return readEqual(ecFile, ecData) })

	if got := xattr(t, "ceph.file.layout.pool", repFile); got != c.DataPool {
		t.Errorf("%s: layout pool %q, want %q", repFile, got, c.DataPool)
	}
	if got := xattr(t, "ceph.file.layout.pool", ecFile); got != c.ECPool {
		t.Errorf("%s: layout pool %q, want %q", ecFile, got, c.ECPool)
	}
	checkObjects(t, c, repFile, size, c.DataPool, c.ECPool)
	checkObjects(t, c, ecFile, size, c.ECPool, c.DataPool)

	// RADOS, as the client Kaon uses.
	obj := fmt.Sprintf("cluster-test-%d", time.Now().UnixNano())
	objData := randomBytes(t, 5<<20)
	c.Run(t, "rados put", objData, "rados", "--id", c.Client, "-p", c.RadosPool, "put", obj, "-")
	if got := c.Run(t, "rados get", nil, "rados", "--id", c.Client, "-p", c.RadosPool, "get", obj, "-"); !bytes.Equal(got, objData) {
		t.Fatalf("rados get %s/%s: %d bytes that differ from the %d written", c.RadosPool, obj, len(got), len(objData))
	}

	// One OSD down: everything still reads (through a fresh mount, so no
	// client cache answers), and the EC pool still takes writes.
	c.Umount(t, mnt)
	c.KillOSD(t, 1)
	c.Mount(t, mnt)
	within(t, "read the replicated file with osd.1 down", func() error { return readEqual(repFile, repData) })
	within(t, "read the EC file with osd.1 down", func() error { return readEqual(ecFile, ecData) })
	if got := c.Run(t, "rados get with osd.1 down", nil, "rados", "--id", c.Client, "-p", c.RadosPool, "get", obj, "-"); !bytes.Equal(got, objData) {
		t.Fatalf("rados get %s/%s with osd.1 down: wrong data", c.RadosPool, obj)
	}
	degraded := filepath.Join(ecDir, "written-degraded")
	within(t, "write to the EC pool with osd.1 down", func() error { return writeSynced(degraded, ecData[:size/3]) })

	// Back up: recovery completes (StartOSD waits for all PGs active+clean)
	// and the data written while degraded reads back.
	c.StartOSD(t, 1)
	c.Umount(t, mnt)
	c.Mount(t, mnt)
	within(t, "read the file written while degraded", func() error { return readEqual(degraded, ecData[:size/3]) })
	within(t, "read the EC file after recovery", func() error { return readEqual(ecFile, ecData) })
}

// Package cephtest gives integration tests a real Ceph cluster: the
// throw-away single-host cluster of scripts/ceph-dev.sh (docs/CEPH.md), with
// CephFS mounts through ceph-fuse and OSD failures on demand.
//
// A test calls Start. Which cluster it gets:
//   - KAON_CEPH_DIR set: that cluster directory, started if needed and left
//     running afterwards, so a whole test run (or a developer's session)
//     pays for one start;
//   - the package's TestMain runs Main: one cluster per test binary, purged
//     when the binary ends;
//   - otherwise: a cluster for this test alone, purged when it ends.
//
// Every script run has a deadline that names the step; the script's own
// waits have deadlines too (CEPH_DEV_TIMEOUT).
package cephtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/integration/harness"
)

// Deadlines of the script's commands. Start may install packages first.
const (
	startTimeout = 15 * time.Minute
	stepTimeout  = 5 * time.Minute
)

// Cluster is a running ceph-dev cluster, as described by its DIR/env.
type Cluster struct {
	Dir          string // the cluster directory
	Conf         string // ceph.conf: pass as -c (or CEPH_CONF) to every Ceph tool
	AdminKeyring string // client.admin's keyring
	Client       string // the unprivileged client id Kaon uses ("kaon")
	Keyring      string // that client's keyring
	FSID         string
	MonHost      string // v2:127.0.0.1:PORT
	FS           string // CephFS name
	MetadataPool string // the CephFS metadata pool (replicated)
	DataPool     string // the CephFS default data pool (replicated)
	ECPool       string // the CephFS erasure-coded data pool (k=2, m=1)
	RadosPool    string // plain RADOS pool for Kaon's RADOS backend
	OSDStore     string // bluestore or memstore

	owned bool // started here, purged here
}

var shared struct {
	mu     sync.Mutex
	inMain bool
	c      *Cluster
	err    error
}

// Main runs the package's tests with one shared cluster (started by the
// first Start) and purges it afterwards. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(cephtest.Main(m)) }
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if c := shared.c; c != nil && c.owned {
		if code != 0 {
			fmt.Fprint(os.Stderr, c.diagnostics())
		}
		if out, err := script(stepTimeout, "purge", c.Dir); err != nil {
			fmt.Fprintf(os.Stderr, "cephtest: purge %s: %v\n%s", c.Dir, err, out)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Start returns a ready cluster: all OSDs up, the MDS active, all PGs
// active+clean.
func Start(t testing.TB) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("cephtest needs root: it installs packages and mounts CephFS with ceph-fuse")
	}
	if dir := os.Getenv("KAON_CEPH_DIR"); dir != "" {
		c, err := start(dir, false)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	shared.mu.Lock()
	inMain := shared.inMain
	if inMain {
		defer shared.mu.Unlock()
		if shared.c == nil && shared.err == nil {
			shared.c, shared.err = startTemp()
		}
		if shared.err != nil {
			t.Fatal(shared.err)
		}
		return shared.c
	}
	shared.mu.Unlock()
	c, err := startTemp()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.diagnostics())
		}
		if out, err := script(stepTimeout, "purge", c.Dir); err != nil {
			t.Errorf("purge %s: %v\n%s", c.Dir, err, out)
		}
	})
	return c
}

// startTemp creates a cluster in a new temporary directory. Bluestore
// cannot use tmpfs (O_DIRECT), so a tmpfs TMPDIR gives way to /var/tmp.
func startTemp() (*Cluster, error) {
	base := os.TempDir()
	var st unix.Statfs_t
	if unix.Statfs(base, &st) == nil && st.Type == unix.TMPFS_MAGIC {
		base = "/var/tmp"
	}
	dir, err := os.MkdirTemp(base, "kaon-ceph-")
	if err != nil {
		return nil, err
	}
	c, err := start(dir, true)
	if err != nil {
		// Purge refuses a directory the script never marked; an empty one
		// is ours to remove.
		if out, perr := script(stepTimeout, "purge", dir); perr != nil {
			err = fmt.Errorf("%w\npurge %s: %v\n%s", err, dir, perr, out)
		}
		_ = os.Remove(dir)
	}
	return c, err
}

func start(dir string, owned bool) (*Cluster, error) {
	out, err := script(startTimeout, "start", dir)
	if err != nil {
		return nil, fmt.Errorf("ceph-dev.sh start %s: %v\n%s", dir, err, out)
	}
	c, err := load(dir)
	if err != nil {
		return nil, err
	}
	c.owned = owned
	return c, nil
}

// load reads DIR/env, the file the script writes once the cluster is ready.
func load(dir string) (*Cluster, error) {
	f, err := os.Open(filepath.Join(dir, "env"))
	if err != nil {
		return nil, fmt.Errorf("cluster description: %w", err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if ok {
			env[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	c := &Cluster{
		Dir:          env["CEPH_DEV_DIR"],
		Conf:         env["CEPH_CONF"],
		AdminKeyring: env["CEPH_ADMIN_KEYRING"],
		Client:       env["CEPH_CLIENT"],
		Keyring:      env["CEPH_CLIENT_KEYRING"],
		FSID:         env["CEPH_FSID"],
		MonHost:      env["CEPH_MON_HOST"],
		FS:           env["CEPH_FS"],
		MetadataPool: env["CEPH_FS_METADATA_POOL"],
		DataPool:     env["CEPH_FS_DATA_POOL"],
		ECPool:       env["CEPH_FS_EC_POOL"],
		RadosPool:    env["CEPH_RADOS_POOL"],
		OSDStore:     env["CEPH_OSD_STORE"],
	}
	for name, v := range map[string]string{"CEPH_DEV_DIR": c.Dir, "CEPH_CONF": c.Conf, "CEPH_CLIENT": c.Client,
		"CEPH_FS": c.FS, "CEPH_FS_EC_POOL": c.ECPool, "CEPH_RADOS_POOL": c.RadosPool} {
		if v == "" {
			return nil, fmt.Errorf("%s: no %s", f.Name(), name)
		}
	}
	return c, nil
}

// script runs scripts/ceph-dev.sh with a deadline; it returns what the
// script printed.
func script(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(harness.RepoRoot(), "scripts", "ceph-dev.sh"), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("ceph-dev.sh %s: no result within %v", strings.Join(args, " "), timeout)
	}
	return out.String(), err
}

func (c *Cluster) do(t testing.TB, args ...string) string {
	t.Helper()
	out, err := script(stepTimeout, args...)
	if err != nil {
		t.Fatalf("ceph-dev.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// Mount mounts the CephFS on mountpoint with ceph-fuse as the client
// Kaon uses; it is unmounted when the test ends.
func (c *Cluster) Mount(t testing.TB, mountpoint string) {
	t.Helper()
	c.do(t, "mount", c.Dir, mountpoint)
	t.Cleanup(func() {
		if out, err := script(stepTimeout, "umount", c.Dir, mountpoint); err != nil {
			t.Errorf("umount %s: %v\n%s", mountpoint, err, out)
		}
	})
}

// Umount unmounts a Mount before the test ends (a second unmount is a no-op).
func (c *Cluster) Umount(t testing.TB, mountpoint string) {
	t.Helper()
	c.do(t, "umount", c.Dir, mountpoint)
}

// KillOSD kills osd.id with SIGKILL and returns once the cluster marked it
// down. If the test ends before StartOSD, the OSD is started then (a
// shared cluster must outlive a failed test).
func (c *Cluster) KillOSD(t testing.TB, id int) {
	t.Helper()
	c.do(t, "kill-osd", c.Dir, fmt.Sprint(id))
	t.Cleanup(func() {
		if out, err := script(stepTimeout, "start-osd", c.Dir, fmt.Sprint(id)); err != nil {
			t.Errorf("start-osd %d: %v\n%s", id, err, out)
		}
	})
}

// StartOSD starts osd.id again and returns once the cluster is ready
// (all PGs active+clean).
func (c *Cluster) StartOSD(t testing.TB, id int) {
	t.Helper()
	c.do(t, "start-osd", c.Dir, fmt.Sprint(id))
}

// Freeze stops (SIGSTOP) every OSD: the cluster stops answering and
// client I/O waits, as on a cluster that hangs. Thawed when the test ends
// if it does not Thaw.
func (c *Cluster) Freeze(t testing.TB) {
	t.Helper()
	c.do(t, "freeze", c.Dir)
	t.Cleanup(func() {
		if out, err := script(stepTimeout, "thaw", c.Dir); err != nil {
			t.Errorf("thaw: %v\n%s", err, out)
		}
	})
}

// Thaw continues the frozen OSDs and returns once the cluster is ready.
func (c *Cluster) Thaw(t testing.TB) {
	t.Helper()
	c.do(t, "thaw", c.Dir)
}

// Command builds a Ceph tool invocation (ceph, rados, ...) against this
// cluster, as client.admin unless args choose another id (--id).
func (c *Cluster) Command(ctx context.Context, tool string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, tool, append([]string{"-c", c.Conf}, args...)...)
}

// Run runs a Ceph tool with a deadline (step names it in the failure) and
// returns its standard output; stdin, if not nil, is fed to it.
func (c *Cluster) Run(t testing.TB, step string, stdin []byte, tool string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	cmd := c.Command(ctx, tool, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s: %s %s: no result within %v", step, tool, strings.Join(args, " "), stepTimeout)
	}
	if err != nil {
		t.Fatalf("%s: %s %s: %v\n%s", step, tool, strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes()
}

// diagnostics is what a failed test prints: cluster status and the tails
// of the cluster log and the ceph-fuse logs.
func (c *Cluster) diagnostics() string {
	var b strings.Builder
	out, err := script(time.Minute, "status", c.Dir)
	fmt.Fprintf(&b, "--- ceph-dev.sh status %s (err %v)\n%s", c.Dir, err, out)
	logs, _ := filepath.Glob(filepath.Join(c.Dir, "log", "fuse-*.log"))
	for _, p := range append([]string{filepath.Join(c.Dir, "log", "cluster.log")}, logs...) {
		data, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		fmt.Fprintf(&b, "--- tail of %s\n%s\n", p, strings.Join(lines, "\n"))
	}
	return b.String()
}

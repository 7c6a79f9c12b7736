package etcdtest

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kv/etcdkv"
)

func script(t *testing.T, args ...string) (string, error) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "etcd-dev.sh"), args...)
	// Below the kernel's ephemeral ports (32768-60999 on Debian): the
	// outgoing connections of the members and of every other test take
	// ports from there, and one of them on a member's port makes its bind
	// fail (the script tried five runs of a kernel-chosen port in one full
	// test run and lost each time). The script skips ports in use.
	cmd.Env = append(os.Environ(), "ETCD_DEV_PORT="+strconv.Itoa(20000+rand.IntN(12000)))
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("etcd-dev.sh %v hung for 2 minutes:\n%s", args, out)
	}
	return string(out), err
}

// TestDevScript drives scripts/etcd-dev.sh: a cluster it starts serves the
// etcd engine, status reports it, stop ends exactly the members it started
// (not a foreign process whose pid sits in a pid file), purge removes it.
func TestDevScript(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	out, err := script(t, "start", dir, "3")
	t.Cleanup(func() { script(t, "stop", dir) })
	if err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	eps, err := os.ReadFile(filepath.Join(dir, "endpoints"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := etcdkv.Open(etcdkv.Options{Endpoints: strings.Split(strings.TrimSpace(string(eps)), ","), Prefix: "dev/"})
	if err != nil {
		t.Fatal(err)
	}
	b := e.NewBatch()
	b.Put([]byte("k"), []byte("v"))
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	e.Close()
	if out, err := script(t, "status", dir); err != nil || strings.Count(out, "healthy") != 3 {
		t.Fatalf("status of a running cluster: %v\n%s", err, out)
	}

	var pids []int
	for i := 0; i < 3; i++ {
		b, err := os.ReadFile(filepath.Join(dir, "m"+strconv.Itoa(i)+".pid"))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	// A foreign process behind a pid file must survive stop.
	foreign := exec.Command("sleep", "300")
	if err := foreign.Start(); err != nil {
		t.Fatal(err)
	}
	defer foreign.Process.Kill()
	if err := os.WriteFile(filepath.Join(dir, "m9.pid"), []byte(strconv.Itoa(foreign.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := script(t, "stop", dir); err != nil {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil && !zombie(pid) {
			t.Fatalf("member pid %d still runs after stop", pid)
		}
	}
	if err := syscall.Kill(foreign.Process.Pid, 0); err != nil || zombie(foreign.Process.Pid) {
		t.Fatalf("stop killed a process it did not start (%v)", err)
	}
	if out, err := script(t, "status", dir); err == nil || !strings.Contains(out, "stopped") {
		t.Fatalf("status of a stopped cluster: %v\n%s", err, out)
	}
	if out, err := script(t, "purge", dir); err != nil {
		t.Fatalf("purge: %v\n%s", err, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("purge left %s: %v", dir, err)
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && strings.Contains(string(b), ") Z ")
}

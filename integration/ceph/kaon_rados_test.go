//go:build ceph

package ceph_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/cephtest"
	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// addRados registers n RADOS filesystems of pool in space and waits for
// them to boot; it returns their common path prefix.
func addRados(t *testing.T, c *cephtest.Cluster, k *harness.Process, node, pool, space string, n int, objSize string) string {
	t.Helper()
	ns := fmt.Sprintf("kaon-%s-%d", space, time.Now().UnixNano())
	for i := range n {
		k.MustKaon("fs", "add", "--node", node, "--rados", "--pool", pool, "--namespace", fmt.Sprintf("%s-%d", ns, i),
			"--ceph-conf", c.Conf, "--ceph-user", c.Client, "--object-size", objSize, "--space", space)
	}
	return "/" + ns
}

// TestKaonOnRados: filesystems in RADOS pools (replicated, and the EC
// pool) serve uploads and reads through an OSD failure; fs ls shows them
// as rados with Ceph's health; one pool counts once in its space.
func TestKaonOnRados(t *testing.T) {
	c := cephtest.Start(t)
	k, node := kaonUp(t)
	if out := k.MustKaon("version"); !strings.Contains(out, "RADOS support: yes") {
		t.Fatalf("kaon built for this test has no RADOS support:\n%s", out)
	}
	rep := addRados(t, c, k, node, c.RadosPool, "rados", 2, "4M")
	ec := addRados(t, c, k, node, c.ECPool, "radosec", 2, "16M")
	for _, part := range []string{rep, ec} {
		for _, f := range waitFs(t, k, part, "booted as rados", func(f nsapi.Filesystem) bool { return booted(f) && f.Kind == "rados" }) {
			if !strings.HasPrefix(f.BackendHealth, "HEALTH_") || !strings.HasPrefix(f.Backend, "rados:"+c.FSID+"/") {
				t.Fatalf("fs %d: backend %q health %q", f.ID, f.Backend, f.BackendHealth)
			}
		}
	}
	spaces, err := api(k).Spaces(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range spaces {
		if (sp.Name == "rados" || sp.Name == "radosec") && (sp.Filesystems != 2 || sp.Backends != 1) {
			t.Fatalf("space %s: %+v, want 2 filesystems on 1 backend", sp.Name, sp)
		}
	}
	k.MustKaon("mkdir", "/r")
	k.MustKaon("mkdir", "/e")
	k.MustKaon("attr", "set", "/r", "sys.forced.space=rados")
	k.MustKaon("attr", "set", "/r", "sys.forced.layout=replica:2")
	k.MustKaon("attr", "set", "/e", "sys.forced.space=radosec")
	osdFailureDuringIO(t, c, k, []string{"/r", "/e"})
	e, err := api(k).FileInfo(t.Context(), "/r/f0")
	if err != nil || len(e.Stripes) != 2 || !strings.HasPrefix(e.Stripes[0].PhysPath, "rados://"+c.RadosPool+"/") {
		t.Fatalf("file info /r/f0: %+v %v", e, err)
	}
}

// TestRadosDownAndFull: a frozen cluster gives a RADOS space 503 within
// the deadline and the filesystem shows offline; a pool over its quota
// gives 507 (kXR_NoSpace over root://) and shows full.
func TestRadosDownAndFull(t *testing.T) {
	c := cephtest.Start(t)
	k, node := kaonUp(t)
	part := addRados(t, c, k, node, c.RadosPool, "radosdf", 1, "4M")
	waitFs(t, k, part, "booted", booted)
	k.MustKaon("mkdir", "/d")
	k.MustKaon("attr", "set", "/d", "sys.forced.space=radosdf")
	f := makeFiles(t, []string{"/d"}, 4, 4<<20)
	if err := f[0].put(t, k); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	step := func(what string) { t.Logf("%v: %s", time.Since(start).Round(100*time.Millisecond), what) }
	c.Freeze(t)
	step("frozen")
	if code, err := putHTTP(t, k, f[1].local, f[1].path); err == nil || code != "503" {
		t.Fatalf("upload to a frozen cluster: HTTP %s %v, want 503", code, err)
	}
	step("upload refused")
	waitFs(t, k, part, "offline", func(f nsapi.Filesystem) bool { return f.BootStatus == "offline" })
	step("offline shown")
	c.Thaw(t)
	step("thawed, cluster ready")
	waitFs(t, k, part, "booted again", booted)
	step("filesystem back")
	if err := f[1].put(t, k); err != nil {
		t.Fatalf("upload after the cluster came back: %v", err)
	}

	// Full: a quota the pool is over already.
	admin := func(step string, args ...string) { c.Run(t, step, nil, "ceph", args...) }
	admin("set a pool quota", "osd", "pool", "set-quota", c.RadosPool, "max_bytes", "1")
	t.Cleanup(func() { admin("remove the pool quota", "osd", "pool", "set-quota", c.RadosPool, "max_bytes", "0") })
	waitPoolFlag(t, c, c.RadosPool, "full", true)
	step("pool full")
	if code, err := putHTTP(t, k, f[2].local, f[2].path); err == nil || code != "507" {
		t.Fatalf("upload to a full pool: HTTP %s %v, want 507", code, err)
	}
	if out, err := putXrd(t, k, f[3].local, f[3].path); err == nil || !strings.Contains(out, "3009") {
		t.Fatalf("xrdcp to a full pool: %v %s, want kXR_NoSpace (3009)", err, out)
	}
	waitFs(t, k, part, "full", func(f nsapi.Filesystem) bool { return strings.Contains(f.Health, "full") })
	step("full shown")
	admin("remove the pool quota", "osd", "pool", "set-quota", c.RadosPool, "max_bytes", "0")
	waitPoolFlag(t, c, c.RadosPool, "full", false)
	waitFs(t, k, part, "writable again", booted)
	step("writable again")
	if err := f[2].put(t, k); err != nil {
		t.Fatalf("upload after the quota went: %v", err)
	}
	for _, g := range f[:3] {
		if err := readBack(t, k, g.path, g.data); err != nil {
			t.Fatal(err)
		}
	}
}

// waitPoolFlag waits until pool has (or has not) a flag in the OSD map.
func waitPoolFlag(t *testing.T, c *cephtest.Cluster, pool, flag string, want bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out := string(c.Run(t, "osd pool ls detail", nil, "ceph", "osd", "pool", "ls", "detail"))
		has := false
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "'"+pool+"'") {
				_, flags, _ := strings.Cut(line, " flags ")
				flags, _, _ = strings.Cut(flags, " ")
				for _, f := range strings.Split(flags, ",") {
					has = has || f == flag
				}
			}
		}
		if has == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s flag %s to be %v: no result within 2m:\n%s", pool, flag, want, out)
		}
		time.Sleep(time.Second)
	}
}

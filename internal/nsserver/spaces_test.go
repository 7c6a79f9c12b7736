package nsserver

import (
	"context"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// beat reports fs from node as its storage server would.
func beat(t *testing.T, s *Server, node string, fs ...message.FsReport) message.HeartbeatReply {
	t.Helper()
	reply, err := s.Heartbeat(context.Background(), message.Heartbeat{Version: message.Version, Node: node, Addr: "http://" + node, Filesystems: fs})
	if err != nil {
		t.Fatal(err)
	}
	return reply
}

func report(path, backend string, capacity, used uint64) message.FsReport {
	return message.FsReport{Path: path, Capacity: capacity, Used: used, Health: "ok", Kind: "cephfs", Backend: backend}
}

// TestSharedBackendCountedOnce: six filesystems inside one CephFS count
// its capacity once in space ls and in statfs, not six times.
func TestSharedBackendCountedOnce(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	var reps []message.FsReport
	for _, p := range []string{"/c/1", "/c/2", "/c/3", "/c/4", "/c/5", "/c/6"} {
		reps = append(reps, report(p, "cephfs:fsid-a", 30<<30, 10<<30))
	}
	reps = append(reps, message.FsReport{Path: "/disk", Capacity: 1 << 30, Used: 0, Health: "ok", Kind: "posix", Backend: "dev:8:1"})
	beat(t, s, "n1", reps...)
	beat(t, s, "n1", reps...) // ids assigned: reported as theirs
	sp, _ := s.Spaces(ctx, root)
	if len(sp) != 1 || sp[0].Filesystems != 7 || sp[0].Backends != 2 || sp[0].Capacity != 31<<30 || sp[0].Used != 10<<30 {
		t.Fatalf("space ls: %+v, want 7 filesystems on 2 backends, capacity 31 GiB, used 10 GiB", sp)
	}
	st, err := s.StatFS(ctx, root, "/")
	if err != nil || st.Total != 31<<30 || st.Free != 21<<30 || st.MaxFree != 20<<30 || st.Filesystems != 7 {
		t.Fatalf("statfs: %+v %v", st, err)
	}
}

// TestPlacementSharesBackendFreeSpace: a backend's free space is shared
// among its filesystems, so a CephFS with six directories does not draw
// six times its share of new files against a disk with as much free.
func TestPlacementSharesBackendFreeSpace(t *testing.T) {
	s := newServer(t)
	var reps []message.FsReport
	for _, p := range []string{"/c/1", "/c/2", "/c/3", "/c/4", "/c/5", "/c/6"} {
		reps = append(reps, report(p, "cephfs:fsid-a", 100<<30, 0))
	}
	reps = append(reps, message.FsReport{Path: "/disk", Capacity: 100 << 30, Health: "ok", Kind: "posix", Backend: "dev:8:1"})
	beat(t, s, "n1", reps...)
	l, _ := layout.Parse("plain")
	onDisk := 0
	const n = 4000
	for range n {
		locs, err := s.reg.Place(l, "")
		if err != nil {
			t.Fatal(err)
		}
		if fsOf(s, locs[0]).Path == "/disk" {
			onDisk++
		}
	}
	// Equal free space per backend: the disk gets half the files
	// (1/7 if each directory counted the whole CephFS). The key is
	// rand*free, so the split is about 1/2 ± sampling noise.
	if onDisk < n*2/5 || onDisk > n*3/5 {
		t.Fatalf("the disk got %d of %d new files, want about half", onDisk, n)
	}
}

// TestForcedSpace: sys.forced.space places new files only on that space;
// it must name an existing space; without it files go to "default".
func TestForcedSpace(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	beat(t, s, "n1", report("/d1", "dev:1", 1<<40, 0), report("/d2", "dev:2", 1<<40, 0))
	if _, err := s.AddFilesystem(ctx, root, nsapi.NewFilesystem{Node: "n1", Path: "/ceph/a", Space: "ceph"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddFilesystem(ctx, root, nsapi.NewFilesystem{Node: "n1", Path: "/ceph/b", Group: "ceph.1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddFilesystem(ctx, root, nsapi.NewFilesystem{Node: "n1", Path: "/x", Group: "ceph.1", Space: "other"}); !kerr.Is(err, kerr.Invalid) {
		t.Fatalf("fs add with a group outside its space: %v", err)
	}
	beat(t, s, "n1", report("/d1", "dev:1", 1<<40, 0), report("/d2", "dev:2", 1<<40, 0),
		report("/ceph/a", "cephfs:x", 1<<40, 0), report("/ceph/b", "cephfs:x", 1<<40, 0))
	fss, _ := s.Filesystems(ctx, root)
	for _, f := range fss {
		if want := map[string]string{"/ceph/a": "ceph.0", "/ceph/b": "ceph.1"}[f.Path]; want != "" && (f.Group != want || f.Space != "ceph") {
			t.Fatalf("%s: group %s space %s, want %s in ceph", f.Path, f.Group, f.Space, want)
		}
	}
	if err := s.Mkdir(ctx, root, "/c", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if err := s.SetXAttr(ctx, root, "/c", nsapi.AttrSpace, "nosuch"); !kerr.Is(err, kerr.Invalid) || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("sys.forced.space=nosuch: %v", err)
	}
	if err := s.SetXAttr(ctx, root, "/c", nsapi.AttrSpace, "bad.name"); !kerr.Is(err, kerr.Invalid) {
		t.Fatalf("sys.forced.space=bad.name: %v", err)
	}
	if err := s.SetXAttr(ctx, root, "/c", nsapi.AttrSpace, "ceph"); err != nil {
		t.Fatal(err)
	}
	if err := s.Mkdir(ctx, root, "/c/sub", 0o755, false); err != nil { // inherits the policy
		t.Fatal(err)
	}
	spaceOfFile := func(path string) string {
		g, err := s.Open(ctx, root, path, nsapi.OpenRequest{Write: true, Create: true})
		if err != nil {
			t.Fatal(err)
		}
		f, _ := s.reg.Filesystem(g.File.Locations[0])
		return f.Space
	}
	for i := range 20 {
		if sp := spaceOfFile("/c/sub/f" + string(rune('a'+i))); sp != "ceph" {
			t.Fatalf("file below sys.forced.space=ceph placed in space %s", sp)
		}
		if sp := spaceOfFile("/g" + string(rune('a'+i))); sp != fleet.DefaultSpace {
			t.Fatalf("file without a space policy placed in space %s", sp)
		}
	}
	// A defined space without filesystems: files there have nowhere to go.
	if err := s.DefineSpace(ctx, root, "empty"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetXAttr(ctx, root, "/c", nsapi.AttrSpace, "empty"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Open(ctx, root, "/c/f", nsapi.OpenRequest{Write: true, Create: true})
	if !kerr.Is(err, kerr.NoSpace) || !strings.Contains(err.Error(), "space empty") {
		t.Fatalf("upload into an empty space: %v", err)
	}
	st, err := s.StatFS(ctx, root, "/c/sub")
	if err != nil || st.Space != "ceph" || st.Filesystems != 2 || st.Total != 1<<40 {
		t.Fatalf("statfs of a ceph directory: %+v %v", st, err)
	}
}

// TestSettingsReachStorageServer: io and the space's CephFS layout are
// persisted and sent with every assignment.
func TestSettingsReachStorageServer(t *testing.T) {
	ctx := context.Background()
	eng := newServer(t)
	beat(t, eng, "n1", report("/ceph/a", "cephfs:x", 1<<40, 0))
	if err := eng.ConfigFilesystem(ctx, root, 1, "io", "sideways"); !kerr.Is(err, kerr.Invalid) {
		t.Fatalf("io=sideways: %v", err)
	}
	for _, kv := range [][2]string{{"io", "buffered"}, {"space", "ceph"}} {
		if err := eng.ConfigFilesystem(ctx, root, 1, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.ConfigSpace(ctx, root, "ceph", "cephfs.pool", "kaonfs_ec"); err != nil {
		t.Fatal(err)
	}
	if err := eng.ConfigSpace(ctx, root, "ceph", "cephfs.object-size", "16M"); err != nil {
		t.Fatal(err)
	}
	if err := eng.ConfigSpace(ctx, root, "ceph", "cephfs.object-size", "1000"); !kerr.Is(err, kerr.Invalid) {
		t.Fatalf("object size 1000: %v", err)
	}
	if err := eng.ConfigSpace(ctx, root, "ceph", "colour", "red"); !kerr.Is(err, kerr.Invalid) {
		t.Fatalf("unknown space key: %v", err)
	}
	// Reloaded from the namespace: the settings persist.
	s2, err := New(Config{Engine: eng.cfg.Engine, Key: eng.key})
	if err != nil {
		t.Fatal(err)
	}
	reply := beat(t, s2, "n1", report("/ceph/a", "cephfs:x", 1<<40, 0))
	if len(reply.Filesystems) != 1 {
		t.Fatalf("assignments %+v", reply.Filesystems)
	}
	a := reply.Filesystems[0]
	if a.IO != "buffered" || a.CephPool != "kaonfs_ec" || a.ObjectSize != 16<<20 {
		t.Fatalf("assignment %+v, want io buffered, pool kaonfs_ec, object size 16 MiB", a)
	}
	sp, _ := s2.Spaces(ctx, root)
	if len(sp) != 1 || sp[0].Name != "ceph" || sp[0].CephPool != "kaonfs_ec" {
		t.Fatalf("space ls after reload: %+v", sp)
	}
}

// TestRadosPlaces: fs add of a RADOS pool gets an object namespace of its
// own; bad places are refused.
func TestRadosPlaces(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	beat(t, s, "n1")
	f, err := s.AddFilesystem(ctx, root, nsapi.NewFilesystem{Node: "n1", Path: "rados://kaon@kaon-rados?conf=%2Fetc%2Fceph%2Fceph.conf", Space: "rados", ObjectSize: "16M"})
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != "rados://kaon@kaon-rados/kaon-fs1?conf=%2Fetc%2Fceph%2Fceph.conf" || f.ObjectSize != 16<<20 {
		t.Fatalf("registered %q object size %d", f.Path, f.ObjectSize)
	}
	if _, err := s.AddFilesystem(ctx, root, nsapi.NewFilesystem{Node: "n1", Path: "rados://p/ns"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"rados:///ns", "rados://p/ns?keyring=x", "relative/dir"} {
		if _, err := s.AddFilesystem(ctx, root, nsapi.NewFilesystem{Node: "n1", Path: bad}); !kerr.Is(err, kerr.Invalid) {
			t.Fatalf("fs add %s: %v", bad, err)
		}
	}
}

package mgm

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/namespace"
)

func newMGM(t *testing.T) *Server {
	t.Helper()
	eng := memkv.New()
	ns, err := namespace.Open(eng, namespace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	s, err := New(Config{Namespace: ns, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// register simulates storage servers: nodes × fs each.
func register(t *testing.T, s *Server, nodes, fs int) {
	t.Helper()
	for n := 0; n < nodes; n++ {
		hb := cluster.Heartbeat{Version: cluster.Version, Node: fmt.Sprintf("node%d", n), Addr: fmt.Sprintf("http://node%d", n)}
		for f := 0; f < fs; f++ {
			hb.Filesystems = append(hb.Filesystems, cluster.FsReport{Path: fmt.Sprintf("/d%d", f), Capacity: 1 << 40, Used: 1 << 30, Health: "ok"})
		}
		if _, err := s.Heartbeat(context.Background(), hb); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPlacementSpreadsAndRespectsState(t *testing.T) {
	s := newMGM(t)
	register(t, s, 3, 4) // 12 filesystems on 3 nodes
	l, _ := layout.Parse("ec:4+2")
	for i := 0; i < 50; i++ {
		locs, err := s.reg.place(l)
		if err != nil {
			t.Fatal(err)
		}
		perNode := map[string]int{}
		seen := map[uint32]bool{}
		for _, id := range locs {
			if seen[id] {
				t.Fatalf("fs %d used twice: %v", id, locs)
			}
			seen[id] = true
			perNode[s.reg.fs[id].Node]++
		}
		for n, c := range perNode {
			if c != 2 {
				t.Fatalf("node %s got %d stripes: %v", n, c, perNode)
			}
		}
	}
	for _, id := range []uint32{1, 2, 3, 4, 5, 6} {
		st := []string{"off", "ro", "drain"}[id%3]
		if err := s.ConfigFilesystem(id, "configstatus", st); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		locs, err := s.reg.place(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range locs {
			if id <= 6 {
				t.Fatalf("stripe placed on non-rw fs %d", id)
			}
		}
	}
	big, _ := layout.Parse("ec:4+3")
	_, err := s.reg.place(big)
	if kerr.KindOf(err) != kerr.NoSpace || !strings.Contains(err.Error(), "needs 7 writable filesystems, 6 available") {
		t.Fatalf("too few filesystems: %v", err)
	}
}

func TestRegistryPersistsAndKeepsIDs(t *testing.T) {
	eng := memkv.New()
	ns, _ := namespace.Open(eng, namespace.Options{})
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	s, _ := New(Config{Namespace: ns, Key: key})
	register(t, s, 1, 2)
	if err := s.ConfigFilesystem(2, "configstatus", "ro"); err != nil {
		t.Fatal(err)
	}
	s2, _ := New(Config{Namespace: ns, Key: key})
	fss := s2.Filesystems()
	if len(fss) != 2 || fss[1].ConfigStatus != "ro" || fss[0].BootStatus != "down" {
		t.Fatalf("after reload: %+v", fss)
	}
	// The node comes back under another name: its marker ids keep the fs.
	reply, err := s2.Heartbeat(context.Background(), cluster.Heartbeat{Version: cluster.Version, Node: "renamed", Addr: "http://x",
		Filesystems: []cluster.FsReport{{ID: 1, Path: "/d0", Health: "ok"}, {ID: 2, Path: "/d1", Health: "ok"}}})
	if err != nil || len(reply.Filesystems) != 2 || len(s2.Filesystems()) != 2 {
		t.Fatalf("re-registration created new filesystems: %+v %v", s2.Filesystems(), err)
	}
	if err := s2.ConfigFilesystem(1, "configstatus", "bogus"); kerr.KindOf(err) != kerr.Invalid {
		t.Fatalf("bad status: %v", err)
	}
}

func TestRedirectCapabilities(t *testing.T) {
	s := newMGM(t)
	register(t, s, 2, 3)
	_ = s.ns.Mkdir(namespace.Root, "/ec", 0o755, false)
	_ = s.ns.SetXAttr(namespace.Root, "/ec", namespace.AttrLayout, "ec:4+2")
	red, err := s.OpenWrite(namespace.Root, "/ec/f", namespace.CreateOptions{}, false)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.key.Verify(red.Token, time.Now(), capability.Access{Write: true})
	if err != nil || !c.Write || len(c.Targets) != 6 || c.Path != "/ec/f" || c.Targets[0].Addr != red.Addr {
		t.Fatalf("write capability %+v %v", c, err)
	}
	if !strings.Contains(red.URL(), "/kaon/v1/data/") {
		t.Fatalf("redirect URL %s", red.URL())
	}
	if err := s.Commit(context.Background(), cluster.Commit{Fid: c.Fid, Size: 5, Checksums: map[string]string{"adler32": "01"}}); err != nil {
		t.Fatal(err)
	}
	rred, n, err := s.OpenRead(namespace.Root, "/ec/f")
	if err != nil || n.Size != 5 {
		t.Fatal(err)
	}
	rc, _ := s.key.Verify(rred.Token, time.Now(), capability.Access{})
	if rc.Write || rc.Size != 5 || rc.Sums["adler32"] != "01" {
		t.Fatalf("read capability %+v", rc)
	}
	if _, _, err := s.OpenRead(namespace.Root, "/ec"); kerr.KindOf(err) != kerr.IsDir {
		t.Fatalf("read of a directory: %v", err)
	}
}

package nsserver

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

var root = auth.Root

func newServer(t *testing.T) *Server {
	t.Helper()
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	s, err := New(Config{Engine: memkv.New(), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// register simulates storage servers: nodes × fs each.
func register(t *testing.T, s *Server, nodes, fs int) {
	t.Helper()
	for n := 0; n < nodes; n++ {
		hb := message.Heartbeat{Version: message.Version, Node: fmt.Sprintf("node%d", n), Addr: fmt.Sprintf("http://node%d", n)}
		for f := 0; f < fs; f++ {
			hb.Filesystems = append(hb.Filesystems, message.FsReport{Path: fmt.Sprintf("/d%d", f), Capacity: 1 << 40, Used: 1 << 30, Health: "ok"})
		}
		if _, err := s.Heartbeat(context.Background(), hb); err != nil {
			t.Fatal(err)
		}
	}
}

// fsOf is the registration of fs id.
func fsOf(s *Server, id uint32) namespace.Filesystem {
	f, _ := s.reg.Filesystem(id)
	return f
}

func TestPlacementSpreadsAndRespectsState(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	register(t, s, 3, 4) // 12 filesystems on 3 nodes
	l, _ := layout.Parse("ec:4+2")
	for i := 0; i < 50; i++ {
		locs, err := s.reg.Place(l, "")
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
			perNode[fsOf(s, id).Node]++
		}
		for n, c := range perNode {
			if c != 2 {
				t.Fatalf("node %s got %d stripes: %v", n, c, perNode)
			}
		}
	}
	for _, id := range []uint32{1, 2, 3, 4, 5, 6} {
		st := []string{"off", "ro", "drain"}[id%3]
		if err := s.ConfigFilesystem(ctx, root, id, "configstatus", st); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		locs, err := s.reg.Place(l, "")
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
	_, err := s.reg.Place(big, "")
	if kerr.KindOf(err) != kerr.NoSpace || !strings.Contains(err.Error(), "needs 7 writable filesystems, 6 available") {
		t.Fatalf("too few filesystems: %v", err)
	}
}

func TestRegistryPersistsAndKeepsIDs(t *testing.T) {
	ctx := context.Background()
	eng := memkv.New()
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	s, _ := New(Config{Engine: eng, Key: key})
	register(t, s, 1, 2)
	if err := s.ConfigFilesystem(ctx, root, 2, "configstatus", "ro"); err != nil {
		t.Fatal(err)
	}
	if err := s.ConfigFilesystem(ctx, auth.Nobody, 2, "configstatus", "rw"); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("fs config by nobody: %v", err)
	}
	s2, _ := New(Config{Engine: eng, Key: key})
	fss, _ := s2.Filesystems(ctx, root)
	if len(fss) != 2 || fss[1].ConfigStatus != "ro" || fss[0].BootStatus != "down" {
		t.Fatalf("after reload: %+v", fss)
	}
	// The node comes back under another name: its marker ids keep the fs.
	reply, err := s2.Heartbeat(context.Background(), message.Heartbeat{Version: message.Version, Node: "renamed", Addr: "http://x",
		Filesystems: []message.FsReport{{ID: 1, Path: "/d0", Health: "ok"}, {ID: 2, Path: "/d1", Health: "ok"}}})
	if fss, _ = s2.Filesystems(ctx, root); err != nil || len(reply.Filesystems) != 2 || len(fss) != 2 {
		t.Fatalf("re-registration created new filesystems: %+v %v", fss, err)
	}
	if err := s2.ConfigFilesystem(ctx, root, 1, "configstatus", "bogus"); kerr.KindOf(err) != kerr.Invalid {
		t.Fatalf("bad status: %v", err)
	}
}

func TestGrantCapabilities(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	register(t, s, 2, 3)
	_ = s.Mkdir(ctx, root, "/ec", 0o755, false)
	_ = s.SetXAttr(ctx, root, "/ec", nsapi.AttrLayout, "ec:4+2")
	g, err := s.Open(ctx, root, "/ec/f", nsapi.OpenRequest{Write: true, Create: true, Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.key.Verify(g.Token, time.Now(), capability.Access{Write: true})
	if err != nil || !c.Write || len(c.Targets) != 6 || c.Path != "/ec/f" || c.Targets[0].Addr != g.Server.HTTP {
		t.Fatalf("write capability %+v %v", c, err)
	}
	if err := s.Commit(ctx, message.Commit{Fid: c.Fid, Size: 5, Checksums: map[string]string{"adler32": "01"}}); err != nil {
		t.Fatal(err)
	}
	rg, err := s.Open(ctx, root, "/ec/f", nsapi.OpenRequest{})
	if err != nil || rg.File.Size != 5 {
		t.Fatal(err)
	}
	rc, _ := s.key.Verify(rg.Token, time.Now(), capability.Access{})
	if rc.Write || rc.Size != 5 || rc.Sums["adler32"] != "01" {
		t.Fatalf("read capability %+v", rc)
	}
	if _, err := s.Open(ctx, root, "/ec", nsapi.OpenRequest{}); kerr.KindOf(err) != kerr.IsDir {
		t.Fatalf("read of a directory: %v", err)
	}
	// An open for writing without truncate is an update session of the
	// committed file, at its data version; one by whoever may not write
	// the file is refused.
	ug, err := s.Open(ctx, root, "/ec/f", nsapi.OpenRequest{Write: true})
	if err != nil {
		t.Fatalf("open for update: %v", err)
	}
	uc, err := s.key.Verify(ug.Token, time.Now(), capability.Access{Write: true})
	if err != nil || !uc.Update || uc.Fid != c.Fid || uc.Size != 5 || uc.DataVersion != 0 || len(uc.Targets) != 6 {
		t.Fatalf("update capability %+v %v", uc, err)
	}
	if _, err := s.Open(ctx, auth.Nobody, "/ec/f", nsapi.OpenRequest{Write: true, Update: true}); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("open for update by nobody: %v", err)
	}
	// A file another user may not read is not granted to them.
	s.Chmod(ctx, root, "/ec/f", 0o600)
	if _, err := s.Open(ctx, auth.Nobody, "/ec/f", nsapi.OpenRequest{}); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("read of a 0600 file by nobody: %v", err)
	}
	if _, err := s.Checksum(ctx, auth.Nobody, "/ec/f", "adler32"); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("checksum of a 0600 file by nobody: %v", err)
	}
}

// TestACLs: directory ACLs add to the mode bits, deny deletion or update
// where they say so, apply to the files of the directory, are inherited,
// and user.acl counts only where root enabled it.
func TestACLs(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	register(t, s, 1, 1)
	alice := auth.Principal{UID: 1001, GID: 1001, Name: "alice", Method: "test"}
	bob := auth.Principal{UID: 1002, GID: 1002, Name: "bob", Method: "test"}
	carol := auth.Principal{UID: 1003, GID: 500, Groups: []uint32{600}, Name: "carol", Method: "test"}
	create := func(p auth.Principal, path string) error {
		g, err := s.Open(ctx, p, path, nsapi.OpenRequest{Write: true, Create: true, Truncate: true})
		if err != nil {
			return err
		}
		return s.Commit(ctx, message.Commit{Fid: g.File.ID, Size: 3, Checksums: map[string]string{"adler32": "1"}})
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	denied := func(what string, err error) {
		t.Helper()
		if !kerr.Is(err, kerr.Permission) {
			t.Fatalf("%s: %v, want permission denied", what, err)
		}
	}
	must("mkdir", s.Mkdir(ctx, root, "/proj", 0o755, false))
	denied("alice creates without ACL", create(alice, "/proj/a"))
	if err := s.SetXAttr(ctx, root, "/proj", nsapi.AttrACL, "u:1001:rwx!d,g:600:rx"); err != nil {
		t.Fatal(err)
	}
	must("alice creates with u:1001:rwx", create(alice, "/proj/a"))
	must("alice mkdir", s.Mkdir(ctx, alice, "/proj/sub", 0o700, false))
	denied("bob creates", create(bob, "/proj/b"))
	denied("alice deletes under !d", s.Remove(ctx, alice, "/proj/a", nsapi.RemoveOptions{}))
	denied("alice renames away under !d", errOnly(s.Rename(ctx, alice, "/proj/a", "/proj/a2", false)))
	must("alice replaces her file (w implies u)", create(alice, "/proj/a"))
	// Inherited: /proj/sub got the ACL, so carol (group 600) may list it
	// although it is 0700 and alice's.
	if _, err := s.List(ctx, carol, "/proj/sub"); err != nil {
		t.Fatalf("carol lists an inherited g:600:rx directory: %v", err)
	}
	denied("bob lists 0700 /proj/sub", errOnly(s.List(ctx, bob, "/proj/sub")))
	// The directory's ACL applies to its files: r lets carol read a 0600 file.
	must("chmod", s.Chmod(ctx, root, "/proj/a", 0o600))
	if _, err := s.Open(ctx, carol, "/proj/a", nsapi.OpenRequest{}); err != nil {
		t.Fatalf("carol reads a 0600 file in a g:600:r directory: %v", err)
	}
	denied("bob reads the 0600 file", errOnly(s.Open(ctx, bob, "/proj/a", nsapi.OpenRequest{})))
	// !u: new files yes, replacing no.
	must("set", s.SetXAttr(ctx, root, "/proj", nsapi.AttrACL, "u:1002:rw!u"))
	must("bob creates under rw!u", create(bob, "/proj/bob"))
	denied("bob replaces under !u", create(bob, "/proj/bob"))
	// user.acl counts only with sys.eval.useracl.
	must("user dir", s.Mkdir(ctx, root, "/home-alice", 0o700, false))
	must("chown", s.Chown(ctx, root, "/home-alice", 1001, 1001))
	must("alice sets user.acl", s.SetXAttr(ctx, alice, "/home-alice", nsapi.AttrUserACL, "u:1002:rx"))
	denied("bob lists without sys.eval.useracl", errOnly(s.List(ctx, bob, "/home-alice")))
	must("eval", s.SetXAttr(ctx, root, "/home-alice", nsapi.AttrEvalACL, "1"))
	if _, err := s.List(ctx, bob, "/home-alice"); err != nil {
		t.Fatalf("bob lists with user.acl u:1002:rx: %v", err)
	}
	denied("alice sets sys.acl", s.SetXAttr(ctx, alice, "/home-alice", nsapi.AttrACL, "z:rwx"))
	for _, bad := range []string{"u:bob:rx", "x:1:r", "u:1:rq", "z:!x", "u::r"} {
		if err := s.SetXAttr(ctx, root, "/proj", nsapi.AttrACL, bad); !kerr.Is(err, kerr.Invalid) {
			t.Fatalf("ACL %q accepted: %v", bad, err)
		}
	}
}

func errOnly[T any](_ T, err error) error { return err }

// TestMoveRefusalsSayWhat: a refused mv names what was refused and where,
// as rm does: taking the entry out of its directory (delete there, an
// ACL's !d), writing into the destination directory, or replacing what
// the destination holds.
func TestMoveRefusalsSayWhat(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	register(t, s, 1, 1)
	alice := auth.Principal{UID: 1001, GID: 1001, Name: "alice", Method: "test"}
	create := func(p auth.Principal, path string) {
		t.Helper()
		g, err := s.Open(ctx, p, path, nsapi.OpenRequest{Write: true, Create: true, Truncate: true})
		if err == nil {
			err = s.Commit(ctx, message.Commit{Fid: g.File.ID, Size: 3, Checksums: map[string]string{"adler32": "1"}})
		}
		if err != nil {
			t.Fatalf("create %s: %v", path, err)
		}
	}
	for _, d := range []string{"/proj", "/home", "/ro"} {
		if err := s.Mkdir(ctx, root, d, 0o755, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Chown(ctx, root, "/home", 1001, 1001); err != nil {
		t.Fatal(err)
	}
	if err := s.SetXAttr(ctx, root, "/proj", nsapi.AttrACL, "u:1001:rwx!d"); err != nil {
		t.Fatal(err)
	}
	create(alice, "/proj/a")
	create(alice, "/home/f")
	for _, c := range []struct {
		what, from, to string
		want           string
	}{
		{"out of a !d directory", "/proj/a", "/home/a", "mv /proj/a: permission to delete denied in /proj (a move takes it out of there)"},
		{"into a directory she may not write", "/home/f", "/ro/f", "mv /ro/f: write permission denied on the destination directory /ro"},
		{"over a file she may not delete", "/home/f", "/proj/a", "mv /proj/a: permission to delete denied in /proj (the destination exists and would be replaced)"},
	} {
		_, err := s.Rename(ctx, alice, c.from, c.to, true)
		if !kerr.Is(err, kerr.Permission) || err.Error() != c.want {
			t.Errorf("mv %s (%s): %v, want %q", c.from, c.what, err, c.want)
		}
	}
}

// TestTokenScopes: scopes only narrow what the identity may do: read,
// create (no overwrite, no delete) and modify, each below whole path
// components; administration is never allowed with a scoped principal.
func TestTokenScopes(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	register(t, s, 1, 1)
	for _, d := range []string{"/foo", "/foobar", "/up", "/rw"} {
		s.Mkdir(ctx, root, d, 0o777, false)
	}
	put := func(p auth.Principal, path string) error {
		g, err := s.Open(ctx, p, path, nsapi.OpenRequest{Write: true, Create: true, Truncate: true})
		if err != nil {
			return err
		}
		return s.Commit(ctx, message.Commit{Fid: g.File.ID, Size: 1})
	}
	for _, f := range []string{"/foo/x", "/foobar/x", "/rw/a"} {
		if err := put(root, f); err != nil {
			t.Fatal(err)
		}
	}
	tok := auth.Principal{UID: 0, Name: "robot", Method: "token", Scopes: []auth.Scope{
		{Op: auth.ScopeRead, Path: "/foo"}, {Op: auth.ScopeCreate, Path: "/up"}, {Op: auth.ScopeModify, Path: "/rw"}}}
	ok := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	no := func(what string, err error) {
		t.Helper()
		if !kerr.Is(err, kerr.Permission) {
			t.Fatalf("%s: %v, want permission denied", what, err)
		}
	}
	ok("read /foo/x", errOnly(s.Open(ctx, tok, "/foo/x", nsapi.OpenRequest{})))
	no("read /foobar/x", errOnly(s.Open(ctx, tok, "/foobar/x", nsapi.OpenRequest{})))
	no("stat /foobar/x", errOnly(s.Stat(ctx, tok, "/foobar/x")))
	no("list /", errOnly(s.List(ctx, tok, "/")))
	no("write /foo/y with a read scope", put(tok, "/foo/y"))
	no("delete /foo/x with a read scope", s.Remove(ctx, tok, "/foo/x", nsapi.RemoveOptions{}))
	ok("create /up/new", put(tok, "/up/new"))
	ok("mkdir /up/d", s.Mkdir(ctx, tok, "/up/d", 0, false))
	no("overwrite /up/new with create", put(tok, "/up/new"))
	no("delete /up/new with create", s.Remove(ctx, tok, "/up/new", nsapi.RemoveOptions{}))
	no("read /up/new with create", errOnly(s.Open(ctx, tok, "/up/new", nsapi.OpenRequest{})))
	update := func(p auth.Principal, path string) error {
		return errOnly(s.Open(ctx, p, path, nsapi.OpenRequest{Write: true, Update: true}))
	}
	no("update /up/new with create", update(tok, "/up/new"))
	no("truncate /up/new with create", s.Truncate(ctx, tok, "/up/new", 7))
	ok("update /rw/a with modify", update(tok, "/rw/a"))
	ok("overwrite /rw/a with modify", put(tok, "/rw/a"))
	ok("rename /rw/a to /up/b", errOnly(s.Rename(ctx, tok, "/rw/a", "/up/b", false)))
	no("rename /up/b back", errOnly(s.Rename(ctx, tok, "/up/b", "/rw/c", false)))
	ok("delete with modify", s.Remove(ctx, tok, "/rw", nsapi.RemoveOptions{Recursive: true}))
	no("chmod outside", s.Chmod(ctx, tok, "/foo/x", 0o600))
	no("fs config with a token mapped to root", s.ConfigFilesystem(ctx, tok, 1, "configstatus", "ro"))
	no("quota set with a token mapped to root", s.SetQuota(ctx, tok, "/up", nsapi.QuotaKey{Kind: nsapi.QuotaProject}, nsapi.Amount{Bytes: 1}))
	if _, err := s.Open(ctx, tok, "/foo/../foobar/x", nsapi.OpenRequest{}); err == nil {
		t.Fatal("a .. path escaped the scope")
	}
}

// TestTokenCreateScopeRace: a token that may only create (storage.create)
// never replaces or updates a file that appears between the scope
// decision and the namespace's own step: which scope an open needs is
// decided by the namespace operation itself, not by an earlier Stat.
func TestTokenCreateScopeRace(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	register(t, s, 1, 1)
	s.Mkdir(ctx, root, "/up", 0o777, false)
	tok := auth.Principal{UID: 0, Name: "robot", Method: "token", Scopes: []auth.Scope{{Op: auth.ScopeCreate, Path: "/up"}}}
	for _, c := range []struct {
		what string
		req  nsapi.OpenRequest
	}{
		{"upload (create, truncate)", nsapi.OpenRequest{Write: true, Create: true, Truncate: true}},
		{"open for write, create if missing", nsapi.OpenRequest{Write: true, Create: true}},
		{"ranged write, create if missing", nsapi.OpenRequest{Write: true, Create: true, Update: true}},
	} {
		path := "/up/" + strings.NewReplacer(" ", "-", ",", "", "(", "", ")", "").Replace(c.what)
		var fid uint64
		s.openRace = func() {
			s.openRace = nil
			g, err := s.Open(ctx, root, path, nsapi.OpenRequest{Write: true, Create: true, Truncate: true})
			if err != nil {
				t.Fatalf("%s: root's create of %s: %v", c.what, path, err)
			}
			if err := s.Commit(ctx, message.Commit{Fid: g.File.ID, Size: 1}); err != nil {
				t.Fatalf("%s: root's commit of %s: %v", c.what, path, err)
			}
			fid = g.File.ID
		}
		_, err := s.Open(ctx, tok, path, c.req)
		if !kerr.Is(err, kerr.Permission) {
			t.Errorf("%s of %s created meanwhile, with a create-only token: %v, want permission denied", c.what, path, err)
		}
		if fid == 0 {
			t.Fatalf("%s: the race hook did not run", c.what)
		}
		e, err := s.Stat(ctx, root, path)
		if err != nil || e.ID != fid || e.Size != 1 {
			t.Errorf("%s: %s after the refused open: %+v, %v; want root's file %d of 1 byte", c.what, path, e, err, fid)
		}
	}
}

// Unfinished names, of the unfinished stripes a restarted storage server
// found, only those whose id is no file's and no pending upload's; it
// answers only the node the filesystem is registered on.
func TestUnfinishedStripesUnknownOnly(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	register(t, s, 1, 1)
	g, err := s.Open(ctx, root, "/committed", nsapi.OpenRequest{Write: true, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Claim(ctx, g.File.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, message.Commit{Fid: g.File.ID, Size: 0, Checksums: map[string]string{}}); err != nil {
		t.Fatal(err)
	}
	p, err := s.Open(ctx, root, "/pending", nsapi.OpenRequest{Write: true, Create: true})
	if err != nil {
		t.Fatal(err)
	}
	unknown := p.File.ID + 1000
	r, err := s.Unfinished(ctx, message.Unfinished{Node: "node0", FsID: 1, Fids: []uint64{g.File.ID, p.File.ID, unknown}})
	if err != nil || len(r.Unknown) != 1 || r.Unknown[0] != unknown {
		t.Fatalf("unknown %v (%v), want only %d", r.Unknown, err, unknown)
	}
	if _, err := s.Unfinished(ctx, message.Unfinished{Node: "node9", FsID: 1, Fids: []uint64{unknown}}); kerr.KindOf(err) != kerr.Invalid {
		t.Fatalf("asked by another node: %v", err)
	}
}

// TestReadsTryLateServers: a storage server whose heartbeats are late
// (a loaded host) leaves placement at once, but reads of the files only
// it holds are still sent to it rather than refused, until lateGrace.
func TestReadsTryLateServers(t *testing.T) {
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	s, err := New(Config{Engine: memkv.New(), Key: key, HeartbeatInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	register(t, s, 1, 1)
	time.Sleep(2100 * time.Millisecond) // past 3 intervals + 2 s: late, not lost
	if _, ok := s.reg.Readable(1); ok {
		t.Fatal("fs 1 still counts as reporting on time")
	}
	entry := s.targets(&capability.Capability{}, []uint32{1})
	if entry.HTTP != "http://node0" {
		t.Fatalf("read of a file on a late server sent to %q, want http://node0", entry.HTTP)
	}
}

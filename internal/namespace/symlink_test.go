package namespace

import (
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/integration/etcdtest"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/etcdkv"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestSymlinks runs the symbolic link checks on every engine: the
// record is the namespace's, but each engine stores, scans and reopens
// it (etcd: a real one-member cluster).
func TestSymlinks(t *testing.T) {
	t.Run("memkv", func(t *testing.T) {
		e := memkv.New()
		testSymlinks(t, e, func() kv.Engine { return e })
	})
	t.Run("pebble", func(t *testing.T) {
		dir := t.TempDir()
		e, err := pebblekv.Open(dir, pebblekv.Options{})
		if err != nil {
			t.Fatal(err)
		}
		testSymlinks(t, e, func() kv.Engine {
			e.Close()
			if e, err = pebblekv.Open(dir, pebblekv.Options{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			return e
		})
	})
	t.Run("etcd", func(t *testing.T) {
		c := etcdtest.Start(t, 1)
		open := func() kv.Engine {
			e, err := etcdkv.Open(etcdkv.Options{Endpoints: c.Endpoints(), Prefix: "ns/",
				MaxTxnOps: etcdtest.MaxTxnOps, MaxRequestBytes: etcdtest.MaxRequestBytes})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			return e
		}
		testSymlinks(t, open(), open)
	})
}

func testSymlinks(t *testing.T, eng kv.Engine, reopen func() kv.Engine) {
	ns, err := Open(eng, Options{})
	if err != nil {
		t.Fatal(err)
	}
	alice := Caller{UID: 1000, GID: 1000}
	bob := Caller{UID: 2000, GID: 2000}
	for _, d := range []string{"/a/sub", "/b"} {
		if err := ns.Mkdir(Root, d, 0o755, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"/a", "/a/sub"} {
		if err := ns.Chown(Root, d, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	create(t, ns, "/b/data", 7)

	// Created verbatim: the target is never interpreted.
	odd := "..//b/./data/"
	l, err := ns.Symlink(alice, odd, "/a/odd")
	if err != nil {
		t.Fatal(err)
	}
	if !l.IsLink() || l.Target != odd || l.Size != int64(len(odd)) || l.UID != 1000 || l.Layout != "" || len(l.Locations) != 0 {
		t.Fatalf("new link: %+v", l)
	}
	if _, err := ns.Symlink(alice, "../b/data", "/a/rel"); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Symlink(alice, "/b", "/a/abs"); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Symlink(alice, "nowhere", "/a/dangling"); err != nil {
		t.Fatal(err)
	}

	// Refusals: empty, over PATH_MAX, a name taken, no write permission.
	mustKind(t, errOf(ns.Symlink(alice, "", "/a/empty")), kerr.Invalid)
	mustKind(t, errOf(ns.Symlink(alice, strings.Repeat("x", nsapi.MaxPath+1), "/a/long")), kerr.NameTooLong)
	if _, err := ns.Symlink(alice, strings.Repeat("x/", nsapi.MaxPath/2), "/a/max"); err != nil {
		t.Fatalf("a 4096-byte target: %v", err)
	}
	mustKind(t, errOf(ns.Symlink(alice, "x", "/a/rel")), kerr.Exists)
	mustKind(t, errOf(ns.Symlink(alice, "x", "/a/sub")), kerr.Exists)
	mustKind(t, errOf(ns.Symlink(bob, "x", "/a/bobs")), kerr.Permission)
	mustKind(t, errOf(ns.Symlink(alice, "x", "/nope/l")), kerr.NotFound)

	// stat, lookup and list return the link with its target; the
	// directory counts it as an entry of its size.
	n, err := ns.Stat(bob, "/a/odd")
	if err != nil || n.Target != odd || n.IsDir {
		t.Fatalf("stat link: %+v %v", n, err)
	}
	if n, err := ns.Lookup(bob, n.Parent, "rel"); err != nil || n.Target != "../b/data" {
		t.Fatalf("lookup link: %+v %v", n, err)
	}
	ls, err := ns.List(bob, "/a")
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]string{}
	for _, e := range ls {
		targets[e.Name] = e.Target
	}
	if targets["abs"] != "/b" || targets["dangling"] != "nowhere" || targets["sub"] != "" {
		t.Fatalf("list: %v", targets)
	}
	a, _ := ns.Stat(Root, "/a")
	wantSize := int64(len(odd) + len("../b/data") + len("/b") + len("nowhere") + nsapi.MaxPath)
	if a.TreeFiles != 5 || a.TreeSize != wantSize {
		t.Fatalf("accounting of /a: %d files %d bytes, want 5 and %d", a.TreeFiles, a.TreeSize, wantSize)
	}

	// Links are no files with data: fsck, drain and the dump never see them.
	var scanned []string
	if _, err := ns.ScanFiles(nil, 1000, func(f *Inode) { scanned = append(scanned, f.Name) }); err != nil {
		t.Fatal(err)
	}
	if len(scanned) != 1 || scanned[0] != "data" {
		t.Fatalf("ScanFiles saw %v, want only data", scanned)
	}
	var dumped []string
	if err := ns.Dump(Root, "/", func(p string) error { dumped = append(dumped, p); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(dumped) != 1 || dumped[0] != "/b/data" {
		t.Fatalf("Dump listed %v, want only /b/data", dumped)
	}
	mustKind(t, errOf(ns.Versions(Root, "/a/rel")), kerr.Invalid)

	// Follow: relative, absolute, through a linked directory, a chain,
	// ".." that stops at the root, dangling, a loop.
	ns.Symlink(alice, "abs/data", "/a/chain")
	ns.Symlink(alice, "../../../../b", "/a/up")
	ns.Symlink(alice, "loop2", "/a/loop1")
	ns.Symlink(alice, "loop1", "/a/loop2")
	for p, want := range map[string]string{"/a/rel": "/b/data", "/a/odd": "/b/data", "/a/abs/data": "/b/data",
		"/a/chain": "/b/data", "/a/up/data": "/b/data", "/a/abs": "/b", "/b/data": "/b/data"} {
		to, n, err := ns.Follow(bob, p)
		if err != nil || to != want || n == nil || n.IsLink() {
			t.Fatalf("follow %s: %q %+v %v, want %s", p, to, n, err, want)
		}
	}
	if to, n, err := ns.Follow(bob, "/a/dangling"); err != nil || to != "/a/nowhere" || n != nil {
		t.Fatalf("follow dangling: %q %+v %v", to, n, err)
	}
	mustKind(t, errOf3(ns.Follow(bob, "/a/loop1")), kerr.Loop)
	mustKind(t, errOf3(ns.Follow(bob, "/a/dangling/x")), kerr.NotFound)
	ns.Chmod(Root, "/b", 0o700)
	mustKind(t, errOf3(ns.Follow(bob, "/a/rel")), kerr.Permission) // /b is not searchable for bob
	ns.Chmod(Root, "/b", 0o755)

	// rename moves the link itself; over a file it replaces the file,
	// and a file renamed over a link replaces the link.
	if _, err := ns.Rename(alice, "/a/rel", "/a/sub/rel2", false); err != nil {
		t.Fatal(err)
	}
	if n, err := ns.Stat(Root, "/a/sub/rel2"); err != nil || n.Target != "../b/data" {
		t.Fatalf("renamed link: %+v %v", n, err)
	}
	if n, _ := ns.Stat(Root, "/b/data"); n == nil || n.Size != 7 {
		t.Fatalf("rename of a link touched its target: %+v", n)
	}
	if _, err := ns.CreateEmpty(alice, "/a/file", CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if replaced, err := ns.Rename(alice, "/a/abs", "/a/file", true); err != nil || !replaced {
		t.Fatalf("link over file: %v %v", replaced, err)
	}
	if n, _ := ns.Stat(Root, "/a/file"); n == nil || n.Target != "/b" {
		t.Fatalf("link renamed over a file: %+v", n)
	}
	if _, err := ns.CreateEmpty(alice, "/a/file2", CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if replaced, err := ns.Rename(alice, "/a/file2", "/a/file", true); err != nil || !replaced {
		t.Fatalf("file over link: %v %v", replaced, err)
	}
	if n, _ := ns.Stat(Root, "/a/file"); n == nil || n.IsLink() {
		t.Fatalf("file renamed over a link: %+v", n)
	}

	// rm removes the link, never its target; nothing is queued for deletion.
	if err := ns.Remove(alice, "/a/chain", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	mustKind(t, errOf(ns.Stat(Root, "/a/chain")), kerr.NotFound)
	if _, err := ns.Stat(Root, "/b/data"); err != nil {
		t.Fatalf("rm of a link removed its target: %v", err)
	}

	// With the recycle bin on, a link goes there like a file and comes back.
	ns.SetXAttr(Root, "/a", nsapi.AttrRecycle, "on")
	if err := ns.Remove(alice, "/a/dangling", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	es, err := ns.RecycleList(alice)
	if err != nil || len(es) != 1 || es[0].Path != "/a/dangling" {
		t.Fatalf("recycle ls: %+v %v", es, err)
	}
	if _, err := ns.RecycleRestore(alice, es[0].Key, false); err != nil {
		t.Fatal(err)
	}
	if n, err := ns.Stat(Root, "/a/dangling"); err != nil || n.Target != "nowhere" {
		t.Fatalf("restored link: %+v %v", n, err)
	}

	// The link survives a reopen of the engine.
	ns = nil
	ns, err = Open(reopen(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ns.Stat(Root, "/a/odd"); err != nil || n.Target != odd {
		t.Fatalf("link after reopen: %+v %v", n, err)
	}
}

func errOf3[A, B any](_ A, _ B, err error) error { return err }

// TestSymlinkQuota: a link is an entry of the quota.
func TestSymlinkQuota(t *testing.T) {
	ns := newNS(t)
	ns.Mkdir(Root, "/q", 0o777, false)
	if err := ns.SetQuota(Root, "/q", QuotaKey{QuotaUser, 1000}, Amount{Bytes: 100, Files: 1}); err != nil {
		t.Fatal(err)
	}
	alice := Caller{UID: 1000, GID: 1000}
	if _, err := ns.Symlink(alice, "t", "/q/l1"); err != nil {
		t.Fatal(err)
	}
	err := errOf(ns.Symlink(alice, "t", "/q/l2"))
	mustKind(t, err, kerr.Quota)
	if !strings.HasPrefix(err.Error(), "symlink ") {
		t.Fatalf("quota refusal %q does not name the symlink", err)
	}
	if err := ns.Remove(alice, "/q/l1", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Symlink(alice, "t", "/q/l2"); err != nil {
		t.Fatalf("after rm of the first link: %v", err)
	}
}

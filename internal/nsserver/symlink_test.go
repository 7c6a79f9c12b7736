package nsserver

import (
	"context"
	"testing"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestSymlinkAuthorization: following a link never grants more than
// naming its target would. A token scoped to /pub reads a file there
// through a link in /pub, but not through a link in /pub to /secret
// (scope checked on the path reached), nor /pub's files through a link
// outside its scope (checked on the path named); a uid that may not
// search /private is refused through a link as by name; a read through
// a link carries the named path in its capability, the write through a
// dangling link creates its target; ".." in a target stops at the root.
func TestSymlinkAuthorization(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	register(t, s, 1, 1)
	for _, d := range []string{"/pub", "/secret", "/private", "/other"} {
		if err := s.Mkdir(ctx, root, d, 0o777, false); err != nil {
			t.Fatal(err)
		}
	}
	s.Chmod(ctx, root, "/private", 0o700)
	put := func(p auth.Principal, path string) error {
		g, err := s.Open(ctx, p, path, nsapi.OpenRequest{Write: true, Create: true, Truncate: true})
		if err != nil {
			return err
		}
		return s.Commit(ctx, message.Commit{Fid: g.File.ID, Size: 1})
	}
	for _, f := range []string{"/pub/f", "/secret/f", "/private/f"} {
		if err := put(root, f); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"/pub/ok": "f", "/pub/out": "../secret/f", "/other/in": "/pub/f",
		"/pub/priv": "/private/f", "/pub/up": "../../../../pub/f", "/pub/new": "created"} {
		if _, err := s.Symlink(ctx, root, target, link); err != nil {
			t.Fatal(err)
		}
	}
	tok := auth.Principal{UID: 1000, GID: 1000, Name: "robot", Method: "token", Scopes: []auth.Scope{
		{Op: auth.ScopeRead, Path: "/pub"}, {Op: auth.ScopeCreate, Path: "/pub"}}}
	user := auth.Principal{UID: 1000, GID: 1000, Name: "alice", Method: "unix"}
	read := func(p auth.Principal, path string) (*nsapi.Grant, error) {
		return s.Open(ctx, p, path, nsapi.OpenRequest{})
	}

	g, err := read(tok, "/pub/ok")
	if err != nil {
		t.Fatalf("read through a link inside the scope: %v", err)
	}
	if g.File.Path != "/pub/f" {
		t.Fatalf("grant for %s, want the target /pub/f", g.File.Path)
	}
	if _, err := read(tok, "/pub/up"); err != nil {
		t.Fatalf("read through a link whose .. stops at the root: %v", err)
	}
	for _, p := range []string{"/pub/out", "/other/in"} {
		if _, err := read(tok, p); !kerr.Is(err, kerr.Permission) {
			t.Fatalf("token read through %s: %v, want permission denied", p, err)
		}
		if _, err := s.Follow(ctx, tok, p); !kerr.Is(err, kerr.Permission) {
			t.Fatalf("token stat through %s: %v, want permission denied", p, err)
		}
	}
	if _, err := s.Checksum(ctx, tok, "/pub/out", "adler32"); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("token checksum through /pub/out: %v, want permission denied", err)
	}
	if _, err := read(user, "/pub/priv"); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("read through a link into a directory alice may not search: %v", err)
	}
	if _, err := read(user, "/private/f"); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("read of /private/f by name: %v", err)
	}
	// What the link is: lstat through Stat, the target through Follow.
	if e, err := s.Stat(ctx, tok, "/pub/ok"); err != nil || e.Target != "f" || e.Size != 1 {
		t.Fatalf("stat of a link: %+v %v", e, err)
	}
	if e, err := s.Follow(ctx, tok, "/pub/ok"); err != nil || e.Path != "/pub/f" || e.IsLink() {
		t.Fatalf("follow of a link: %+v %v", e, err)
	}
	if _, err := s.Follow(ctx, tok, "/pub/new"); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("follow of a dangling link: %v, want not found", err)
	}
	// A write through a dangling link creates its target.
	if err := put(tok, "/pub/new"); err != nil {
		t.Fatalf("write through a dangling link: %v", err)
	}
	if e, err := s.Stat(ctx, root, "/pub/created"); err != nil || e.IsLink() {
		t.Fatalf("the target written through the link: %+v %v", e, err)
	}
	if e, err := s.Stat(ctx, root, "/pub/new"); err != nil || e.Target != "created" {
		t.Fatalf("the link after a write through it: %+v %v", e, err)
	}
	// A front end's listing shows a link as what it leads to where the
	// caller may follow it, else as itself.
	ents, err := s.ListFollowing(ctx, tok, "/pub")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]nsapi.Entry{}
	for _, e := range ents {
		got[e.Name] = e
	}
	if e := got["ok"]; e.IsLink() || e.Path != "/pub/ok" || e.ID != got["f"].ID {
		t.Fatalf("listed link to f: %+v", e)
	}
	if e := got["out"]; !e.IsLink() || e.Target != "../secret/f" {
		t.Fatalf("listed link out of the scope: %+v", e)
	}

	// A touch that replaces needs the modify scope on both paths.
	mod := auth.Principal{UID: 0, Name: "robot", Method: "token", Scopes: []auth.Scope{{Op: auth.ScopeModify, Path: "/pub"}}}
	for _, p := range []string{"/pub/f", "/pub/ok"} {
		if _, err := s.Touch(ctx, mod, p, false, 0); err != nil {
			t.Fatalf("touch %s with the modify scope: %v", p, err)
		}
	}
	if _, err := s.Touch(ctx, mod, "/pub/out", false, 0); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("touch through a link out of the scope: %v", err)
	}
	if e, err := s.Stat(ctx, root, "/pub/ok"); err != nil || e.Target != "f" {
		t.Fatalf("the link after a touch through it: %+v %v", e, err)
	}

	// Making a link needs the create scope where it is made.
	if _, err := s.Symlink(ctx, tok, "/pub/f", "/other/l"); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("symlink outside the token's scope: %v", err)
	}
}

package auth

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
)

type fixed struct {
	p   Principal
	ok  bool
	err error
}

func (f fixed) Authenticate(context.Context, *Request) (Principal, bool, error) {
	return f.p, f.ok, f.err
}

func TestChain(t *testing.T) {
	alice := Principal{UID: 1000, Name: "alice", Method: "test"}
	ctx := context.Background()
	if p, err := (Chain{fixed{}, fixed{p: alice, ok: true}}).Authenticate(ctx, &Request{}); err != nil || p.Name != "alice" {
		t.Fatalf("second method: %+v %v", p, err)
	}
	if p, err := (Chain{fixed{}}).Authenticate(ctx, &Request{}); err != nil || p.UID != Nobody.UID {
		t.Fatalf("no method applies: %+v %v", p, err)
	}
	bad := errors.New("bad token")
	if _, err := (Chain{fixed{err: bad}, fixed{p: alice, ok: true}}).Authenticate(ctx, &Request{}); err != bad {
		t.Fatalf("a method that applies and fails must refuse: %v", err)
	}
}

// TestRefusePlaintextBearer: a bearer credential that came in plaintext is
// refused (not passed to the methods after it), one over TLS and a request
// without one pass.
func TestRefusePlaintextBearer(t *testing.T) {
	alice := Principal{UID: 1000, Name: "alice", Method: "token"}
	c := Chain{RefusePlaintextBearer{}, fixed{p: alice, ok: true}}
	ctx := context.Background()
	if p, err := c.Authenticate(ctx, &Request{Bearer: "t"}); err == nil || p.UID == alice.UID {
		t.Fatalf("a plaintext bearer token was taken: %+v %v", p, err)
	}
	for _, r := range []*Request{{Bearer: "t", TLS: true}, {}} {
		if p, err := c.Authenticate(ctx, r); err != nil || p.Name != "alice" {
			t.Fatalf("%+v: %+v %v", r, p, err)
		}
	}
}

// TestRefusePlaintextNegotiate: a Kerberos token sent as HTTP Negotiate in
// plaintext is a bearer credential too (whoever reads it may present it
// first), refused as a bearer token is; over TLS it passes, and so does
// root://'s krb5 in plaintext (XRootD's own rule: its AP-REQ is bound to
// the session).
func TestRefusePlaintextNegotiate(t *testing.T) {
	alice := Principal{UID: 1000, Name: "alice", Method: "krb5"}
	c := Chain{RefusePlaintextBearer{}, fixed{p: alice, ok: true}}
	http, root := WithProtocol(context.Background(), "http"), WithProtocol(context.Background(), "root")
	if p, err := c.Authenticate(http, &Request{Kerberos: []byte{0x60}}); err == nil || p.UID == alice.UID || !strings.Contains(err.Error(), "Negotiate") {
		t.Fatalf("a plaintext Negotiate token was taken: %+v %v", p, err)
	}
	if p, err := c.Authenticate(http, &Request{Kerberos: []byte{0x60}, TLS: true}); err != nil || p.Name != "alice" {
		t.Fatalf("Negotiate over TLS: %+v %v", p, err)
	}
	if p, err := c.Authenticate(root, &Request{Kerberos: []byte{0x6e}}); err != nil || p.Name != "alice" {
		t.Fatalf("root:// krb5 in plaintext: %+v %v", p, err)
	}
}

// TestUnixPeer: a real loopback connection is its owner; a non-loopback
// address is not authenticated by this method.
func TestUnixPeer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err == nil {
			defer c.Close()
			c.Read(make([]byte, 1))
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, ok, err := Unix{}.Authenticate(context.Background(), &Request{Remote: c.RemoteAddr(), Local: c.LocalAddr()})
	if err != nil || !ok || p.UID != uint32(os.Getuid()) || p.Method != "unix" {
		t.Fatalf("loopback peer: %+v %v %v", p, ok, err)
	}
	far := &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 4000}
	if _, ok, _ := (Unix{}).Authenticate(context.Background(), &Request{Remote: far, Local: c.LocalAddr()}); ok {
		t.Fatal("a remote address was authenticated as a local user")
	}
	// HostRoot: the loopback peer on admin requests, when it is root.
	p, ok, err = HostRoot{}.Authenticate(context.Background(), &Request{Remote: c.RemoteAddr(), Local: c.LocalAddr(), Admin: true})
	if err != nil || ok != (os.Getuid() == 0) || ok && !p.IsRoot() {
		t.Fatalf("HostRoot on an admin request of uid %d: %+v %v %v", os.Getuid(), p, ok, err)
	}
	if _, ok, _ := (HostRoot{}).Authenticate(context.Background(), &Request{Remote: c.RemoteAddr(), Local: c.LocalAddr()}); ok {
		t.Fatal("HostRoot applied to a request that is not for the admin API")
	}
	if _, ok, _ := (HostRoot{}).Authenticate(context.Background(), &Request{Remote: far, Local: c.LocalAddr(), Admin: true}); ok {
		t.Fatal("HostRoot applied to a remote address")
	}
}

func TestScopes(t *testing.T) {
	unrestricted := Principal{}
	if !unrestricted.Allows(ScopeModify, "/anything") {
		t.Fatal("a principal without scopes is restricted")
	}
	p := Principal{Scopes: []Scope{{ScopeRead, "/foo"}, {ScopeCreate, "/up"}, {ScopeModify, "/rw"}}}
	for _, c := range []struct {
		op, path string
		ok       bool
	}{
		{ScopeRead, "/foo", true}, {ScopeRead, "/foo/bar", true}, {ScopeRead, "/foobar", false}, {ScopeRead, "/", false},
		{ScopeCreate, "/foo/x", false}, {ScopeCreate, "/up/x", true}, {ScopeModify, "/up/x", false},
		{ScopeRead, "/up/x", false}, {ScopeCreate, "/rw/a/b", true}, {ScopeModify, "/rw", true}, {ScopeModify, "/rwx", false},
	} {
		if p.Allows(c.op, c.path) != c.ok {
			t.Errorf("Allows(%s, %s) = %v", c.op, c.path, !c.ok)
		}
	}
	if (Principal{Scopes: []Scope{}}).Allows(ScopeRead, "/") {
		t.Fatal("an empty scope list allows something")
	}
	if !(Principal{Scopes: []Scope{{ScopeRead, "/"}}}).Allows(ScopeRead, "/x/y") {
		t.Fatal("/ does not cover everything")
	}
}

// TestStatusIDs: a process's groups are taken from /proc/PID/status only
// when its file system uid is the socket's owner.
func TestStatusIDs(t *testing.T) {
	st := "Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1500\nGroups:\t1000 2000 \n"
	gid, groups, ok := statusIDs(st, 1000)
	if !ok || gid != 1500 || !slices.Equal(groups, []uint32{1000, 2000}) {
		t.Fatalf("got %d %v %v, want 1500 [1000 2000] true", gid, groups, ok)
	}
	if _, _, ok := statusIDs(st, 1001); ok {
		t.Fatal("another uid's process gave its groups")
	}
	if _, _, ok := statusIDs("Uid:\t0\t0\t0\t1000\nGid:\t0\t0\t0\t0\nGroups:\t0\n", 1000); !ok {
		t.Fatal("the file system uid is the one that counts")
	}
	if _, _, ok := statusIDs("Uid:\t1000\t1000\t1000\t1000\nGroups:\t\n", 1000); ok {
		t.Fatal("no Gid line, yet taken")
	}
	p := Principal{UID: uint32(os.Getuid()), GID: 4242, Method: "unix"}
	if q := ProcessGroups(p, uint32(os.Getpid())); q.GID != uint32(os.Getegid()) {
		t.Fatalf("own process: gid %d, want %d", q.GID, os.Getegid())
	}
	if q := ProcessGroups(Principal{UID: p.UID, GID: 4242, Method: "none"}, uint32(os.Getpid())); q.GID != 4242 {
		t.Fatal("groups taken for a principal that is not a unix peer")
	}
}

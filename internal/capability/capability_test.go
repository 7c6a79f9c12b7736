package capability

import (
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

func TestSignVerify(t *testing.T) {
	k, _ := NewKey([]byte(strings.Repeat("k", 32)))
	other, _ := NewKey([]byte(strings.Repeat("o", 32)))
	now := time.Unix(1000, 0)
	tok := k.Sign(&Capability{Fid: 7, Write: true, Path: "/a", Expires: 1060, Targets: []Target{{FsID: 1, Addr: "x"}}})
	c, err := k.Verify(tok, now, Access{Write: true})
	if err != nil || c.Fid != 7 || !c.Write || c.Targets[0].FsID != 1 {
		t.Fatalf("%+v %v", c, err)
	}
	if _, err := k.Verify(tok, now.Add(2*time.Minute), Access{Write: true}); kerr.KindOf(err) != kerr.Expired {
		t.Fatalf("expired: %v", err)
	}
	if _, err := other.Verify(tok, now, Access{Write: true}); kerr.KindOf(err) != kerr.Permission {
		t.Fatalf("forged: %v", err)
	}
	// Tamper with the payload (flip fid) keeping the old signature.
	p, s, _ := strings.Cut(tok, ".")
	tampered := k.Sign(&Capability{Fid: 8, Write: true, Path: "/a", Expires: 1060})
	tp, _, _ := strings.Cut(tampered, ".")
	for _, bad := range []string{"", "garbage", p + "." + s + "x", tp + "." + s, p} {
		_, err := k.Verify(bad, now, Access{})
		if kerr.KindOf(err) != kerr.Permission {
			t.Fatalf("Verify(%q) = %v", bad, err)
		}
		if bad != "" && strings.Contains(err.Error(), bad) {
			t.Fatal("error echoes the token")
		}
	}
}

// TestVerifyAccess: the file a request names (by id, by path, or both) and
// its mode are checked; what it does not name is not.
func TestVerifyAccess(t *testing.T) {
	k, _ := NewKey([]byte(strings.Repeat("k", 32)))
	now := time.Unix(1000, 0)
	w := k.Sign(&Capability{Fid: 7, Write: true, Path: "/a", Expires: 1060})
	r := k.Sign(&Capability{Fid: 7, Path: "/a", Expires: 1060})
	mv := k.Sign(&Capability{Fid: 7, Path: "/a", Expires: 1060, Move: &Move{Stripe: 1, Dst: Target{FsID: 3}}})
	st := k.Sign(&Capability{Fid: 7, Write: true, Path: "/a", Expires: 1060, Staged: true})
	for _, tc := range []struct {
		name  string
		token string
		a     Access
		deny  string // "" = allowed
	}{
		{"fid and mode", w, Access{Fid: 7, Write: true}, ""},
		{"path and mode", r, Access{Path: "/a"}, ""},
		{"fid and path", r, Access{Fid: 7, Path: "/a"}, ""},
		{"nothing named", r, Access{}, ""},
		{"other fid", w, Access{Fid: 8, Write: true}, "another file"},
		{"other path", r, Access{Path: "/b"}, "another file"},
		{"right fid, other path", r, Access{Fid: 7, Path: "/b"}, "another file"},
		{"write with a read capability", r, Access{Fid: 7, Write: true}, "does not allow writing"},
		{"read with a write capability", w, Access{Fid: 7}, "is for writing"},
		{"read with a write capability, nothing named", w, Access{}, "is for writing"},
		{"move order at a client endpoint", mv, Access{Fid: 7}, "storage servers only"},
		{"staged upload at a client endpoint", st, Access{Fid: 7, Write: true}, "storage servers only"},
		{"move order at an internal endpoint", mv, Access{Fid: 7, Internal: true}, ""},
		{"staged upload at an internal endpoint", st, Access{Fid: 7, Write: true, Internal: true}, ""},
		{"client capability at an internal endpoint", r, Access{Fid: 7, Internal: true}, ""},
	} {
		c, err := k.Verify(tc.token, now, tc.a)
		switch {
		case tc.deny == "" && (err != nil || c.Fid != 7):
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.deny != "" && (kerr.KindOf(err) != kerr.Permission || !strings.Contains(err.Error(), tc.deny)):
			t.Errorf("%s: %v, want permission denied: %s", tc.name, err, tc.deny)
		}
	}
}

func TestKeyFile(t *testing.T) {
	p := t.TempDir() + "/key"
	k1, err := LoadOrCreateKey(p)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateKey(p)
	if err != nil || k1.Internal() != k2.Internal() {
		t.Fatal("key not persisted")
	}
}

// TestParse: a client handed a capability by the namespace server checks
// its scope as Verify does — the file, the mode, the expiry — without
// the key; a malformed token is refused.
func TestParse(t *testing.T) {
	k, _ := NewKey([]byte(strings.Repeat("k", 32)))
	now := time.Now()
	read := k.Sign(&Capability{Fid: 7, Path: "/a", Expires: now.Add(time.Minute).Unix()})
	write := k.Sign(&Capability{Fid: 7, Path: "/a", Write: true, Expires: now.Add(time.Minute).Unix()})
	old := k.Sign(&Capability{Fid: 7, Path: "/a", Expires: now.Add(-time.Minute).Unix()})
	if c, err := Parse(read, now, Access{Path: "/a"}); err != nil || c.Fid != 7 {
		t.Fatalf("Parse of a read capability for /a: %+v, %v", c, err)
	}
	for _, c := range []struct {
		name, token string
		a           Access
		kind        kerr.Kind
	}{
		{"another file", read, Access{Path: "/b"}, kerr.Permission},
		{"a write capability read", write, Access{Path: "/a"}, kerr.Permission},
		{"a read capability written", read, Access{Path: "/a", Write: true}, kerr.Permission},
		{"expired", old, Access{Path: "/a"}, kerr.Expired},
		{"malformed", "no-dot", Access{Path: "/a"}, kerr.Permission},
	} {
		if _, err := Parse(c.token, now, c.a); !kerr.Is(err, c.kind) {
			t.Errorf("%s: %v, want %v", c.name, err, c.kind)
		}
	}
}

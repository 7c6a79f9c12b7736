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
	c, err := k.Verify(tok, now)
	if err != nil || c.Fid != 7 || !c.Write || c.Targets[0].FsID != 1 {
		t.Fatalf("%+v %v", c, err)
	}
	if _, err := k.Verify(tok, now.Add(2*time.Minute)); kerr.KindOf(err) != kerr.Expired {
		t.Fatalf("expired: %v", err)
	}
	if _, err := other.Verify(tok, now); kerr.KindOf(err) != kerr.Permission {
		t.Fatalf("forged: %v", err)
	}
	// Tamper with the payload (flip fid) keeping the old signature.
	p, s, _ := strings.Cut(tok, ".")
	tampered := k.Sign(&Capability{Fid: 8, Write: true, Path: "/a", Expires: 1060})
	tp, _, _ := strings.Cut(tampered, ".")
	for _, bad := range []string{"", "garbage", p + "." + s + "x", tp + "." + s, p} {
		_, err := k.Verify(bad, now)
		if kerr.KindOf(err) != kerr.Permission {
			t.Fatalf("Verify(%q) = %v", bad, err)
		}
		if bad != "" && strings.Contains(err.Error(), bad) {
			t.Fatal("error echoes the token")
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

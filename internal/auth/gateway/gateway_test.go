package gateway

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
)

var secret = []byte("0123456789abcdef0123456789abcdef-gateway")

func key(t *testing.T, s []byte) *Key {
	t.Helper()
	k, err := NewKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func check(m *Method, assertion, target string) (auth.Principal, bool, error) {
	return m.Authenticate(context.Background(), &auth.Request{Gateway: assertion, Target: target})
}

func TestAssertion(t *testing.T) {
	k := key(t, secret)
	m := New(Trusted{Key: k})
	const target = "GET /api/v1/stat?path=%2Fa"
	a := k.Assert("GET", "/api/v1/stat?path=%2Fa", 1000, 100, []uint32{100, 200})
	p, ok, err := check(m, a, target)
	if err != nil || !ok || p.UID != 1000 || p.GID != 100 || !slices.Equal(p.Groups, []uint32{100, 200}) || p.Method != "gateway" {
		t.Fatalf("valid assertion: %+v %v %v", p, ok, err)
	}
	if p.Name == "" {
		t.Error("no name")
	}
	refusedWith := func(what, assertion, target, reason string) {
		t.Helper()
		p, ok, err := check(m, assertion, target)
		if err == nil || !ok || p.UID != auth.Nobody.UID || !kerr.Is(err, kerr.Unauthenticated) || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: %+v %v %v, want refused: %s", what, p, ok, err, reason)
		}
		if strings.Contains(err.Error(), string(secret)) {
			t.Errorf("%s: the key is in the error: %v", what, err)
		}
	}
	refusedWith("replayed", a, target, "replayed")
	refusedWith("another request", k.Assert("GET", "/api/v1/stat?path=%2Fa", 1000, 100, nil), "POST /api/v1/remove", "not for this one")
	other := key(t, []byte(strings.Repeat("x", 40)))
	refusedWith("an untrusted key", other.Assert("GET", "/x", 1000, 100, nil), "GET /x", "does not trust")
	// A forger who knows the key's id (it is public) but not the key.
	forger := key(t, []byte(strings.Repeat("y", 40)))
	forger.ID = k.ID
	refusedWith("forged with the key's id", forger.Assert("GET", "/x", 0, 0, nil), "GET /x", "bad signature")
	// Claims changed after signing.
	parts := strings.Split(k.Assert("GET", "/x", 1000, 100, nil), ".")
	parts[2] = base64.RawURLEncoding.EncodeToString([]byte(`{"uid":0,"gid":0,"req":"GET /x","t":` + strconv.FormatInt(time.Now().UnixMilli(), 10) + `,"n":"abc"}`))
	refusedWith("claims changed", strings.Join(parts, "."), "GET /x", "bad signature")
	refusedWith("not an assertion", "uid=0", "GET /x", "not a gateway assertion")
	refusedWith("no MAC", strings.Join(parts[:3], ".")+".", "GET /x", "bad signature")
	m.now = func() time.Time { return time.Now().Add(Window + time.Second) }
	refusedWith("too old", k.Assert("GET", "/x", 1000, 100, nil), "GET /x", "clocks in sync")
	m.now = func() time.Time { return time.Now().Add(-Window - time.Second) }
	refusedWith("from the future", k.Assert("GET", "/x", 1000, 100, nil), "GET /x", "clocks in sync")
}

// TestRootSquash: uid 0 asserted is nobody, unless the key is trusted
// with no_root_squash.
func TestRootSquash(t *testing.T) {
	k := key(t, secret)
	p, _, err := check(New(Trusted{Key: k}), k.Assert("GET", "/x", 0, 0, []uint32{0}), "GET /x")
	if err != nil || p.UID != auth.Nobody.UID || p.GID != auth.Nobody.GID || len(p.Groups) != 0 || p.IsRoot() {
		t.Errorf("root through a squashing gateway: %+v %v, want nobody", p, err)
	}
	p, _, err = check(New(Trusted{Key: k, NoRootSquash: true}), k.Assert("GET", "/x", 0, 0, nil), "GET /x")
	if err != nil || !p.IsRoot() {
		t.Errorf("root through a no_root_squash gateway: %+v %v, want root", p, err)
	}
}

// TestNoAssertion: the method does not apply to a request without one.
func TestNoAssertion(t *testing.T) {
	if _, ok, err := check(New(Trusted{Key: key(t, secret)}), "", "GET /x"); ok || err != nil {
		t.Errorf("applies to a request without an assertion: %v %v", ok, err)
	}
}

func TestLoadKey(t *testing.T) {
	d := t.TempDir()
	good := filepath.Join(d, "good")
	os.WriteFile(good, append(append([]byte{}, secret...), '\n'), 0o600)
	k, err := LoadKey(good)
	if err != nil || k.ID != key(t, secret).ID {
		t.Fatalf("LoadKey: %v %v", k, err)
	}
	if strings.Contains(k.String(), string(secret)) {
		t.Error("String shows the key")
	}
	open := filepath.Join(d, "open")
	os.WriteFile(open, secret, 0o644)
	os.Chmod(open, 0o644)
	short := filepath.Join(d, "short")
	os.WriteFile(short, []byte("tooshort"), 0o600)
	for path, reason := range map[string]string{open: "readable by others", short: "want at least 32", filepath.Join(d, "none"): "no such file"} {
		_, err := LoadKey(path)
		if err == nil || !strings.Contains(err.Error(), reason) || !strings.Contains(err.Error(), path) {
			t.Errorf("LoadKey(%s): %v, want an error naming it and %q", path, err, reason)
		}
		if err != nil && (strings.Contains(err.Error(), string(secret)) || strings.Contains(err.Error(), "tooshort")) {
			t.Errorf("LoadKey(%s): the key is in the error: %v", path, err)
		}
	}
	if _, err := ParseTrusted(good + ",no_root_squash"); err != nil {
		t.Error(err)
	}
	if _, err := ParseTrusted(good + ",squash_all"); err == nil || !strings.Contains(err.Error(), "squash_all") {
		t.Errorf("unknown option: %v", err)
	}
}

// BenchmarkAssertVerify: what an assertion costs a request, made on the
// gateway and taken on the server.
func BenchmarkAssertVerify(b *testing.B) {
	k, _ := NewKey(secret)
	m := New(Trusted{Key: k})
	groups := []uint32{100, 200, 300}
	b.Run("assert", func(b *testing.B) {
		for b.Loop() {
			k.Assert("GET", "/api/v1/stat?path=%2Fdata%2Frun1", 1000, 100, groups)
		}
	})
	b.Run("verify", func(b *testing.B) {
		as := make([]string, b.N)
		for i := range as {
			as[i] = k.Assert("GET", "/api/v1/stat?path=%2Fdata%2Frun1", 1000, 100, groups)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, _, err := check(m, as[i], "GET /api/v1/stat?path=%2Fdata%2Frun1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

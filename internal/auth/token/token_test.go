package token

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
)

const iss = "https://issuer.example"

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// testKeys are an issuer's RSA and EC signing keys.
type testKeys struct {
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
}

func newKeys(t testing.TB) testKeys {
	r, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return testKeys{r, e}
}

func (k testKeys) jwks() jose.JSONWebKeySet {
	return jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &k.rsa.PublicKey, KeyID: "rsa1", Algorithm: "RS256", Use: "sig"},
		{Key: &k.ec.PublicKey, KeyID: "ec1", Algorithm: "ES256", Use: "sig"},
	}}
}

// staticKeys is a KeySet counting its lookups.
type staticKeys struct {
	set   jose.JSONWebKeySet
	calls atomic.Int64
}

func (s *staticKeys) Key(_ context.Context, kid string) (*jose.JSONWebKey, error) {
	s.calls.Add(1)
	if k, ok := FindKey(s.set, kid); ok {
		return k, nil
	}
	return nil, os.ErrNotExist
}

// sign makes a token signed with key (RS256 for RSA, ES256 for EC).
func sign(t testing.TB, key any, kid string, c map[string]any) string {
	alg := jose.ES256
	if _, ok := key.(*rsa.PrivateKey); ok {
		alg = jose.RS256
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(s).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// claimsFor are valid WLCG claims at t0 for scope.
func claimsFor(scope string) map[string]any {
	return map[string]any{"iss": iss, "sub": "alice-subject", "aud": "https://kaon.example", "wlcg.ver": "1.0",
		"iat": t0.Unix() - 10, "nbf": t0.Unix() - 10, "exp": t0.Unix() + 3600, "jti": "x", "scope": scope}
}

func with(c map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

func newVerifier(t testing.TB, keys KeySet, base string, m Mapping) *Verifier {
	v, err := New(Config{Issuers: []IssuerConfig{{Issuer: iss, Keys: keys, Base: base, Map: m}},
		Audiences: []string{"https://kaon.example"}, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// unsigned builds a compact JWT from a header and claims with sig as its
// signature part (for alg "none" and hand-made HMAC tokens).
func compact(header, c map[string]any, sig func(signingInput string) string) string {
	h, _ := json.Marshal(header)
	b, _ := json.Marshal(c)
	in := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(b)
	return in + "." + sig(in)
}

func TestVerifyGood(t *testing.T) {
	k := newKeys(t)
	v := newVerifier(t, &staticKeys{set: k.jwks()}, "/vo", Mapping{})
	for _, c := range []struct {
		key any
		kid string
	}{{k.rsa, "rsa1"}, {k.ec, "ec1"}} {
		raw := sign(t, c.key, c.kid, claimsFor("openid storage.read:/data storage.create:/up write:/rw storage.stage:/x"))
		p, ok, err := v.Authenticate(context.Background(), &auth.Request{Bearer: raw})
		if err != nil || !ok {
			t.Fatalf("%s: %v %v", c.kid, ok, err)
		}
		if p.Method != "token" || p.UID != auth.Nobody.UID || p.Name != "alice-subject" {
			t.Fatalf("%s: principal %+v", c.kid, p)
		}
		want := []auth.Scope{{Op: auth.ScopeRead, Path: "/vo/data"}, {Op: auth.ScopeCreate, Path: "/vo/up"}, {Op: auth.ScopeModify, Path: "/vo/rw"}}
		if len(p.Scopes) != len(want) {
			t.Fatalf("%s: scopes %+v", c.kid, p.Scopes)
		}
		for i := range want {
			if p.Scopes[i] != want[i] {
				t.Fatalf("%s: scopes %+v, want %+v", c.kid, p.Scopes, want)
			}
		}
	}
	if _, ok, _ := v.Authenticate(context.Background(), &auth.Request{}); ok {
		t.Fatal("a request without a token was taken by the token method")
	}
}

// TestLifetimeCapped: a token of any issuer lives at most the verifier's
// MaxLifetime (default DefaultMaxTTL), counted from its iat, or from now
// when it has none (the WLCG profile recommends hours, not centuries);
// a longer one is refused with the reason.
func TestLifetimeCapped(t *testing.T) {
	k := newKeys(t)
	keys := &staticKeys{set: k.jwks()}
	deflt := newVerifier(t, keys, "", Mapping{})
	sixHours, err := New(Config{Issuers: []IssuerConfig{{Issuer: iss, Keys: keys}}, Audiences: []string{"https://kaon.example"},
		Now: func() time.Time { return t0 }, MaxLifetime: 6 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	year := 365 * 24 * time.Hour
	for _, c := range []struct {
		what    string
		v       *Verifier
		iat     any // unix seconds, nil: no iat
		exp     time.Time
		refused string
	}{
		{"exp 500 years after iat", deflt, t0.Unix(), t0.AddDate(500, 0, 0), "lifetime over 292 years (exp - iat) is longer than the 24h0m0s accepted here"},
		{"exp 20 years after iat", deflt, t0.Unix(), t0.Add(20 * year), "lifetime 175200h0m0s (exp - iat) is longer than the 24h0m0s accepted here"},
		{"23h", deflt, t0.Unix(), t0.Add(23 * time.Hour), ""},
		{"no iat, exp in 25h", deflt, nil, t0.Add(25 * time.Hour), "lifetime 25h0m0s (exp - now, no iat) is longer than the 24h0m0s accepted here"},
		{"no iat, exp in 23h", deflt, nil, t0.Add(23 * time.Hour), ""},
		{"issued 30h ago, 1h left", deflt, t0.Add(-30 * time.Hour).Unix(), t0.Add(time.Hour), "lifetime 31h0m0s (exp - iat) is longer than the 24h0m0s accepted here"},
		{"7h with a 6h cap", sixHours, t0.Unix(), t0.Add(7 * time.Hour), "lifetime 7h0m0s (exp - iat) is longer than the 6h0m0s accepted here"},
		{"5h with a 6h cap", sixHours, t0.Unix(), t0.Add(5 * time.Hour), ""},
	} {
		raw := sign(t, k.ec, "ec1", with(claimsFor("storage.read:/"), "iat", c.iat, "nbf", nil, "exp", c.exp.Unix()))
		_, err := c.v.Verify(context.Background(), raw)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", c.what, err)
		case c.refused != "" && (!kerr.Is(err, kerr.Unauthenticated) || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: %v, want refused with %q", c.what, err, c.refused)
		}
	}
}

// TestForged: every unusable token is refused as unauthenticated (401),
// whatever it claims.
func TestForged(t *testing.T) {
	k := newKeys(t)
	other := newKeys(t)
	keys := &staticKeys{set: k.jwks()}
	v := newVerifier(t, keys, "", Mapping{})
	good := claimsFor("storage.modify:/")
	pubDER, _ := x509.MarshalPKIXPublicKey(&k.rsa.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	hs := func(secret []byte) func(string) string {
		return func(in string) string {
			m := hmac.New(sha256.New, secret)
			m.Write([]byte(in))
			return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
		}
	}
	weak, _ := rsa.GenerateKey(rand.Reader, 1024)
	weakKeys := &staticKeys{set: jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &weak.PublicKey, KeyID: "weak"}}}}
	vWeak := newVerifier(t, weakKeys, "", Mapping{})
	cases := []struct {
		name, raw string
		v         *Verifier
		why       string
	}{
		{"wrong key", sign(t, other.rsa, "rsa1", good), v, "signature does not verify"},
		{"wrong EC key", sign(t, other.ec, "ec1", good), v, "signature does not verify"},
		{"EC token on the RSA kid", sign(t, k.ec, "rsa1", good), v, "key is for RS256"},
		{"alg none", compact(map[string]any{"alg": "none", "kid": "rsa1", "typ": "JWT"}, good, func(string) string { return "" }), v, "RS256 and ES256"},
		{"HS256 with the public key", compact(map[string]any{"alg": "HS256", "kid": "rsa1", "typ": "JWT"}, good, hs(pubPEM)), v, "RS256 and ES256"},
		{"HS256 with the public DER", compact(map[string]any{"alg": "HS256", "kid": "rsa1"}, good, hs(pubDER)), v, "RS256 and ES256"},
		{"unknown kid", sign(t, k.rsa, "nope", good), v, "nope"},
		{"no kid", sign(t, k.rsa, "", good), v, "names no key"},
		{"expired", sign(t, k.rsa, "rsa1", with(good, "exp", t0.Unix()-120)), v, "expired"},
		{"no exp", sign(t, k.rsa, "rsa1", with(good, "exp", nil)), v, "no expiry"},
		{"not yet valid", sign(t, k.rsa, "rsa1", with(good, "nbf", t0.Unix()+600)), v, "not valid before"},
		{"issued in the future", sign(t, k.rsa, "rsa1", with(good, "iat", t0.Unix()+600)), v, "issued in the future"},
		{"wrong aud", sign(t, k.rsa, "rsa1", with(good, "aud", "https://elsewhere.example")), v, "audience"},
		{"wrong aud list", sign(t, k.rsa, "rsa1", with(good, "aud", []string{"a", "b"})), v, "audience"},
		{"no aud", sign(t, k.rsa, "rsa1", with(good, "aud", nil)), v, "no audience"},
		{"unknown iss", sign(t, k.rsa, "rsa1", with(good, "iss", "https://evil.example")), v, "not trusted"},
		{"issuer prefix", sign(t, k.rsa, "rsa1", with(good, "iss", iss+"/")), v, "not trusted"},
		{"bad wlcg.ver", sign(t, k.rsa, "rsa1", with(good, "wlcg.ver", "2.0")), v, "WLCG profile"},
		{"garbage", "not.a.token", v, "JWT"},
		{"tampered claims", tamper(sign(t, k.rsa, "rsa1", good)), v, "signature"},
		{"RSA 1024", sign(t, weak, "weak", good), vWeak, "too small"},
	}
	for _, c := range cases {
		p, ok, err := c.v.Authenticate(context.Background(), &auth.Request{Bearer: c.raw})
		if err == nil || !ok {
			t.Errorf("%s: accepted as %+v", c.name, p)
			continue
		}
		if !kerr.Is(err, kerr.Unauthenticated) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: error %q (kind %v), want one saying %q", c.name, err, kerr.KindOf(err), c.why)
		}
		if parts := strings.Split(c.raw, "."); len(parts[1]) > 8 && strings.Contains(err.Error(), parts[1]) {
			t.Errorf("%s: the error shows the token", c.name)
		}
	}
}

// tamper changes the claims of a signed token, keeping its signature.
func tamper(raw string) string {
	parts := strings.Split(raw, ".")
	b, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var c map[string]any
	json.Unmarshal(b, &c)
	c["scope"] = "storage.modify:/ storage.read:/"
	b, _ = json.Marshal(c)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

// TestScopePaths: a scope covers whole path components below the base;
// paths with . or .. are dropped, not cleaned.
func TestScopePaths(t *testing.T) {
	cases := []struct {
		claim, base string
		op, path    string
		ok          bool
	}{
		{"storage.read:/foo", "", auth.ScopeRead, "/foo/bar", true},
		{"storage.read:/foo", "", auth.ScopeRead, "/foo", true},
		{"storage.read:/foo", "", auth.ScopeRead, "/foobar", false},
		{"storage.read:/foo/", "", auth.ScopeRead, "/foo/x", true},
		{"storage.read:/foo/../bar", "", auth.ScopeRead, "/bar", false},
		{"storage.read:/foo/..", "", auth.ScopeRead, "/", false},
		{"storage.read:foo", "", auth.ScopeRead, "/foo", false},
		{"storage.read", "/vo", auth.ScopeRead, "/vo/x", true},
		{"storage.read", "/vo", auth.ScopeRead, "/other", false},
		{"storage.read:/", "/vo", auth.ScopeRead, "/vo", true},
		{"storage.read:/a", "/vo", auth.ScopeRead, "/a", false},
		{"storage.create:/up", "", auth.ScopeModify, "/up/f", false},
		{"storage.create:/up", "", auth.ScopeCreate, "/up/f", true},
		{"storage.modify:/rw", "", auth.ScopeCreate, "/rw/f", true},
		{"write:/rw", "", auth.ScopeModify, "/rw/f", true},
		{"read:/r", "", auth.ScopeModify, "/r/f", false},
		{"storage.stage:/", "", auth.ScopeRead, "/x", false},
		{"", "", auth.ScopeRead, "/", false},
	}
	for _, c := range cases {
		p := auth.Principal{Scopes: ParseScopes(c.claim, c.base)}
		if p.Scopes == nil {
			t.Fatalf("%q: nil scopes (unrestricted)", c.claim)
		}
		if got := p.Allows(c.op, c.path); got != c.ok {
			t.Errorf("scope %q base %q: %s %s = %v", c.claim, c.base, c.op, c.path, got)
		}
	}
}

// TestCache: the signature is checked once per token; a cached token is
// still refused once it has expired.
func TestCache(t *testing.T) {
	k := newKeys(t)
	keys := &staticKeys{set: k.jwks()}
	now := t0
	v, _ := New(Config{Issuers: []IssuerConfig{{Issuer: iss, Keys: keys}}, Audiences: []string{"https://kaon.example"},
		Now: func() time.Time { return now }, Leeway: time.Second})
	raw := sign(t, k.ec, "ec1", with(claimsFor("storage.read:/"), "exp", t0.Unix()+60))
	for i := 0; i < 5; i++ {
		if _, err := v.Verify(context.Background(), raw); err != nil {
			t.Fatal(err)
		}
	}
	if n := keys.calls.Load(); n != 1 {
		t.Fatalf("5 uses of one token looked up its key %d times, want 1", n)
	}
	now = t0.Add(2 * time.Minute)
	if _, err := v.Verify(context.Background(), raw); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired cached token: %v", err)
	}
	// a tampered copy is not served from the cache of the original
	now = t0
	if _, err := v.Verify(context.Background(), tamper(raw)); err == nil {
		t.Fatal("tampered token accepted")
	}
}

func TestMapping(t *testing.T) {
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	k := newKeys(t)
	dir := t.TempDir()
	mapFile := filepath.Join(dir, "map")
	os.WriteFile(mapFile, []byte("# rules\nsub special-sub 4242\ngroup /vo/prod 4343\n"), 0o644)
	rules, err := LoadRules(mapFile)
	if err != nil {
		t.Fatal(err)
	}
	v := newVerifier(t, &staticKeys{set: k.jwks()}, "", Mapping{User: "4444", Rules: rules})
	uid := func(c map[string]any) uint32 {
		p, err := v.Verify(context.Background(), sign(t, k.ec, "ec1", c))
		if err != nil {
			t.Fatal(err)
		}
		return p.UID
	}
	c := claimsFor("storage.read:/")
	if got := uid(with(c, "sub", "special-sub")); got != 4242 {
		t.Fatalf("sub rule: uid %d", got)
	}
	if got := uid(with(c, "wlcg.groups", []string{"/vo", "/vo/prod"})); got != 4343 {
		t.Fatalf("group rule: uid %d", got)
	}
	if got := uid(c); got != 4444 {
		t.Fatalf("issuer user: uid %d", got)
	}
	// a group naming a local group is added to the principal's groups
	g, err := user.LookupGroupId(me.Gid)
	if err == nil {
		p, err := v.Verify(context.Background(), sign(t, k.ec, "ec1", with(c, "wlcg.groups", []string{"/" + g.Name})))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, x := range p.Groups {
			found = found || x == uint32(mustAtoi(me.Gid))
		}
		if !found {
			t.Fatalf("group /%s not mapped: %+v", g.Name, p)
		}
	}
	// never root, whoever the rule names
	if err := (Mapping{User: "root"}).Check(); err == nil {
		t.Fatal("a mapping to root was accepted")
	}
	if err := (Mapping{User: "0"}).Check(); err == nil {
		t.Fatal("a mapping to uid 0 was accepted")
	}
	vRoot := newVerifier(t, &staticKeys{set: k.jwks()}, "", Mapping{SubjectIsUser: true})
	if _, err := vRoot.Verify(context.Background(), sign(t, k.ec, "ec1", with(c, "sub", "root"))); err == nil {
		t.Fatal("a token with sub root acts as root")
	}
	if err := (Mapping{User: "no-such-user-kaon"}).Check(); err == nil {
		t.Fatal("an unknown user was accepted")
	}
}

func mustAtoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// TestIssuer: Kaon's own tokens verify with its key set; a rotation keeps
// old tokens valid until the previous key's retirement ages past MaxTTL.
func TestIssuer(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys", "token-keys.json")
	is, err := OpenIssuer(file, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	is.Now = func() time.Time { return now }
	is.URL = "https://kaon.example:8443"
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st.Mode(), err)
	}
	if _, err := is.Issue(IssueRequest{Subject: "1001", Scopes: []string{"storage.read:/a"}, TTL: 2 * time.Hour}); err == nil {
		t.Fatal("a token longer than MaxTTL was issued")
	}
	old, err := is.Issue(IssueRequest{Subject: "1001", Scopes: []string{"storage.read:/a"}, TTL: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	v, _ := New(Config{Issuers: []IssuerConfig{{Issuer: is.URL, Keys: is, Map: Mapping{SubjectIsUser: true}}},
		Audiences: []string{is.URL}, Now: func() time.Time { return now }})
	p, err := v.Verify(context.Background(), old)
	if err != nil || p.UID != 1001 || !p.Allows(auth.ScopeRead, "/a/b") || p.Allows(auth.ScopeCreate, "/a/b") {
		t.Fatalf("own token: %+v %v", p, err)
	}
	u, err := Inspect(old)
	if err != nil || u.Claims["wlcg.ver"] != "1.0" || u.Claims["aud"] != is.URL || u.Header["alg"] != "ES256" || u.Header["typ"] != "JWT" {
		t.Fatalf("inspect: %v %v", u, err)
	}
	kid1 := u.Header["kid"]
	// the next key is published before it signs: a verifier holding the
	// key set from before the rotation knows the tokens signed after it
	before := is.JWKS()
	if n := len(before.Keys); n != 2 {
		t.Fatalf("JWKS of a new issuer holds %d keys, want the current and the next", n)
	}
	if ks := is.Keys(); len(ks) != 2 || !ks[0].Next || ks[1].Next || ks[1].KID != kid1 {
		t.Fatalf("keys of a new issuer: %+v", ks)
	}
	now = now.Add(time.Minute)
	kid2, err := is.Rotate()
	if err != nil || kid2 == kid1 || kid2 != before.Keys[0].KeyID {
		t.Fatalf("rotate: %v %v", kid2, err)
	}
	if _, ok := FindKey(before, kid2); !ok {
		t.Fatalf("the key signing after the rotation (%s) was not published before it", kid2)
	}
	if n := len(is.JWKS().Keys); n != 3 {
		t.Fatalf("JWKS after rotation holds %d keys, want next, current, previous", n)
	}
	cached := &staticKeys{set: before}
	vc, _ := New(Config{Issuers: []IssuerConfig{{Issuer: is.URL, Keys: cached, Map: Mapping{SubjectIsUser: true}}},
		Audiences: []string{is.URL}, Now: func() time.Time { return now }})
	after, err := is.Issue(IssueRequest{Subject: "1001", Scopes: []string{"storage.read:/a"}, TTL: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vc.Verify(context.Background(), after); err != nil {
		t.Fatalf("a verifier with the keys from before the rotation refuses a token signed after it: %v", err)
	}
	// reopened from disk: both keys, the new one signing
	is2, err := OpenIssuer(file, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	is2.Now, is2.URL = is.Now, is.URL
	v2, _ := New(Config{Issuers: []IssuerConfig{{Issuer: is.URL, Keys: is2, Map: Mapping{SubjectIsUser: true}}},
		Audiences: []string{is.URL}, Now: func() time.Time { return now }})
	if _, err := v2.Verify(context.Background(), old); err != nil {
		t.Fatalf("token of the previous key after rotation and restart: %v", err)
	}
	fresh, _ := is2.Issue(IssueRequest{Subject: "1001", Scopes: []string{"storage.read:/a"}, TTL: time.Hour})
	if u, _ := Inspect(fresh); u.Header["kid"] != kid2 {
		t.Fatalf("new tokens signed with %v, want %v", u.Header["kid"], kid2)
	}
	// past MaxTTL after retirement the previous key is gone
	now = now.Add(time.Hour + time.Minute)
	if n := len(is2.JWKS().Keys); n != 2 {
		t.Fatalf("JWKS an hour after rotation holds %d keys", n)
	}
	d := is2.Discovery()
	if d["issuer"] != is.URL || d["jwks_uri"] != is.URL+JWKSPath {
		t.Fatalf("discovery: %v", d)
	}
}

func TestFileKeys(t *testing.T) {
	k := newKeys(t)
	file := filepath.Join(t.TempDir(), "jwks.json")
	b, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.rsa.PublicKey, KeyID: "rsa1"}}})
	os.WriteFile(file, b, 0o644)
	fk, err := NewFileKeys(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fk.Key(context.Background(), "ec1"); err == nil {
		t.Fatal("unknown kid found")
	}
	set := k.jwks()
	b, _ = json.Marshal(set)
	os.WriteFile(file, b, 0o644)
	os.Chtimes(file, time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	if _, err := fk.Key(context.Background(), "ec1"); err != nil {
		t.Fatalf("key added to the file: %v", err)
	}
	// private keys in the file are reduced to their public part
	priv, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: k.ec, KeyID: "p"}}})
	s, err := ParseJWKS(priv)
	if err != nil || !s.Keys[0].IsPublic() {
		t.Fatalf("private JWKS: %v", err)
	}
}

func BenchmarkVerify(b *testing.B) {
	k := newKeys(b)
	for _, c := range []struct {
		name string
		key  any
		kid  string
	}{{"ES256", k.ec, "ec1"}, {"RS256", k.rsa, "rsa1"}} {
		raw := sign(b, c.key, c.kid, claimsFor("storage.read:/data"))
		b.Run(c.name+"/cached", func(b *testing.B) {
			v := newVerifier(b, &staticKeys{set: k.jwks()}, "", Mapping{})
			for i := 0; i < b.N; i++ {
				if _, err := v.Verify(context.Background(), raw); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/uncached", func(b *testing.B) {
			v, _ := New(Config{Issuers: []IssuerConfig{{Issuer: iss, Keys: &staticKeys{set: k.jwks()}}},
				Audiences: []string{"https://kaon.example"}, Now: func() time.Time { return t0 }, CacheSize: 1})
			for i := 0; i < b.N; i++ {
				v.cache.drop(sha256.Sum256([]byte(raw)))
				if _, err := v.Verify(context.Background(), raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestIssuerUpgrade: a key file from before next keys gets one published
// on open, and the current key keeps signing.
func TestIssuerUpgrade(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token-keys.json")
	if _, err := OpenIssuer(file, time.Hour); err != nil {
		t.Fatal(err)
	}
	var kf keyFile
	b, _ := os.ReadFile(file)
	json.Unmarshal(b, &kf)
	kf.Keys = kf.Keys[1:] // drop the next key: the old format
	b, _ = json.Marshal(kf)
	os.WriteFile(file, b, 0o600)
	old := kf.Keys[0].JWK.KeyID
	is, err := OpenIssuer(file, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ks := is.Keys(); len(ks) != 2 || !ks[0].Next || ks[1].KID != old {
		t.Fatalf("keys after upgrade: %+v", ks)
	}
	tok, _ := is.Issue(IssueRequest{Subject: "1001", Scopes: []string{"storage.read:/a"}, TTL: time.Minute})
	if u, _ := Inspect(tok); u.Header["kid"] != old {
		t.Fatalf("after upgrade tokens are signed with %v, want %v", u.Header["kid"], old)
	}
}

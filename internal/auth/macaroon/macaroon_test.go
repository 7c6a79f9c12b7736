package macaroon

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"gopkg.in/macaroon.v2"
)

var alice = auth.Principal{UID: 1000, GID: 100, Groups: []uint32{100, 200}, Name: "alice", Method: "x509"}

func service(now *time.Time) *Service {
	return &Service{Key: []byte("0123456789abcdef0123456789abcdef"), Location: "https://kaon.test", MaxValidity: time.Hour,
		Now: func() time.Time { return *now }}
}

func verify(t *testing.T, s *Service, m string) (auth.Principal, error) {
	t.Helper()
	p, ok, err := s.Authenticate(context.Background(), &auth.Request{Bearer: m, TLS: true})
	if !ok {
		t.Fatalf("a macaroon was not taken as one")
	}
	return p, err
}

// TestMintVerify: a macaroon is its minter narrowed to its path and
// activities, until its validity ends.
func TestMintVerify(t *testing.T) {
	now := time.Now()
	s := service(&now)
	r, err := s.Mint(alice, "/data/run1", Request{Caveats: []string{"activity:DOWNLOAD,LIST"}, Validity: "PT30M"})
	if err != nil || r.ExpiresIn != 1800 {
		t.Fatalf("mint: %+v %v", r, err)
	}
	p, err := verify(t, s, r.Macaroon)
	if err != nil || p.UID != 1000 || p.GID != 100 || p.Name != "alice" || p.Method != "macaroon" || len(p.Groups) != 2 {
		t.Fatalf("verify: %+v %v", p, err)
	}
	if !p.Allows(auth.ScopeRead, "/data/run1/f") || p.Allows(auth.ScopeRead, "/data/run2") || p.Allows(auth.ScopeCreate, "/data/run1/f") {
		t.Fatalf("scopes %+v", p.Scopes)
	}
	// Validity is capped at MaxValidity.
	if r, err := s.Mint(alice, "/d", Request{Caveats: []string{"activity:UPLOAD"}, Validity: "P2D"}); err != nil || r.ExpiresIn != 3600 {
		t.Fatalf("a validity over the maximum: %+v %v", r, err)
	}
	now = now.Add(31 * time.Minute)
	if _, err := verify(t, s, r.Macaroon); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired macaroon: %v", err)
	}
}

// TestRefused: a macaroon of another key, one whose caveats were removed
// or added by someone without the key, one with a caveat Kaon does not
// know, and requests for more than the minter may do are refused naming
// why.
func TestRefused(t *testing.T) {
	now := time.Now()
	s := service(&now)
	r, err := s.Mint(alice, "/data", Request{Caveats: []string{"activity:DOWNLOAD"}})
	if err != nil {
		t.Fatal(err)
	}
	other := service(&now)
	other.Key = []byte("another key, another instance...")
	if _, err := verify(t, other, r.Macaroon); err == nil || !kerr.Is(err, kerr.Permission) {
		t.Fatalf("another instance's macaroon: %v", err)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(r.Macaroon)
	var m macaroon.Macaroon
	if err := m.UnmarshalBinary(raw); err != nil {
		t.Fatal(err)
	}
	// Widened: the same caveats but the path's, signed by a guessed key.
	forged, _ := macaroon.New([]byte("guess"), m.Id(), m.Location(), macaroon.V2)
	for _, c := range m.Caveats() {
		cond := string(c.Id)
		if strings.HasPrefix(cond, "path:") {
			cond = "path:/"
		}
		forged.AddFirstPartyCaveat([]byte(cond))
	}
	b, _ := forged.MarshalBinary()
	if _, err := verify(t, s, base64.RawURLEncoding.EncodeToString(b)); err == nil {
		t.Fatal("a macaroon re-signed with another key was taken")
	}
	// A holder may add caveats (attenuate), not unknown ones.
	narrowed := m.Clone()
	narrowed.AddFirstPartyCaveat([]byte("path:/data/sub"))
	b, _ = narrowed.MarshalBinary()
	if p, err := verify(t, s, base64.StdEncoding.EncodeToString(b)); err != nil || p.Allows(auth.ScopeRead, "/data/x") || !p.Allows(auth.ScopeRead, "/data/sub/x") {
		t.Fatalf("an attenuated macaroon: %+v %v", p, err)
	}
	odd := m.Clone()
	odd.AddFirstPartyCaveat([]byte("ip:10.0.0.0/8"))
	b, _ = odd.MarshalBinary()
	if _, err := verify(t, s, base64.RawURLEncoding.EncodeToString(b)); err == nil || !strings.Contains(err.Error(), "unknown caveat") {
		t.Fatalf("an unknown caveat: %v", err)
	}
	// Requests for more than the minter may do, or for nobody.
	scoped := alice
	scoped.Scopes = []auth.Scope{{Op: auth.ScopeRead, Path: "/data"}}
	for name, c := range map[string]struct {
		who  auth.Principal
		path string
		req  Request
		kind kerr.Kind
	}{
		"upload with a read-only token": {scoped, "/data", Request{Caveats: []string{"activity:UPLOAD"}}, kerr.Permission},
		"read outside the token's path": {scoped, "/other", Request{Caveats: []string{"activity:DOWNLOAD"}}, kerr.Permission},
		"for an unauthenticated client": {auth.Nobody, "/data", Request{Caveats: []string{"activity:DOWNLOAD"}}, kerr.Unauthenticated},
		"an unknown activity":           {alice, "/data", Request{Caveats: []string{"activity:FLY"}}, kerr.Invalid},
		"no activity":                   {alice, "/data", Request{}, kerr.Invalid},
		"an unknown caveat":             {alice, "/data", Request{Caveats: []string{"activity:LIST", "ip:1.2.3.4"}}, kerr.Invalid},
		"a malformed validity":          {alice, "/data", Request{Caveats: []string{"activity:LIST"}, Validity: "30m"}, kerr.Invalid},
		"by a macaroon":                 {auth.Principal{UID: 1, Method: "macaroon"}, "/data", Request{Caveats: []string{"activity:LIST"}}, kerr.Permission},
	} {
		if _, err := s.Mint(c.who, c.path, c.req); !kerr.Is(err, c.kind) {
			t.Errorf("%s: %v, want %v", name, err, c.kind)
		}
	}
	if p, err := s.Mint(scoped, "/data/x", Request{Caveats: []string{"activity:DOWNLOAD"}}); err != nil {
		t.Fatalf("a read token's macaroon for reading: %+v %v", p, err)
	}
}

// TestNotAMacaroon: bearer credentials that are no macaroon (a JWT,
// garbage) pass to the next method.
func TestNotAMacaroon(t *testing.T) {
	now := time.Now()
	s := service(&now)
	for _, b := range []string{"", "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", "bm90IGEgbWFjYXJvb24"} {
		if _, ok, _ := s.Authenticate(context.Background(), &auth.Request{Bearer: b}); ok {
			t.Errorf("%q was taken as a macaroon", b)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for s, want := range map[string]time.Duration{"PT30M": 30 * time.Minute, "P1DT2H": 26 * time.Hour, "PT45S": 45 * time.Second, "P1D": 24 * time.Hour} {
		if d, err := parseDuration(s); err != nil || d != want {
			t.Errorf("%s: %v %v", s, d, err)
		}
	}
	for _, s := range []string{"", "P", "PT", "30M", "PT-1M", "P1H"} {
		if _, err := parseDuration(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
}

// TestRevokedDN: a macaroon minted by a certificate's user carries its DN
// and is refused, naming why, once the grid-mapfile no longer maps that
// DN to the same user; one of another method carries none and is not
// asked about it; a dn caveat the instance cannot check is refused.
func TestRevokedDN(t *testing.T) {
	now := time.Now()
	s := service(&now)
	gridmap := map[string]string{"/DC=test/CN=Alice": "alice"}
	s.CheckDN = func(dn, user string) error {
		if gridmap[dn] != user {
			return errors.New(dn + " is no longer mapped to " + user + " by the grid-mapfile")
		}
		return nil
	}
	who := alice
	who.DN = "/DC=test/CN=Alice"
	r, err := s.Mint(who, "/data", Request{Caveats: []string{"activity:DOWNLOAD"}})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := verify(t, s, r.Macaroon); err != nil || p.Name != "alice" {
		t.Fatalf("before revocation: %+v %v", p, err)
	}
	delete(gridmap, "/DC=test/CN=Alice")
	if _, err := verify(t, s, r.Macaroon); err == nil || kerr.KindOf(err) != kerr.Permission || !strings.Contains(err.Error(), "/DC=test/CN=Alice is no longer mapped") {
		t.Fatalf("after the DN left the grid-mapfile: %v", err)
	}
	tok := alice
	tok.Method = "token"
	r2, err := s.Mint(tok, "/data", Request{Caveats: []string{"activity:DOWNLOAD"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verify(t, s, r2.Macaroon); err != nil {
		t.Fatalf("a token user's macaroon was checked against the grid-mapfile: %v", err)
	}
	s.CheckDN = nil
	if _, err := verify(t, s, r.Macaroon); err == nil || !strings.Contains(err.Error(), "grid-mapfile") {
		t.Fatalf("a dn caveat without a grid-mapfile to check it: %v", err)
	}
}

package x509auth_test

import (
	"context"
	"crypto/x509"
	"encoding/asn1"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/x509auth"
	"github.com/kaon-storage/kaon/internal/auth/x509auth/x509test"
)

func pool(cas ...*x509test.Cred) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range cas {
		p.AddCert(c.Cert)
	}
	return p
}

const aliceDN = "/DC=org/DC=kaon-test/O=Users/CN=Alice"

// TestValidChains: an end-entity certificate alone, an RFC 3820 proxy, a
// proxy of a proxy, a limited and a legacy proxy are the end-entity's DN.
func TestValidChains(t *testing.T) {
	ca := x509test.NewCA("Grid")
	alice := ca.User("Alice")
	p1 := alice.Proxy(x509test.ProxyOpts{})
	for name, chain := range map[string][]*x509.Certificate{
		"end-entity":    alice.Chain,
		"proxy":         p1.Chain,
		"proxy²":        p1.Proxy(x509test.ProxyOpts{}).Chain,
		"limited proxy": alice.Proxy(x509test.ProxyOpts{Language: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 3536, 1, 1, 1, 9}}).Chain,
		"legacy proxy":  alice.Proxy(x509test.ProxyOpts{Legacy: true}).Chain,
		"path length 1": alice.Proxy(x509test.ProxyOpts{HasPathLen: true, PathLen: 1}).Proxy(x509test.ProxyOpts{}).Chain,
	} {
		dn, err := x509auth.VerifyChain(chain, pool(ca), time.Now())
		if err != nil || dn != aliceDN {
			t.Errorf("%s: %q %v", name, dn, err)
		}
	}
}

// TestRefusals: every broken chain is refused, naming why.
func TestRefusals(t *testing.T) {
	ca := x509test.NewCA("Grid")
	other := x509test.NewCA("Elsewhere")
	alice := ca.User("Alice")
	mallory := ca.User("Mallory")
	now := time.Now()
	for _, c := range []struct {
		name  string
		chain []*x509.Certificate
		want  string
	}{
		{"unknown CA", other.User("Alice").Proxy(x509test.ProxyOpts{}).Chain, "unknown authority"},
		{"expired proxy", alice.Proxy(x509test.ProxyOpts{NotBefore: now.Add(-3 * time.Hour), NotAfter: now.Add(-time.Hour)}).Chain, "not valid now"},
		{"not yet valid proxy", alice.Proxy(x509test.ProxyOpts{NotBefore: now.Add(time.Hour), NotAfter: now.Add(2 * time.Hour)}).Chain, "not valid now"},
		{"proxy signed by the wrong key", alice.Proxy(x509test.ProxyOpts{SignWith: mallory.Key}).Chain, "not signed by its issuer"},
		{"proxy outliving its issuer", alice.Proxy(x509test.ProxyOpts{NotAfter: alice.Cert.NotAfter.Add(time.Hour)}).Chain, "outside its issuer's validity"},
		{"proxy that is a CA", alice.Proxy(x509test.ProxyOpts{CA: true}).Chain, "may not be a CA"},
		{"proxy with another subject", alice.Proxy(x509test.ProxyOpts{OtherSubject: true}).Chain, "issuer's subject plus one CN"},
		{"independent proxy", alice.Proxy(x509test.ProxyOpts{Language: asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 21, 2}}).Chain, "does not inherit"},
		{"beyond path length 0", alice.Proxy(x509test.ProxyOpts{HasPathLen: true}).Proxy(x509test.ProxyOpts{}).Chain, "path length"},
		{"proxy only, no end-entity", alice.Proxy(x509test.ProxyOpts{}).Chain[:1], "without an end-entity"},
		{"proxy of one user after another's certificate", append(alice.Proxy(x509test.ProxyOpts{}).Chain[:1], mallory.Cert), "issuer is not"},
		{"expired end-entity", alice.Chain, "expired"},
	} {
		at := now
		if c.name == "expired end-entity" {
			at = alice.Cert.NotAfter.Add(time.Minute)
		}
		dn, err := x509auth.VerifyChain(c.chain, pool(ca), at)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %q, %v; want an error saying %q", c.name, dn, err, c.want)
		}
	}
}

// TestAuthenticate: a mapped DN is its local user and no more; a valid
// DN the grid-mapfile does not name (never added, or removed: revoked)
// is refused, naming it; a bad chain refuses the request; a DN mapped to
// root or to an unknown user refuses; no certificate: the method does
// not apply.
func TestAuthenticate(t *testing.T) {
	local, err := user.Lookup("daemon")
	if err != nil {
		t.Fatal("the test needs the local user daemon")
	}
	ca := x509test.NewCA("Grid")
	dir := t.TempDir()
	if err := x509test.WriteCADir(filepath.Join(dir, "certificates"), ca); err != nil {
		t.Fatal(err)
	}
	gm := filepath.Join(dir, "grid-mapfile")
	os.WriteFile(gm, []byte(`# comment
"`+aliceDN+`" daemon,other
"/DC=org/DC=kaon-test/O=Users/CN=Root" root
"/DC=org/DC=kaon-test/O=Users/CN=Ghost" no-such-user-kaon
`), 0o644)
	x, err := x509auth.New(filepath.Join(dir, "certificates"), gm)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, ok, err := x.Authenticate(ctx, &auth.Request{}); ok || err != nil {
		t.Fatal("applies without a certificate")
	}
	p, ok, err := x.Authenticate(ctx, &auth.Request{Certs: ca.User("Alice").Proxy(x509test.ProxyOpts{}).Chain})
	if err != nil || !ok || p.Name != "daemon" || p.Method != "x509" || p.UID == 0 || strings.TrimSpace(local.Uid) != itoa(p.UID) {
		t.Fatalf("mapped proxy: %+v %v %v", p, ok, err)
	}
	if p.Scopes != nil {
		t.Fatal("a certificate principal carries scopes")
	}
	p, ok, err = x.Authenticate(ctx, &auth.Request{Certs: ca.User("Bob").Chain})
	if err == nil || !ok || p.UID != auth.Nobody.UID || !strings.Contains(err.Error(), "/CN=Bob is not in the grid-mapfile") {
		t.Fatalf("unmapped DN: %+v %v %v", p, ok, err)
	}
	for _, cn := range []string{"Root", "Ghost"} {
		if p, _, err := x.Authenticate(ctx, &auth.Request{Certs: ca.User(cn).Chain}); err == nil {
			t.Fatalf("%s: %+v", cn, p)
		}
	}
	// A DN removed from the grid-mapfile is refused at once (revoked).
	os.WriteFile(gm, []byte(`"/DC=org/DC=kaon-test/O=Users/CN=Root" root`+"\n"), 0o644)
	if p, _, err := x.Authenticate(ctx, &auth.Request{Certs: ca.User("Alice").Proxy(x509test.ProxyOpts{}).Chain}); err == nil ||
		!strings.Contains(err.Error(), aliceDN+" is not in the grid-mapfile") {
		t.Fatalf("a DN removed from the grid-mapfile: %+v %v", p, err)
	}
	expired := ca.User("Alice").Proxy(x509test.ProxyOpts{NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	if p, _, err := x.Authenticate(ctx, &auth.Request{Certs: expired.Chain}); err == nil || p.UID != auth.Nobody.UID {
		t.Fatalf("expired proxy: %+v %v", p, err)
	}
}

func itoa(n uint32) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}

func TestGridMapfile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "gm")
	os.WriteFile(f, []byte("\"/O=A B/CN=C D\" u1,u2\n/O=X/CN=Y u3\n\n# x\n\"/O=A B/CN=C D\" later\n"), 0o644)
	m, err := x509auth.ReadGridMapfile(f)
	if err != nil || m["/O=A B/CN=C D"] != "u1" || m["/O=X/CN=Y"] != "u3" || len(m) != 2 {
		t.Fatalf("%v %v", m, err)
	}
	os.WriteFile(f, []byte("\"/O=unterminated u1\n"), 0o644)
	if _, err := x509auth.ReadGridMapfile(f); err == nil {
		t.Fatal("an unterminated DN was accepted")
	}
}

// TestVOMS: a proxy's VOMS attributes are read when a VOMS server the
// VOMS directory vouches for signed them for the proxy's end-entity
// certificate and they are valid now; the voms-mapfile maps the first
// FQAN it names (the primary first) before the grid-mapfile is asked;
// attributes of an unknown server, a forged signature, another holder or
// out of their validity are ignored (the proxy is its DN), and a refusal
// says why.
func TestVOMS(t *testing.T) {
	for _, name := range []string{"daemon", "bin"} {
		if _, err := user.Lookup(name); err != nil {
			t.Fatalf("the test needs the local user %s", name)
		}
	}
	ca := x509test.NewCA("Grid")
	server := ca.Host("voms.kaon.test")
	rogue := x509test.NewCA("Rogue").Host("voms.kaon.test")
	dir := t.TempDir()
	x509test.WriteCADir(filepath.Join(dir, "certificates"), ca)
	gm := filepath.Join(dir, "grid-mapfile")
	os.WriteFile(gm, []byte(`"`+aliceDN+`" daemon`+"\n"), 0o644)
	vm := filepath.Join(dir, "voms-mapfile")
	os.WriteFile(vm, []byte(`"/kaontest/Role=production" bin
"/other/*" bin
`), 0o644)
	vomsDir := filepath.Join(dir, "vomsdir")
	if err := x509test.WriteLSC(vomsDir, "kaontest", server); err != nil {
		t.Fatal(err)
	}
	x, err := x509auth.New(filepath.Join(dir, "certificates"), gm)
	if err != nil {
		t.Fatal(err)
	}
	x.VOMSDir, x.VOMSMap = vomsDir, vm
	alice, bob := ca.User("Alice"), ca.User("Bob")
	with := func(u *x509test.Cred, v x509test.VOMS) []*x509.Certificate {
		if v.Server == nil {
			v.Server = server
		}
		if v.VO == "" {
			v.VO = "kaontest"
		}
		return u.Proxy(x509test.ProxyOpts{VOMS: &v}).Chain
	}
	ctx := context.Background()
	auth1 := func(chain []*x509.Certificate) (auth.Principal, error) {
		p, _, err := x.Authenticate(ctx, &auth.Request{Certs: chain})
		return p, err
	}
	// Attributes read; no mapping for them: the DN's user.
	p, err := auth1(with(alice, x509test.VOMS{FQANs: []string{"/kaontest/Role=NULL/Capability=NULL", "/kaontest/analysis/Role=NULL/Capability=NULL"}}))
	if err != nil || p.Name != "daemon" || strings.Join(p.FQANs, ",") != "/kaontest/Role=NULL/Capability=NULL,/kaontest/analysis/Role=NULL/Capability=NULL" {
		t.Fatalf("alice with VOMS attributes: %+v %v", p, err)
	}
	// The production role maps, before the grid-mapfile (and an unmapped DN).
	for _, u := range []*x509test.Cred{alice, bob} {
		if p, err := auth1(with(u, x509test.VOMS{FQANs: []string{"/kaontest/Role=production/Capability=NULL"}})); err != nil || p.Name != "bin" {
			t.Fatalf("%s with the production role: %+v %v", u.Cert.Subject, p, err)
		}
	}
	now := time.Now()
	for what, v := range map[string]x509test.VOMS{
		"an unknown server":     {Server: rogue},
		"a forged signature":    {SignWith: rogue.Key},
		"another holder":        {Holder: alice.Cert},
		"expired attributes":    {NotBefore: now.Add(-3 * time.Hour), NotAfter: now.Add(-time.Hour)},
		"a VO nobody vouch for": {VO: "other"},
	} {
		v.FQANs = []string{"/kaontest/Role=production/Capability=NULL"}
		if what == "a VO nobody vouch for" {
			v.FQANs = []string{"/other/Role=NULL/Capability=NULL"}
		}
		p, err := auth1(with(bob, v))
		if err == nil || len(p.FQANs) > 0 || !strings.Contains(err.Error(), "VOMS attributes ignored") {
			t.Fatalf("%s: %+v %v", what, p, err)
		}
	}
}

// TestCRL: a certificate its CA's CRL (<hash>.r0 in the CA directory, as
// fetch-crl writes it) revokes is refused, with its proxies; a CRL not
// signed by the CA it names is ignored; others are not affected.
func TestCRL(t *testing.T) {
	if _, err := user.Lookup("daemon"); err != nil {
		t.Fatal("the test needs the local user daemon")
	}
	ca, rogue := x509test.NewCA("Grid"), x509test.NewCA("Grid")
	dir := t.TempDir()
	certs := filepath.Join(dir, "certificates")
	x509test.WriteCADir(certs, ca)
	gm := filepath.Join(dir, "grid-mapfile")
	os.WriteFile(gm, []byte(`"`+aliceDN+`" daemon
"/DC=org/DC=kaon-test/O=Users/CN=Bob" daemon
"/DC=org/DC=kaon-test/O=Users/CN=Carol" daemon
`), 0o644)
	alice, bob, carol := ca.User("Alice"), ca.User("Bob"), ca.User("Carol")
	if err := ca.WriteCRL(certs, bob); err != nil {
		t.Fatal(err)
	}
	x, err := x509auth.New(certs, gm)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := x.Authenticate(ctx, &auth.Request{Certs: alice.Proxy(x509test.ProxyOpts{}).Chain}); err != nil {
		t.Fatalf("alice: %v", err)
	}
	_, _, err = x.Authenticate(ctx, &auth.Request{Certs: bob.Proxy(x509test.ProxyOpts{}).Chain})
	if err == nil || !strings.Contains(err.Error(), "/CN=Bob") || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("bob, revoked by the CRL: %v", err)
	}
	// A CRL of the same name signed by another key revokes nothing.
	dir2 := t.TempDir()
	x509test.WriteCADir(dir2, ca)
	if err := rogue.WriteCRL(dir2, carol); err != nil {
		t.Fatal(err)
	}
	y, err := x509auth.New(dir2, gm)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := y.Authenticate(ctx, &auth.Request{Certs: carol.Chain}); err != nil {
		t.Fatalf("carol, listed by a forged CRL: %v", err)
	}
}

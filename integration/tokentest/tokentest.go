// Package tokentest is a token issuer for integration tests: RSA and EC
// signing keys, their JWKS in a file, valid tokens for given scopes, and
// every kind of forged or unusable token a server must refuse.
package tokentest

import (
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
	"path/filepath"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Issuer signs test tokens.
type Issuer struct {
	URL      string // iss
	Audience string // aud of valid tokens
	JWKSFile string // its public keys
	rsa      *rsa.PrivateKey
	ec       *ecdsa.PrivateKey
	other    *rsa.PrivateKey // a key nobody trusts
}

// New makes an issuer named url whose JWKS is written under dir.
func New(t testing.TB, dir, url, audience string) *Issuer {
	t.Helper()
	is := &Issuer{URL: url, Audience: audience, JWKSFile: filepath.Join(dir, "jwks.json")}
	var err error
	if is.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if is.other, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if is.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(is.JWKS())
	if err := os.WriteFile(is.JWKSFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return is
}

// JWKS is the issuer's public key set (kids "rsa1" and "ec1").
func (is *Issuer) JWKS() jose.JSONWebKeySet {
	return jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &is.rsa.PublicKey, KeyID: "rsa1", Algorithm: "RS256", Use: "sig"},
		{Key: &is.ec.PublicKey, KeyID: "ec1", Algorithm: "ES256", Use: "sig"},
	}}
}

// Claims are valid WLCG claims for scope, now.
func (is *Issuer) Claims(scope string) map[string]any {
	now := time.Now().Unix()
	return map[string]any{"iss": is.URL, "sub": "test-subject", "aud": is.Audience, "wlcg.ver": "1.0",
		"iat": now, "nbf": now, "exp": now + 3600, "jti": "t", "scope": scope}
}

// Token is a valid token for scope (ES256).
func (is *Issuer) Token(t testing.TB, scope string) string {
	return sign(t, is.ec, "ec1", is.Claims(scope))
}

// RSAToken is a valid token for scope signed with RS256.
func (is *Issuer) RSAToken(t testing.TB, scope string) string {
	return sign(t, is.rsa, "rsa1", is.Claims(scope))
}

// Forged are tokens for scope that must all be refused, by name.
func (is *Issuer) Forged(t testing.TB, scope string) map[string]string {
	c := is.Claims(scope)
	with := func(k string, v any) map[string]any {
		out := map[string]any{}
		for a, b := range c {
			out[a] = b
		}
		out[k] = v
		return out
	}
	now := time.Now().Unix()
	pub, _ := x509.MarshalPKIXPublicKey(&is.rsa.PublicKey)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	return map[string]string{
		"wrong key":                 sign(t, is.other, "rsa1", c),
		"alg none":                  compact(map[string]any{"alg": "none", "kid": "rsa1", "typ": "JWT"}, c, nil),
		"HS256 with the public key": compact(map[string]any{"alg": "HS256", "kid": "rsa1", "typ": "JWT"}, c, pubPEM),
		"unknown kid":               sign(t, is.rsa, "no-such-kid", c),
		"expired":                   sign(t, is.ec, "ec1", with("exp", now-600)),
		"not yet valid":             sign(t, is.ec, "ec1", with("nbf", now+600)),
		"exp centuries away":        sign(t, is.ec, "ec1", with("exp", now+300*365*24*3600)), // beyond --token-max-ttl
		"wrong aud":                 sign(t, is.ec, "ec1", with("aud", "https://elsewhere.example")),
		"unknown iss":               sign(t, is.ec, "ec1", with("iss", "https://evil.example")),
	}
}

func sign(t testing.TB, key any, kid string, c map[string]any) string {
	t.Helper()
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

// compact builds a JWT by hand: unsigned (secret nil) or HMAC-SHA256
// with secret.
func compact(header, c map[string]any, secret []byte) string {
	h, _ := json.Marshal(header)
	b, _ := json.Marshal(c)
	in := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(b)
	if secret == nil {
		return in + "."
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

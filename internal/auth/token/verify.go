// Package token verifies and issues bearer tokens: JWTs of the WLCG
// profile and SciTokens 2.0, signed with RS256 or ES256 only.
//
// A Verifier is an auth.Authenticator: it applies to requests carrying a
// bearer token, checks it against the configured issuers (their keys come
// from a KeySet: a JWKS file, the issuer's published keys cached on disk
// by package token/remote, or this instance's own Issuer), and turns it
// into a principal whose Scopes narrow what its mapped local identity may
// do. Whatever its issuer, a token may live at most Config.MaxLifetime
// (the WLCG profile's lifetimes are hours). A token is verified once: the
// result is cached by the token's hash until it expires. An Issuer holds
// this instance's signing keys (current and previous, for rotation) and
// signs Kaon's own tokens; it publishes the keys as a JWKS and the
// discovery document verifiers fetch.
//
// The package holds no transport: fetching keys over HTTPS lives in
// token/remote, so the namespace service can issue tokens without
// importing net/http.
package token

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Algorithms are the only signature algorithms accepted: "none", HMAC
// (which a verifier holding a public key can be tricked into) and
// everything else are refused before any key is looked at.
var Algorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256}

// Audiences every Kaon accepts besides its configured ones: the WLCG
// profile's and SciTokens' "any audience".
var anyAudiences = []string{"https://wlcg.cern.ch/jwt/v1/any", "ANY"}

// KeySet finds an issuer's public signing keys.
type KeySet interface {
	// Key returns the public key with id kid; an unknown kid may make the
	// set look again (a rotated issuer), at most now and then.
	Key(ctx context.Context, kid string) (*jose.JSONWebKey, error)
}

// IssuerConfig is a trusted token issuer.
type IssuerConfig struct {
	Issuer string // the iss claim, exactly
	Keys   KeySet
	// Base is the namespace path the token's scope paths are relative to
	// ("" or "/": the root).
	Base string
	// Map turns a token's subject and groups into a local identity.
	Map Mapping
}

// Config configures a Verifier.
type Config struct {
	Issuers []IssuerConfig
	// Audiences accepted besides the "any" audiences; a token must name
	// at least one (the aud claim is required).
	Audiences []string
	Now       func() time.Time // default time.Now
	Leeway    time.Duration    // clock skew allowed on exp/nbf/iat (default 60s)
	CacheSize int              // verified tokens kept (default 10000)
	// MaxLifetime is the longest lifetime of a token of any issuer: exp
	// - iat, or exp - now when the token has no iat (default
	// DefaultMaxTTL).
	MaxLifetime time.Duration
}

// Verifier is the token Authenticator.
type Verifier struct {
	issuers   map[string]*IssuerConfig
	audiences []string
	now       func() time.Time
	leeway    time.Duration
	maxLife   time.Duration
	cache     *cache
}

// New builds a Verifier.
func New(c Config) (*Verifier, error) {
	v := &Verifier{issuers: map[string]*IssuerConfig{}, audiences: append(slices.Clone(c.Audiences), anyAudiences...),
		now: c.Now, leeway: c.Leeway, maxLife: c.MaxLifetime}
	if v.maxLife <= 0 {
		v.maxLife = DefaultMaxTTL
	}
	if v.now == nil {
		v.now = time.Now
	}
	if v.leeway == 0 {
		v.leeway = time.Minute
	}
	size := c.CacheSize
	if size <= 0 {
		size = 10000
	}
	v.cache = newCache(size)
	for i := range c.Issuers {
		ic := c.Issuers[i]
		if ic.Issuer == "" || ic.Keys == nil {
			return nil, fmt.Errorf("token issuer %q: needs a name and keys", ic.Issuer)
		}
		if _, dup := v.issuers[ic.Issuer]; dup {
			return nil, fmt.Errorf("token issuer %q configured twice", ic.Issuer)
		}
		if ic.Base != "" {
			b, ok := underBase("/", ic.Base)
			if !ok {
				return nil, fmt.Errorf("token issuer %q: base path %q must be absolute and plain", ic.Issuer, ic.Base)
			}
			ic.Base = b
		}
		v.issuers[ic.Issuer] = &ic
	}
	return v, nil
}

// TakesBearer marks a method of bearer credentials (auth.BearerMethod).
func (v *Verifier) TakesBearer() {}

// Authenticate implements auth.Authenticator: it applies to requests with
// a bearer token.
func (v *Verifier) Authenticate(ctx context.Context, r *auth.Request) (auth.Principal, bool, error) {
	if r.Bearer == "" {
		return auth.Nobody, false, nil
	}
	p, err := v.Verify(ctx, r.Bearer)
	return p, true, err
}

// claims are the parts of a token Kaon reads.
type claims struct {
	jwt.Claims
	Scope    string   `json:"scope,omitempty"`
	Groups   []string `json:"wlcg.groups,omitempty"`
	WLCGVer  string   `json:"wlcg.ver,omitempty"`
	SciToken string   `json:"ver,omitempty"`
}

// fail is the error of a token that cannot be used: it names the issuer
// and key when known, never the token.
func fail(iss, kid, format string, args ...any) error {
	what := "bearer token"
	switch {
	case iss != "" && kid != "":
		what = fmt.Sprintf("bearer token (issuer %s, key %s)", iss, kid)
	case iss != "":
		what = fmt.Sprintf("bearer token (issuer %s)", iss)
	}
	return kerr.New(kerr.Unauthenticated, "", what, fmt.Sprintf(format, args...))
}

// Verify checks a token and returns the principal it stands for.
func (v *Verifier) Verify(ctx context.Context, raw string) (auth.Principal, error) {
	now := v.now()
	sum := sha256.Sum256([]byte(raw))
	if e, ok := v.cache.get(sum); ok {
		if err := v.checkTimes(e.iss, e.kid, e.exp, e.nbf, now); err != nil {
			v.cache.drop(sum)
			return auth.Nobody, err
		}
		return e.p, nil
	}
	tok, err := jwt.ParseSigned(raw, Algorithms)
	if err != nil {
		return auth.Nobody, fail("", "", "not a usable JWT (only RS256 and ES256 signatures are accepted): %v", err)
	}
	if len(tok.Headers) != 1 {
		return auth.Nobody, fail("", "", "want exactly one signature")
	}
	h := tok.Headers[0]
	var unsafe claims
	if err := tok.UnsafeClaimsWithoutVerification(&unsafe); err != nil {
		return auth.Nobody, fail("", h.KeyID, "unreadable claims: %v", err)
	}
	ic, ok := v.issuers[unsafe.Issuer]
	if !ok {
		return auth.Nobody, fail(unsafe.Issuer, "", "issuer is not trusted here")
	}
	iss, kid := ic.Issuer, h.KeyID
	if kid == "" {
		return auth.Nobody, fail(iss, "", "the token names no key (kid)")
	}
	key, err := ic.Keys.Key(ctx, kid)
	if err != nil {
		return auth.Nobody, fail(iss, kid, "%v", err)
	}
	if err := keyFits(key, h.Algorithm); err != nil {
		return auth.Nobody, fail(iss, kid, "%v", err)
	}
	var c claims
	if err := tok.Claims(key.Key, &c); err != nil {
		return auth.Nobody, fail(iss, kid, "signature does not verify: %v", err)
	}
	if c.Issuer != iss {
		return auth.Nobody, fail(iss, kid, "issuer changed under the signature")
	}
	if c.Expiry == nil {
		return auth.Nobody, fail(iss, kid, "the token has no expiry (exp)")
	}
	exp := c.Expiry.Time()
	var nbf time.Time
	if c.NotBefore != nil {
		nbf = c.NotBefore.Time()
	}
	if c.IssuedAt != nil && c.IssuedAt.Time().After(now.Add(v.leeway)) {
		return auth.Nobody, fail(iss, kid, "issued in the future (iat %s)", c.IssuedAt.Time().UTC().Format(time.RFC3339))
	}
	if err := v.checkTimes(iss, kid, exp, nbf, now); err != nil {
		return auth.Nobody, err
	}
	from, since := now, "exp - now, no iat"
	if c.IssuedAt != nil {
		from, since = c.IssuedAt.Time(), "exp - iat"
	}
	if life := exp.Sub(from); life > v.maxLife+v.leeway {
		return auth.Nobody, fail(iss, kid, "lifetime %s (%s) is longer than the %s accepted here", lifetime(life), since, v.maxLife)
	}
	if len(c.Audience) == 0 {
		return auth.Nobody, fail(iss, kid, "the token names no audience (aud)")
	}
	if !slices.ContainsFunc(c.Audience, func(a string) bool { return slices.Contains(v.audiences, a) }) {
		return auth.Nobody, fail(iss, kid, "audience %s is not this service's", strings.Join(c.Audience, ","))
	}
	if c.WLCGVer != "" && c.WLCGVer != "1.0" {
		return auth.Nobody, fail(iss, kid, "unknown WLCG profile version %q", c.WLCGVer)
	}
	p, err := ic.Map.principal(c.Subject, c.Groups)
	if err != nil {
		return auth.Nobody, fail(iss, kid, "%v", err)
	}
	p.Scopes = ParseScopes(c.Scope, ic.Base)
	v.cache.put(sum, entry{p: p, iss: iss, kid: kid, exp: exp, nbf: nbf}, now)
	return p, nil
}

func (v *Verifier) checkTimes(iss, kid string, exp, nbf, now time.Time) error {
	if now.After(exp.Add(v.leeway)) {
		return fail(iss, kid, "expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if !nbf.IsZero() && now.Add(v.leeway).Before(nbf) {
		return fail(iss, kid, "not valid before %s", nbf.UTC().Format(time.RFC3339))
	}
	return nil
}

// lifetime prints a token's lifetime (exp.Sub saturates beyond 292 years).
func lifetime(d time.Duration) string {
	if d == math.MaxInt64 {
		return "over 292 years"
	}
	return d.Round(time.Second).String()
}

// keyFits checks that key is a public key of the kind alg signs with
// (an RSA key of at least 2048 bits for RS256, a P-256 key for ES256),
// and that the key's own "alg", when it has one, is alg.
func keyFits(key *jose.JSONWebKey, alg string) error {
	if key.Algorithm != "" && key.Algorithm != alg {
		return fmt.Errorf("key is for %s, the token is signed with %s", key.Algorithm, alg)
	}
	if key.Use != "" && key.Use != "sig" {
		return fmt.Errorf("key is not a signing key (use %q)", key.Use)
	}
	switch k := key.Key.(type) {
	case *rsa.PublicKey:
		if alg != string(jose.RS256) {
			return fmt.Errorf("an RSA key cannot verify %s", alg)
		}
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("RSA key of %d bits is too small", k.N.BitLen())
		}
	case *ecdsa.PublicKey:
		if alg != string(jose.ES256) || k.Curve != elliptic.P256() {
			return fmt.Errorf("an EC key on %s cannot verify %s", k.Curve.Params().Name, alg)
		}
	default:
		return fmt.Errorf("not a public RSA or EC key (%T)", key.Key)
	}
	return nil
}

// Unverified is what a token says about itself, signature not checked
// (`kaon token inspect`).
type Unverified struct {
	Header map[string]any
	Claims map[string]any
}

// Inspect decodes a token without verifying it.
func Inspect(raw string) (Unverified, error) {
	tok, err := jwt.ParseSigned(raw, Algorithms)
	if err != nil {
		return Unverified{}, fmt.Errorf("not a JWT signed with RS256 or ES256: %w", err)
	}
	u := Unverified{Header: map[string]any{}, Claims: map[string]any{}}
	if err := tok.UnsafeClaimsWithoutVerification(&u.Claims); err != nil {
		return Unverified{}, err
	}
	h := tok.Headers[0]
	u.Header["alg"], u.Header["kid"] = h.Algorithm, h.KeyID
	for k, val := range h.ExtraHeaders {
		u.Header[string(k)] = val
	}
	return u, nil
}

// String prints the decoded token as indented JSON.
func (u Unverified) String() string {
	b, _ := json.MarshalIndent(map[string]any{"header": u.Header, "claims": u.Claims}, "", "  ")
	return string(b)
}

// cache holds verified tokens by their SHA-256: a token's signature is
// checked once; expiry is checked on every use.
type cache struct {
	mu  sync.RWMutex
	max int
	m   map[[32]byte]entry
}

type entry struct {
	p        auth.Principal
	iss, kid string
	exp, nbf time.Time
}

func newCache(max int) *cache { return &cache{max: max, m: map[[32]byte]entry{}} }

func (c *cache) get(k [32]byte) (entry, bool) {
	c.mu.RLock()
	e, ok := c.m[k]
	c.mu.RUnlock()
	return e, ok
}

func (c *cache) drop(k [32]byte) {
	c.mu.Lock()
	delete(c.m, k)
	c.mu.Unlock()
}

// put adds an entry; a full cache first drops expired entries, then
// (still full) any half.
func (c *cache) put(k [32]byte, e entry, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for key, old := range c.m {
			if now.After(old.exp) {
				delete(c.m, key)
			}
		}
		for key := range c.m {
			if len(c.m) < c.max/2 {
				break
			}
			delete(c.m, key)
		}
	}
	c.m[k] = e
}

package token

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Issuer signs this instance's own tokens (WLCG profile 1.0, ES256) and
// publishes its public keys. Its keys live in one file (mode 0600), newest
// first: the current key signs, previous ones stay in the JWKS until every
// token they signed has expired (MaxTTL after they were retired), so a
// rotation never invalidates a token early. The next key is published
// before it signs anything: a rotation promotes it and publishes a new
// next key, so a verifier holding a key set fetched before the rotation
// (scitokens-cpp keeps one for minutes and does not look again for an
// unknown key id) already knows the key of the tokens signed after it.
//
// Key file format (version 1), JSON:
//
//	{"version": 1, "keys": [{"jwk": {private JWK, kid = RFC 7638
//	 thumbprint}, "created": RFC 3339, "retired": RFC 3339 or absent,
//	 "next": true for the published key that signs after the next rotation}, ...]}
type Issuer struct {
	// URL is the iss of issued tokens; verifiers fetch
	// URL/.well-known/openid-configuration. Set before serving.
	URL    string
	MaxTTL time.Duration
	Now    func() time.Time

	file string
	mu   sync.RWMutex
	keys []issuerKey // newest first
}

type issuerKey struct {
	JWK     jose.JSONWebKey `json:"jwk"`
	Created time.Time       `json:"created"`
	Retired *time.Time      `json:"retired,omitempty"`
	Next    bool            `json:"next,omitempty"`
}

type keyFile struct {
	Version int         `json:"version"`
	Keys    []issuerKey `json:"keys"`
}

// DefaultMaxTTL is the longest lifetime of an issued token by default.
const DefaultMaxTTL = 24 * time.Hour

// OpenIssuer loads the key file, creating it with a first key if missing.
func OpenIssuer(file string, maxTTL time.Duration) (*Issuer, error) {
	if maxTTL <= 0 {
		maxTTL = DefaultMaxTTL
	}
	i := &Issuer{file: file, MaxTTL: maxTTL, Now: time.Now}
	b, err := os.ReadFile(file)
	switch {
	case os.IsNotExist(err):
		// a first current key, and the next one published with it
		if _, err := i.rotate(); err != nil {
			return nil, err
		}
		if _, err := i.rotate(); err != nil {
			return nil, err
		}
		return i, nil
	case err != nil:
		return nil, err
	}
	var kf keyFile
	if err := json.Unmarshal(b, &kf); err != nil || kf.Version != 1 || len(kf.Keys) == 0 {
		return nil, fmt.Errorf("token key file %s: unreadable or not version 1 (%v)", file, err)
	}
	for _, k := range kf.Keys {
		if k.JWK.IsPublic() || !k.JWK.Valid() {
			return nil, fmt.Errorf("token key file %s: key %s is not a valid private key", file, k.JWK.KeyID)
		}
	}
	i.keys = kf.Keys
	if !i.keys[0].Next { // a key file from before next keys: publish one now
		next, err := newKey(i.Now().UTC().Truncate(time.Second))
		if err != nil {
			return nil, err
		}
		next.Next = true
		keys := append([]issuerKey{next}, i.keys...)
		if err := writeKeys(file, keys); err != nil {
			return nil, err
		}
		i.keys = keys
	}
	return i, nil
}

// signing is the current key (the newest neither next nor retired).
func (i *Issuer) signing() jose.JSONWebKey {
	for _, k := range i.keys {
		if !k.Next && k.Retired == nil {
			return k.JWK
		}
	}
	return i.keys[len(i.keys)-1].JWK // not reached: a rotation always leaves one
}

// IssueRequest is what a token is for.
type IssueRequest struct {
	Subject  string   // the local user the token acts as (sub)
	Scopes   []string // "storage.read:/p" ...
	Audience []string // default: the issuer's own URL
	TTL      time.Duration
}

// Issue signs a token with the current key.
func (i *Issuer) Issue(r IssueRequest) (string, error) {
	if r.TTL <= 0 || r.TTL > i.MaxTTL {
		return "", fmt.Errorf("lifetime %s out of range (0, %s]", r.TTL, i.MaxTTL)
	}
	if r.Subject == "" || len(r.Scopes) == 0 {
		return "", fmt.Errorf("a token needs a subject and at least one scope")
	}
	aud := r.Audience
	if len(aud) == 0 {
		aud = []string{i.URL}
	}
	i.mu.RLock()
	key := i.signing()
	i.mu.RUnlock()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", err
	}
	now := i.Now().Truncate(time.Second)
	var jti [16]byte
	rand.Read(jti[:])
	c := claims{
		Claims: jwt.Claims{Issuer: i.URL, Subject: r.Subject, Audience: aud, ID: hex.EncodeToString(jti[:]),
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(r.TTL))},
		Scope: strings.Join(r.Scopes, " "), WLCGVer: "1.0",
	}
	return jwt.Signed(signer).Claims(c).Serialize()
}

// Rotate makes the published next key the current one and publishes a new
// next key; the previous current key keeps verifying until MaxTTL from
// now. It returns the id of the key that signs from now on.
func (i *Issuer) Rotate() (string, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.rotate()
}

func (i *Issuer) rotate() (string, error) {
	now := i.Now().UTC().Truncate(time.Second)
	next, err := newKey(now)
	if err != nil {
		return "", err
	}
	next.Next = true
	keys, current := []issuerKey{next}, ""
	for _, k := range i.keys {
		switch {
		case k.Next:
			k.Next = false
			current = k.JWK.KeyID
		case k.Retired == nil:
			k.Retired = &now
		}
		if k.Retired == nil || now.Sub(*k.Retired) <= i.MaxTTL {
			keys = append(keys, k)
		}
	}
	if err := writeKeys(i.file, keys); err != nil {
		return "", err
	}
	i.keys = keys
	return current, nil
}

// newKey makes an ES256 key whose id is its RFC 7638 thumbprint.
func newKey(now time.Time) (issuerKey, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return issuerKey{}, err
	}
	jwk := jose.JSONWebKey{Key: priv, Algorithm: string(jose.ES256), Use: "sig"}
	tp, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return issuerKey{}, err
	}
	jwk.KeyID = base64.RawURLEncoding.EncodeToString(tp)[:16]
	return issuerKey{JWK: jwk, Created: now}, nil
}

func writeKeys(file string, keys []issuerKey) error {
	b, err := json.MarshalIndent(keyFile{Version: 1, Keys: keys}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = f.Sync()
		f.Close()
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// JWKS is the public key set: the next key, the current key and the
// previous ones still verifying.
func (i *Issuer) JWKS() jose.JSONWebKeySet {
	i.mu.RLock()
	defer i.mu.RUnlock()
	now := i.Now()
	set := jose.JSONWebKeySet{}
	for _, k := range i.keys {
		if k.Retired != nil && now.Sub(*k.Retired) > i.MaxTTL {
			continue
		}
		set.Keys = append(set.Keys, k.JWK.Public())
	}
	return set
}

// KeyInfo describes one key for `kaon token keys`.
type KeyInfo struct {
	KID     string     `json:"kid"`
	Created time.Time  `json:"created"`
	Retired *time.Time `json:"retired,omitempty"`
	Next    bool       `json:"next,omitempty"` // published, signs after the next rotation
}

// Keys lists the keys, newest first.
func (i *Issuer) Keys() []KeyInfo {
	i.mu.RLock()
	defer i.mu.RUnlock()
	out := make([]KeyInfo, len(i.keys))
	for n, k := range i.keys {
		out[n] = KeyInfo{KID: k.JWK.KeyID, Created: k.Created, Retired: k.Retired, Next: k.Next}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Created.After(out[b].Created) })
	return out
}

// Key implements KeySet over the instance's own keys: Kaon verifies its
// tokens without fetching anything.
func (i *Issuer) Key(_ context.Context, kid string) (*jose.JSONWebKey, error) {
	if k, ok := FindKey(i.JWKS(), kid); ok {
		return k, nil
	}
	return nil, fmt.Errorf("unknown key (not one of this instance's current or previous keys)")
}

// JWKSPath and DiscoveryPath are where an instance publishes its keys,
// below its URL.
const (
	DiscoveryPath = "/.well-known/openid-configuration"
	JWKSPath      = "/.well-known/jwks.json"
)

// Discovery is the issuer metadata document (OpenID Connect discovery's
// fields that token verifiers read).
func (i *Issuer) Discovery() map[string]any {
	return map[string]any{
		"issuer":                                i.URL,
		"jwks_uri":                              strings.TrimRight(i.URL, "/") + JWKSPath,
		"id_token_signing_alg_values_supported": []string{string(jose.ES256)},
		"scopes_supported":                      ScopeNames,
	}
}

// Package remote fetches a token issuer's public keys over HTTPS and keeps
// them on disk, so tokens verify offline and through an issuer outage.
//
// Keys are looked for at the issuer's discovery document
// (ISSUER/.well-known/openid-configuration, whose jwks_uri names the key
// set) or at a URL given instead (a JWK set, or a discovery document).
// The keys are fetched the first time they are needed (or by Prefetch at
// start), written to the cache directory, and read from there after a
// restart; a token naming a key the set does not hold makes the set be
// fetched again, at most once per MinRefresh, and a failed fetch keeps the
// keys already known.
package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/kaon-storage/kaon/internal/auth/token"
)

// MinRefresh is the shortest time between two fetches of one issuer's keys.
const MinRefresh = time.Minute

// Keys is one issuer's remote key set; it implements token.KeySet.
type Keys struct {
	Issuer string // the issuer (its discovery document is below it)
	// URL is where the keys are fetched ("": ISSUER's discovery document).
	// A document with "keys" is the JWK set; one with "jwks_uri" names it.
	URL      string
	CacheDir string       // "" = no disk cache
	Client   *http.Client // nil: a client with a 10 s timeout
	Now      func() time.Time

	mu        sync.Mutex
	set       jose.JSONWebKeySet
	loaded    bool // the disk cache was read
	lastFetch time.Time
}

// cached is the disk cache file of one issuer.
type cached struct {
	Issuer  string             `json:"issuer"`
	Source  string             `json:"source"`
	Fetched time.Time          `json:"fetched"`
	Keys    jose.JSONWebKeySet `json:"keys"`
}

func (k *Keys) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

func (k *Keys) cacheFile() string {
	sum := sha256.Sum256([]byte(k.Issuer))
	return filepath.Join(k.CacheDir, hex.EncodeToString(sum[:8])+".json")
}

// Key implements token.KeySet.
func (k *Keys) Key(ctx context.Context, kid string) (*jose.JSONWebKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.loadCache()
	if key, ok := token.FindKey(k.set, kid); ok {
		return key, nil
	}
	if !k.lastFetch.IsZero() && k.now().Sub(k.lastFetch) < MinRefresh {
		return nil, fmt.Errorf("unknown key (the issuer's keys were fetched %s ago)", k.now().Sub(k.lastFetch).Round(time.Second))
	}
	if err := k.fetch(ctx); err != nil {
		return nil, fmt.Errorf("unknown key; fetching the issuer's keys failed: %v", err)
	}
	if key, ok := token.FindKey(k.set, kid); ok {
		return key, nil
	}
	return nil, fmt.Errorf("unknown key (not among the issuer's published keys)")
}

// Prefetch fetches the keys unless the disk cache has them (run at start,
// so later tokens verify without the issuer).
func (k *Keys) Prefetch(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.loadCache()
	if len(k.set.Keys) > 0 {
		return nil
	}
	return k.fetch(ctx)
}

func (k *Keys) loadCache() {
	if k.loaded || k.CacheDir == "" {
		return
	}
	k.loaded = true
	b, err := os.ReadFile(k.cacheFile())
	if err != nil {
		return
	}
	var c cached
	if json.Unmarshal(b, &c) == nil && c.Issuer == k.Issuer {
		k.set = c.Keys
	}
}

// fetch gets the key set and, when it holds keys, replaces the known one.
func (k *Keys) fetch(ctx context.Context) error {
	k.lastFetch = k.now()
	src := k.URL
	if src == "" {
		src = strings.TrimRight(k.Issuer, "/") + token.DiscoveryPath
	}
	var doc struct {
		jose.JSONWebKeySet
		JWKSURI string `json:"jwks_uri"`
		Issuer  string `json:"issuer"`
	}
	if err := k.get(ctx, src, &doc); err != nil {
		return err
	}
	if doc.JWKSURI != "" {
		if doc.Issuer != "" && doc.Issuer != k.Issuer {
			return fmt.Errorf("%s names issuer %q, not %q", src, doc.Issuer, k.Issuer)
		}
		src = doc.JWKSURI
		doc.JSONWebKeySet = jose.JSONWebKeySet{}
		if err := k.get(ctx, src, &doc.JSONWebKeySet); err != nil {
			return err
		}
	}
	b, _ := json.Marshal(doc.JSONWebKeySet)
	set, err := token.ParseJWKS(b)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	k.set = set
	if k.CacheDir != "" {
		c, _ := json.MarshalIndent(cached{Issuer: k.Issuer, Source: src, Fetched: k.now().UTC(), Keys: set}, "", "  ")
		if err := os.MkdirAll(k.CacheDir, 0o700); err != nil {
			return err
		}
		tmp := k.cacheFile() + ".tmp"
		if err := os.WriteFile(tmp, c, 0o600); err != nil {
			return err
		}
		return os.Rename(tmp, k.cacheFile())
	}
	return nil
}

// get fetches a JSON document: https only (plain http to a loopback
// address, another instance on this host, is allowed), 1 MiB at most.
func (k *Keys) get(ctx context.Context, u string, out any) error {
	if err := CheckURL(u); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	c := k.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	// Redirects must keep to the same rules.
	cc := *c
	cc.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		return CheckURL(r.URL.String())
	}
	resp, err := cc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("GET %s: not JSON: %w", u, err)
	}
	return nil
}

// CheckURL allows https URLs, and http ones whose host is a loopback
// address (a key set is as trustworthy as the channel it came over).
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("bad URL %q: %w", raw, err)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsLoopback() {
			return nil
		}
	}
	return fmt.Errorf("keys are fetched over https only (plain http to a loopback address): %s", raw)
}

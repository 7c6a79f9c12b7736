package remote

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

func ecKey(t *testing.T, kid string) jose.JSONWebKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: "ES256", Use: "sig"}
}

// TestFetchAndCache: keys come from the issuer's discovery document over
// https, are written to disk, and serve a new process after the issuer
// went away; an unknown kid fetches again, at most once per MinRefresh.
func TestFetchAndCache(t *testing.T) {
	var set atomic.Value
	set.Store(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{ecKey(t, "k1")}})
	var fetches atomic.Int64
	var issuer string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			json.NewEncoder(w).Encode(map[string]string{"issuer": issuer, "jwks_uri": issuer + "/keys"})
		case "/keys":
			fetches.Add(1)
			json.NewEncoder(w).Encode(set.Load())
		default:
			http.NotFound(w, r)
		}
	}))
	issuer = srv.URL
	dir := t.TempDir()
	now := time.Now()
	k := &Keys{Issuer: issuer, CacheDir: dir, Client: srv.Client(), Now: func() time.Time { return now }}
	ctx := context.Background()
	if err := k.Prefetch(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Key(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Key(ctx, "k2"); err == nil || fetches.Load() != 1 {
		t.Fatalf("unknown kid within MinRefresh: %v, %d fetches", err, fetches.Load())
	}
	set.Store(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{ecKey(t, "k2"), ecKey(t, "k1")}})
	now = now.Add(MinRefresh + time.Second)
	if _, err := k.Key(ctx, "k2"); err != nil || fetches.Load() != 2 {
		t.Fatalf("rotated issuer: %v, %d fetches", err, fetches.Load())
	}
	srv.Close()
	offline := &Keys{Issuer: issuer, CacheDir: dir, Client: srv.Client()}
	if _, err := offline.Key(ctx, "k2"); err != nil {
		t.Fatalf("from the disk cache with the issuer down: %v", err)
	}
	// a failed fetch keeps the keys known
	now = now.Add(MinRefresh + time.Second)
	if _, err := k.Key(ctx, "k3"); err == nil {
		t.Fatal("unknown kid with the issuer down")
	}
	if _, err := k.Key(ctx, "k1"); err != nil {
		t.Fatalf("known key after a failed fetch: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("cache dir holds %d files", len(ents))
	}
}

func TestDiscoveryOfAnotherIssuer(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"issuer": "https://other.example", "jwks_uri": "https://other.example/keys"})
	}))
	defer srv.Close()
	k := &Keys{Issuer: srv.URL, Client: srv.Client()}
	if _, err := k.Key(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "other.example") {
		t.Fatalf("discovery naming another issuer: %v", err)
	}
}

func TestCheckURL(t *testing.T) {
	for u, ok := range map[string]bool{
		"https://iss.example/keys": true, "http://127.0.0.1:8000/x": true, "http://[::1]:1/x": true,
		"http://iss.example/keys": false, "http://localhost.evil.example/": false, "file:///etc/jwks": false,
		"http://10.0.0.1/": false,
	} {
		if err := CheckURL(u); (err == nil) != ok {
			t.Errorf("CheckURL(%s) = %v", u, err)
		}
	}
}

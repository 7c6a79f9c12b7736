package token

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// ParseJWKS reads a JWK set and keeps its public signing keys.
func ParseJWKS(b []byte) (jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return set, fmt.Errorf("not a JWK set: %w", err)
	}
	out := jose.JSONWebKeySet{}
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		out.Keys = append(out.Keys, k.Public())
	}
	if len(out.Keys) == 0 {
		return out, fmt.Errorf("the JWK set holds no signing key")
	}
	return out, nil
}

// FindKey returns the key kid of set.
func FindKey(set jose.JSONWebKeySet, kid string) (*jose.JSONWebKey, bool) {
	if ks := set.Key(kid); len(ks) > 0 {
		return &ks[0], true
	}
	return nil, false
}

// FileKeys is a JWKS in a local file, read again when it changes.
type FileKeys struct {
	Path string

	mu    sync.Mutex
	set   jose.JSONWebKeySet
	mtime time.Time
	size  int64
}

// NewFileKeys reads the JWKS in path (which must be readable now).
func NewFileKeys(path string) (*FileKeys, error) {
	f := &FileKeys{Path: path}
	if err := f.load(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *FileKeys) load() error {
	st, err := os.Stat(f.Path)
	if err != nil {
		return err
	}
	if st.ModTime().Equal(f.mtime) && st.Size() == f.size {
		return nil
	}
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return err
	}
	set, err := ParseJWKS(b)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	f.set, f.mtime, f.size = set, st.ModTime(), st.Size()
	return nil
}

// Key implements KeySet: an unknown kid re-reads the file if it changed.
func (f *FileKeys) Key(_ context.Context, kid string) (*jose.JSONWebKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if k, ok := FindKey(f.set, kid); ok {
		return k, nil
	}
	if err := f.load(); err != nil {
		return nil, fmt.Errorf("unknown key; re-reading %s: %v", f.Path, err)
	}
	if k, ok := FindKey(f.set, kid); ok {
		return k, nil
	}
	return nil, fmt.Errorf("unknown key (not in %s)", f.Path)
}

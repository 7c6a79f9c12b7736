// Package capability mints and verifies the signed, short-lived tokens the
// namespace server hands to clients in redirects. A capability names exactly
// one file, one access mode and the filesystems holding its stripes; only
// holders of the shared key (namespace and storage servers) can mint one.
//
// Wire form: base64url(JSON payload) "." base64url(HMAC-SHA256(key, payload)).
package capability

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Target is one stripe or replica of a file.
type Target struct {
	FsID uint32 `json:"fs"`
	Addr string `json:"a"` // storage server base URL (http://host:port)
}

// Capability is what the namespace authorizes.
type Capability struct {
	Version   int               `json:"v"`
	Fid       uint64            `json:"fid"`
	Write     bool              `json:"w,omitempty"`
	Path      string            `json:"p"` // for logs and error messages only
	Layout    string            `json:"l"`
	Size      int64             `json:"s,omitempty"` // committed size (reads)
	Checksums []string          `json:"c,omitempty"` // types to compute (writes)
	Sums      map[string]string `json:"x,omitempty"` // committed checksums (reads)
	Targets   []Target          `json:"t"`
	UID       uint32            `json:"u"`
	GID       uint32            `json:"g"`
	App       string            `json:"a,omitempty"` // the client's application, for I/O accounting (kaon io stat)
	Expires   int64             `json:"e"`           // unix seconds
	// Move makes a read capability the namespace's order to copy one
	// stripe of the file to another filesystem (drain, balance).
	Move *Move `json:"mv,omitempty"`
	// Staged marks a write capability whose stripes are written and
	// finished but never committed by the storage server: the namespace
	// switches them in itself (layout and space conversion).
	Staged bool `json:"st,omitempty"`
	// DataVersion is the file's data version: a read is served only from
	// stripes at it, an update (Update) starts from it.
	DataVersion uint64 `json:"dv,omitempty"`
	// Stale are the stripes (indexes into Targets) that missed an update:
	// never read, never updated.
	Stale []int `json:"sl,omitempty"`
	// Update makes a write capability an update session of the committed
	// file (Size is its size): writes at any offset, truncations, and a
	// new data version at each commit. With Fresh the file has no stripes
	// yet (it is empty): Targets are where to create them.
	Update bool `json:"up,omitempty"`
	Fresh  bool `json:"fr,omitempty"`
}

// IsStale reports whether stripe i is stale.
func (c *Capability) IsStale(i int) bool {
	for _, s := range c.Stale {
		if s == i {
			return true
		}
	}
	return false
}

// Move names the stripe a move copies and where to.
type Move struct {
	Stripe int    `json:"i"`
	Dst    Target `json:"d"`
}

// Internal reports whether c is for servers only (a move order or a
// staged upload): client endpoints refuse it.
func (c *Capability) Internal() bool { return c.Move != nil || c.Staged }

// Key signs and verifies capabilities.
type Key struct{ secret []byte }

// NewKey wraps a secret of at least 32 bytes.
func NewKey(secret []byte) (*Key, error) {
	if len(secret) < 32 {
		return nil, errors.New("capability: key must be at least 32 bytes")
	}
	return &Key{secret: append([]byte(nil), secret...)}, nil
}

// LoadOrCreateKey reads a hex key file, creating it (mode 0600) if missing.
func LoadOrCreateKey(path string) (*Key, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, []byte(hex.EncodeToString(secret)+"\n"), 0o600); err != nil {
			return nil, err
		}
		return NewKey(secret)
	}
	if err != nil {
		return nil, err
	}
	secret, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("capability: key file %s is not hex", path)
	}
	return NewKey(secret)
}

func (k *Key) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write(payload)
	return m.Sum(nil)
}

// Sign encodes and signs c.
func (k *Key) Sign(c *Capability) string {
	c.Version = 1
	payload, _ := json.Marshal(c)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(k.mac(payload))
}

// Access is what a request names and wants: the file, by id or by path
// (a zero field is not named, so not compared: HTTP data URLs name the
// fid, root:// opens the path), and the mode, which is always compared.
type Access struct {
	Fid   uint64
	Path  string
	Write bool
	// Internal accepts capabilities for servers only (Capability.Internal):
	// set by the internal endpoints, never by client ones.
	Internal bool
}

// Verify checks signature and expiry, then that the capability is for the
// file and mode a names: the one check of every protocol (HTTP data and
// stripe endpoints, root://). The error never echoes the token.
func (k *Key) Verify(token string, now time.Time, a Access) (*Capability, error) {
	payload, sig, err := split(token)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(sig, k.mac(payload)) {
		return nil, kerr.New(kerr.Permission, "capability", "", "capability signature invalid")
	}
	return check(payload, now, a)
}

// Parse reads a capability without its key, for a client that was
// handed it by the namespace server itself (the mount's direct path,
// which opens a stripe it can reach as the capability says): it checks
// expiry and scope as Verify does, never the signature, so it proves
// nothing about a token from anywhere else.
func Parse(token string, now time.Time, a Access) (*Capability, error) {
	payload, _, err := split(token)
	if err != nil {
		return nil, err
	}
	return check(payload, now, a)
}

// split decodes token's payload and signature.
func split(token string) (payload, sig []byte, err error) {
	deny := func(why string) ([]byte, []byte, error) {
		return nil, nil, kerr.New(kerr.Permission, "capability", "", why)
	}
	if token == "" {
		return deny("missing capability")
	}
	if len(token) > 64<<10 {
		return deny("capability too long")
	}
	p, s, ok := strings.Cut(token, ".")
	if !ok {
		return deny("malformed capability")
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p)
	sig, err2 := enc.DecodeString(s)
	if err1 != nil || err2 != nil {
		return deny("malformed capability")
	}
	return payload, sig, nil
}

// check decodes a payload and checks its expiry and that it is for the
// file and mode a names.
func check(payload []byte, now time.Time, a Access) (*Capability, error) {
	var c Capability
	if err := json.Unmarshal(payload, &c); err != nil || c.Version != 1 {
		return nil, kerr.New(kerr.Permission, "capability", "", "capability payload invalid")
	}
	if now.Unix() > c.Expires {
		return nil, kerr.New(kerr.Expired, "capability", c.Path, "capability expired")
	}
	switch {
	case a.Fid != 0 && a.Fid != c.Fid, a.Path != "" && a.Path != c.Path:
		name := c.Path
		if a.Path != "" {
			name = a.Path
		}
		return nil, kerr.New(kerr.Permission, "capability", name, "capability is for another file")
	case a.Write && !c.Write:
		return nil, kerr.New(kerr.Permission, "write", c.Path, "capability does not allow writing")
	case !a.Write && c.Write && !c.Update: // an update session reads what it changes
		return nil, kerr.New(kerr.Permission, "read", c.Path, "capability is for writing")
	case c.Internal() && !a.Internal:
		return nil, kerr.New(kerr.Permission, "capability", c.Path, "capability is for storage servers only")
	}
	return &c, nil
}

// Derive is a secret of its own for label (another use of the instance's
// shared key: macaroons' root key), from which the key cannot be found.
func (k *Key) Derive(label string) []byte { return k.mac([]byte(label)) }

// Internal derives the bearer secret trusted services present to each other
// on internal endpoints, so the raw key never travels.
func (k *Key) Internal() string {
	return hex.EncodeToString(k.mac([]byte("kaon-internal-v1")))
}

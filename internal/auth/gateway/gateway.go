// Package gateway lets a host the instance trusts as a gateway (a node
// that mounts the namespace for its users, as EOS's sss keytab lets
// eosxd) assert, per request, the uid and gids of the local process the
// request is made for, without that user's token.
//
// A gateway holds a key shared with the namespace servers (a file of at
// least 32 random bytes, readable by root only). Each request to a
// namespace server carries an assertion in the Kaon-Gateway header,
//
//	v1.KID.CLAIMS.MAC
//
// KID names the key (a hash of it, never the key), CLAIMS is the
// base64url JSON of the asserted uid, gid and groups, the request it is
// for (method and request URI), the time it was made and a random
// nonce, and MAC is the HMAC-SHA256 (crypto/hmac) with the key of
// "v1.KID.CLAIMS". The server takes it (Method) when the MAC verifies
// with a key it trusts (compared in constant time), the request is the
// one it names, the time is within Window of its clock, and the nonce
// was not seen before within that window: a captured assertion is good
// for its own request only, once, for at most Window. Anything else is
// refused with the reason; a server without the gateway method never
// reads the header, so a plain client that sends one gains nothing.
// (A JWS through go-jose was the first form: it cost two to three
// times as much per request, DESIGN-NOTES.md.)
//
// uid 0 is squashed to nobody unless the key is trusted with
// no_root_squash (NFS's vocabulary). The uids and gids are numbers of the
// uid space the gateway and the servers share (as NFS's AUTH_SYS and
// EOS's sss); a name is the server's local account of that uid, if any.
package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Header carries a gateway's assertion on a request to a namespace
// server.
const Header = "Kaon-Gateway"

// Window is how far an assertion's time may be from the server's clock
// (either way): the replay window, and the clock skew tolerated.
const Window = 30 * time.Second

// MinKeyBytes is the shortest key accepted.
const MinKeyBytes = 32

// maxGroups bounds the groups one assertion may carry (NGROUPS_MAX is
// 65536; what an account has in practice is far fewer).
const maxGroups = 1024

// Key is a gateway key: the shared secret and its public id.
type Key struct {
	ID     string // hex of a hash of the secret: names the key in headers, logs and errors
	secret []byte
}

// LoadKey reads a gateway key file: its bytes (surrounding white space
// trimmed, so `openssl rand -hex 32 > FILE` works) are the secret. The
// file must be a regular file readable by its owner only, as ssh
// requires of private keys. Errors name the file and the reason, never
// its content.
func LoadKey(path string) (*Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gateway key %s: %w", path, errors.Unwrap(err))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("gateway key %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gateway key %s: not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("gateway key %s: readable by others (mode %04o): chmod 600 it and replace the key, which may have leaked", path, st.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("gateway key %s: %w", path, err)
	}
	k, err := NewKey([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("gateway key %s: %w", path, err)
	}
	return k, nil
}

// NewKey is the key of secret (at least MinKeyBytes long).
func NewKey(secret []byte) (*Key, error) {
	if len(secret) < MinKeyBytes {
		return nil, fmt.Errorf("%d bytes, want at least %d (head -c 32 /dev/urandom | base64 > FILE)", len(secret), MinKeyBytes)
	}
	sum := sha256.Sum256(append([]byte("kaon-gateway-key-id\x00"), secret...))
	return &Key{ID: hex.EncodeToString(sum[:8]), secret: append([]byte(nil), secret...)}, nil
}

// String names the key by its id only.
func (k *Key) String() string { return "gateway key " + k.ID }

// claims are an assertion's content.
type claims struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	Req    string   `json:"req"` // METHOD REQUEST-URI
	Time   int64    `json:"t"`   // unix milliseconds
	Nonce  string   `json:"n"`
}

// Assert is the Header value asserting uid, gid and groups for the
// request method target (target: its request URI, path and query).
func (k *Key) Assert(method, target string, uid, gid uint32, groups []uint32) string {
	var n [16]byte
	rand.Read(n[:])
	c := claims{UID: uid, GID: gid, Groups: groups, Req: method + " " + target, Time: time.Now().UnixMilli(), Nonce: hex.EncodeToString(n[:])}
	b, _ := json.Marshal(c)
	signed := version + "." + k.ID + "." + base64.RawURLEncoding.EncodeToString(b)
	return signed + "." + base64.RawURLEncoding.EncodeToString(k.mac(signed))
}

// version heads the assertions of this format.
const version = "v1"

// mac is the HMAC-SHA256 of signed with k.
func (k *Key) mac(signed string) []byte {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte(signed))
	return m.Sum(nil)
}

// Trusted is a key a namespace server trusts as a gateway's.
type Trusted struct {
	Key          *Key
	NoRootSquash bool // uid 0 asserted with it is root (else nobody)
}

// ParseTrusted reads --gateway-key's FILE[,no_root_squash].
func ParseTrusted(spec string) (Trusted, error) {
	parts := strings.Split(spec, ",")
	var t Trusted
	for _, o := range parts[1:] {
		switch o {
		case "no_root_squash":
			t.NoRootSquash = true
		case "root_squash":
			t.NoRootSquash = false
		default:
			return t, fmt.Errorf("--gateway-key %s: unknown option %q (want no_root_squash)", parts[0], o)
		}
	}
	k, err := LoadKey(parts[0])
	if err != nil {
		return t, err
	}
	t.Key = k
	return t, nil
}

// Method authenticates a gateway's assertions (an auth.Authenticator).
type Method struct {
	keys map[string]Trusted
	now  func() time.Time

	mu     sync.Mutex
	nonces map[int64]map[[16]byte]struct{} // by the window their assertion expires in
	names  map[uint32]name
}

type name struct {
	s  string
	at time.Time
}

// New is the method trusting keys.
func New(keys ...Trusted) *Method {
	m := &Method{keys: map[string]Trusted{}, now: time.Now, nonces: map[int64]map[[16]byte]struct{}{}, names: map[uint32]name{}}
	for _, t := range keys {
		m.keys[t.Key.ID] = t
	}
	return m
}

// Keys names the trusted keys (their ids), for the log.
func (m *Method) Keys() []string {
	var ids []string
	for id := range m.keys {
		ids = append(ids, id)
	}
	return ids
}

func refused(reason string) error {
	return kerr.New(kerr.Unauthenticated, "", "", "gateway assertion refused: "+reason)
}

// Authenticate implements auth.Authenticator: it applies to a request
// with an assertion (auth.Request.Gateway).
func (m *Method) Authenticate(_ context.Context, r *auth.Request) (auth.Principal, bool, error) {
	if r.Gateway == "" {
		return auth.Principal{}, false, nil
	}
	parts := strings.Split(r.Gateway, ".")
	if len(parts) != 4 || parts[0] != version {
		return auth.Nobody, true, refused("not a gateway assertion (" + version + ".KID.CLAIMS.MAC)")
	}
	kid := parts[1]
	t, ok := m.keys[kid]
	if !ok {
		return auth.Nobody, true, refused(fmt.Sprintf("signed with key %.32q, which this instance does not trust as a gateway's (see --gateway-key)", kid))
	}
	mac, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || !hmac.Equal(mac, t.Key.mac(r.Gateway[:len(r.Gateway)-len(parts[3])-1])) {
		return auth.Nobody, true, refused("bad signature: not made with gateway key " + kid)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[2])
	var c claims
	var nonce [16]byte
	if err != nil || json.Unmarshal(payload, &c) != nil || len(c.Nonce) != 2*len(nonce) {
		return auth.Nobody, true, refused("malformed claims")
	}
	if _, err := hex.Decode(nonce[:], []byte(c.Nonce)); err != nil {
		return auth.Nobody, true, refused("malformed claims")
	}
	if c.Req != r.Target {
		return auth.Nobody, true, refused(fmt.Sprintf("made for request %q, not for this one", c.Req))
	}
	now := m.now()
	at := time.UnixMilli(c.Time)
	if d := now.Sub(at); d > Window || d < -Window {
		return auth.Nobody, true, refused(fmt.Sprintf("made at %s, %v from this server's clock (allowed: %v; are the clocks in sync?)",
			at.UTC().Format(time.RFC3339), d.Round(time.Second), Window))
	}
	if !m.fresh(nonce, at, now) {
		return auth.Nobody, true, refused("replayed (its nonce was seen before)")
	}
	if len(c.Groups) > maxGroups {
		return auth.Nobody, true, refused(fmt.Sprintf("%d groups, at most %d", len(c.Groups), maxGroups))
	}
	if c.UID == 0 && !t.NoRootSquash {
		p := auth.Nobody
		p.Method = "gateway"
		return p, true, nil
	}
	groups := c.Groups
	if groups == nil {
		groups = []uint32{}
	}
	return auth.Principal{UID: c.UID, GID: c.GID, Groups: groups, Name: m.nameOf(c.UID, now), Method: "gateway"}, true, nil
}

// fresh records nonce, of an assertion made at, and reports whether it
// was not seen before. Nonces are kept by the window (of Window's
// length) their assertion expires in, until that window is over: one
// map lookup, and old nonces go a window at a time. Nonces are random
// 128-bit numbers, so one set serves every key; at 10 000 requests a
// second the sets hold at most 600 000 of them (18 MiB, measured).
func (m *Method) fresh(nonce [16]byte, at, now time.Time) bool {
	w := at.Add(Window).UnixNano() / int64(Window)
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.nonces {
		if k < now.UnixNano()/int64(Window) {
			delete(m.nonces, k)
		}
	}
	set := m.nonces[w]
	if set == nil {
		set = map[[16]byte]struct{}{}
		m.nonces[w] = set
	}
	if _, seen := set[nonce]; seen {
		return false
	}
	set[nonce] = struct{}{}
	return true
}

// nameTTL is how long a uid's account name is reused.
const nameTTL = 30 * time.Second

// nameOf is the server's local account name of uid (its number when it
// has none).
func (m *Method) nameOf(uid uint32, now time.Time) string {
	m.mu.Lock()
	n, ok := m.names[uid]
	m.mu.Unlock()
	if ok && now.Sub(n.at) < nameTTL {
		return n.s
	}
	s := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(s); err == nil {
		s = u.Username
	}
	m.mu.Lock()
	if len(m.names) > 4096 {
		clear(m.names)
	}
	m.names[uid] = name{s, now}
	m.mu.Unlock()
	return s
}

package nsapi

import "time"

// Whoami is who the server thinks the client is, and how it knows.
type Whoami struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	Name   string   `json:"name"`
	Method string   `json:"method"`
	Scopes []string `json:"scopes,omitempty"` // a token's: "read:/p", "create:/p", "modify:/p"
	FQANs  []string `json:"fqans,omitempty"`  // a grid proxy's VOMS attributes, the primary first
}

// TokenRequest is what `kaon token issue` asks for: a bearer token of the
// server's own issuer (root only).
type TokenRequest struct {
	User     string   `json:"user"`               // local user name or uid the token acts as ("": the caller)
	Paths    []string `json:"paths,omitempty"`    // absolute namespace paths
	Scopes   []string `json:"scopes,omitempty"`   // storage.read, storage.create, storage.modify, read, write
	Audience []string `json:"audience,omitempty"` // default: the issuer's URL
	TTL      Duration `json:"ttl"`
}

// Token is an issued bearer token.
type Token struct {
	Token string `json:"token"`
}

// TokenKey is one of the instance's token signing keys.
type TokenKey struct {
	KID     string     `json:"kid"`
	Created time.Time  `json:"created,omitzero"`
	Retired *time.Time `json:"retired,omitempty"`
	Next    bool       `json:"next,omitempty"` // published, signs after the next rotation
}

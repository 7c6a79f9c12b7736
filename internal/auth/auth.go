// Package auth says who a request comes from. Front ends collect what
// they know of a client (its connection, a bearer token, a certificate)
// into a Request; an Authenticator turns it into a Principal; the
// namespace service authorizes the Principal, once, for every protocol.
//
// Authenticators are tried in order (Chain); one that does not apply to a
// request (no token, not a loopback peer) passes; if none applies the
// client is Nobody. One that applies and fails refuses the request: a
// client that sent a bad token is not quietly treated as anonymous.
package auth

import (
	"context"
	"crypto/x509"
	"net"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Principal is an authenticated client.
type Principal struct {
	UID, GID uint32
	Groups   []uint32
	Name     string // user name, or the token subject
	Method   string // how it was authenticated: "unix", "none", ...
	// Scopes restrict what the principal may do, whatever its identity
	// allows (a bearer token's storage.read:/p ...): nil means no
	// restriction, an empty list means nothing at all.
	Scopes []Scope
	// Capability says Scopes authorize by themselves (the capability
	// strategy of an issuer configured with ,authz=capability): what they
	// allow on their paths needs no mode bit or ACL of the identity, which
	// only owns what the principal creates. Without it the identity's mode
	// bits and ACLs decide and scopes only narrow.
	Capability bool
	// FQANs are the VOMS attributes of a grid proxy (verified, the
	// primary first): what the user may do as a member of a virtual
	// organisation, beside the local identity they map to.
	FQANs []string
	// Host is the client's address (IP) as its connection shows it, and
	// Subject the bearer token's subject ("" without a token): what
	// access rules name besides the identity (nsserver, kaon access).
	Host    string
	Subject string
	// DN is the certificate subject a grid-mapfile mapped to this user
	// (x509, gsi; "" otherwise): a macaroon it mints carries it, so the
	// macaroon dies with the DN's grid-mapfile line.
	DN string
}

// Operations a scope allows.
const (
	ScopeRead   = "read"   // read data and metadata, list
	ScopeCreate = "create" // upload new files, make directories; no overwrite, no delete
	ScopeModify = "modify" // change data: create, overwrite, delete, rename, set attributes
)

// Scope allows one operation below one path (whole path components:
// /foo covers /foo/bar, not /foobar).
type Scope struct {
	Op   string
	Path string // absolute and clean
}

// Covers reports whether base covers clean absolute path p.
func Covers(base, p string) bool {
	return base == "/" || p == base || strings.HasPrefix(p, base+"/")
}

// Allows reports whether p's scopes allow op on clean path path. Modify
// includes create.
func (p Principal) Allows(op, path string) bool {
	if p.Scopes == nil {
		return true
	}
	for _, s := range p.Scopes {
		if Covers(s.Path, path) && (s.Op == op || (op == ScopeCreate && s.Op == ScopeModify)) {
			return true
		}
	}
	return false
}

// Authz names the rule that authorizes p: "capability" (its token's
// scopes alone), "identity+scopes" (its identity's mode bits and ACLs,
// narrowed by its scopes) or "identity".
func (p Principal) Authz() string {
	switch {
	case p.Scopes != nil && p.Capability:
		return "capability"
	case p.Scopes != nil:
		return "identity+scopes"
	}
	return "identity"
}

// Nobody is the identity of clients Kaon cannot authenticate.
var Nobody = Principal{UID: 65534, GID: 65534, Name: "nobody", Method: "none"}

// Root is the identity of Kaon's own services acting on their behalf.
var Root = Principal{Name: "root", Method: "internal"}

// IsRoot reports whether p is the superuser.
func (p Principal) IsRoot() bool { return p.UID == 0 }

// RequireAdmin refuses what is for the admin role only (administration,
// and what tells about the instance rather than about files: its servers,
// disks, status, metrics) to anyone but root without token scopes: a
// token is never good for administration, whoever it maps to.
func RequireAdmin(p Principal, op string) error {
	switch {
	case p.Scopes != nil:
		return kerr.New(kerr.Permission, op, "", "not allowed with a scoped token")
	case !p.IsRoot():
		return kerr.New(kerr.Permission, op, "", "root only")
	}
	return nil
}

// Request is what a front end knows about a client.
type Request struct {
	Remote, Local net.Addr // the connection
	Bearer        string   // a bearer token, if the client sent one
	// Certs is the client's certificate chain from the TLS handshake, leaf
	// first: the handshake proved the client holds the leaf's key; the
	// chain itself is verified by the x509 method (proxies included).
	Certs []*x509.Certificate
	Login string // the name the client claims (display only)
	// Kerberos is a Kerberos credential: the AP-REQ of root://'s krb5, or
	// the GSS-API token of an https "Authorization: Negotiate" (SPNEGO
	// or a bare krb5 token); the krb5 method verifies it.
	Kerberos []byte
	// TLS says the connection is TLS (https, or root:// after the TLS
	// upgrade); a bearer credential without it travelled in the clear.
	TLS bool
	// Admin says the request is for the admin API (HostRoot applies only
	// there).
	Admin bool
	// Gateway is a gateway's assertion of the identity the request is
	// made for (the Kaon-Gateway header, auth/gateway), and Target the
	// request it came on ("METHOD REQUEST-URI"), which it must name.
	Gateway, Target string
}

// Authenticator is one authentication method.
type Authenticator interface {
	// Authenticate returns the principal and true when the method applies
	// to r, false when it does not (the next method is tried), or an
	// error when it applies and fails.
	Authenticate(ctx context.Context, r *Request) (Principal, bool, error)
}

// BearerMethod is an Authenticator of bearer credentials (tokens,
// macaroons): front ends look at a request's bearer credential only when
// the chain has one.
type BearerMethod interface {
	Authenticator
	TakesBearer()
}

// Challenger is an Authenticator whose credential HTTP clients send only
// when asked: a 401 names its scheme ("Negotiate") in WWW-Authenticate.
type Challenger interface {
	Authenticator
	Challenge() string
}

// Chain tries authenticators in order; a request none applies to is Nobody.
type Chain []Authenticator

// Authenticate implements the chain.
func (c Chain) Authenticate(ctx context.Context, r *Request) (Principal, error) {
	for _, a := range c {
		p, ok, err := a.Authenticate(ctx, r)
		if err != nil {
			c.refused(a, err)
			return Nobody, err
		}
		if ok {
			p.Host = hostOf(r.Remote)
			return p, nil
		}
	}
	p := Nobody
	p.Host = hostOf(r.Remote)
	return p, nil
}

// hostOf is the IP of a connection's remote address ("" if none).
func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}

type protocolKey struct{}

// WithProtocol records in ctx which front end a request came through
// ("http", "root", ...), for the audit log.
func WithProtocol(ctx context.Context, proto string) context.Context {
	return context.WithValue(ctx, protocolKey{}, proto)
}

// Protocol is the front end recorded by WithProtocol ("internal" if none).
func Protocol(ctx context.Context) string {
	if p, ok := ctx.Value(protocolKey{}).(string); ok {
		return p
	}
	return "internal"
}

// RefusePlaintextBearer heads the chain of an instance that takes bearer
// credentials (tokens, macaroons, and Kerberos as HTTP Negotiate) over TLS
// only: one that travelled in plaintext is a leaked credential, refused
// rather than used. An HTTP Negotiate token is bound to no connection:
// whoever reads it presents it first (the replay cache then refuses the
// owner). root://'s krb5 in plaintext passes, as in XRootD: its AP-REQ
// authenticates the session it came on.
type RefusePlaintextBearer struct{}

// Authenticate implements Authenticator.
func (RefusePlaintextBearer) Authenticate(ctx context.Context, r *Request) (Principal, bool, error) {
	switch {
	case r.TLS:
	case r.Bearer != "":
		return Nobody, true, kerr.New(kerr.Permission, "", "", "a bearer token over plaintext is refused (this instance takes tokens over TLS only: use https, roots://)")
	case len(r.Kerberos) > 0 && Protocol(ctx) == "http":
		return Nobody, true, kerr.New(kerr.Permission, "", "", "Kerberos (Negotiate) over plaintext http is refused (this instance takes it over TLS only: use https)")
	}
	return Principal{}, false, nil
}

// Refuse ends a chain that admits no anonymous client: it applies to
// every request the methods before it did not take, and refuses it with
// Reason ("a bearer token is required").
type Refuse struct{ Reason string }

// Authenticate implements Authenticator.
func (r Refuse) Authenticate(context.Context, *Request) (Principal, bool, error) {
	return Nobody, true, kerr.New(kerr.Unauthenticated, "", "", r.Reason)
}

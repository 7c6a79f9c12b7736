package nsserver

import (
	"context"
	"strings"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/token"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Kaon's own bearer tokens. Who may have one is decided here: only root,
// and never through a scoped principal (a token cannot mint tokens),
// issues tokens and rotates the signing key. A token acts as one local
// user other than root, for the operations and paths it names, for at
// most the issuer's MaxTTL. Each issue and rotation is one audit line
// (never the token itself).

// IssueToken signs a token for r.
func (s *Server) IssueToken(ctx context.Context, p auth.Principal, r nsapi.TokenRequest) (tok string, err error) {
	what := strings.Join(r.Scopes, ",") + ":" + strings.Join(r.Paths, ",")
	defer func() { err = s.audit(ctx, p, "token issue", what, "user "+r.User, err) }()
	if err := requireRoot(p, "token issue"); err != nil {
		return "", err
	}
	if s.cfg.Tokens == nil {
		return "", kerr.New(kerr.Unsupported, "token issue", "", "this server issues no tokens")
	}
	if r.User == "" {
		r.User = p.Name
	}
	u, err := token.LocalUser(r.User)
	if err != nil {
		return "", kerr.New(kerr.Invalid, "token issue", r.User, err.Error()+"; name the user the token acts as (--user)")
	}
	if len(r.Paths) == 0 || len(r.Scopes) == 0 {
		return "", kerr.New(kerr.Invalid, "token issue", "", "need at least one --path and one --scope")
	}
	var scopes []string
	for _, sc := range r.Scopes {
		if !token.KnownScope(sc) {
			return "", kerr.New(kerr.Invalid, "token issue", sc, "unknown scope (want one of "+strings.Join(token.ScopeNames, ", ")+")")
		}
		for _, raw := range r.Paths {
			cp, err := nsapi.CleanPath(raw)
			if err != nil || cp != raw && cp+"/" != raw {
				return "", kerr.New(kerr.Invalid, "token issue", raw, "want an absolute path without . or .. components")
			}
			scopes = append(scopes, token.ScopeString(sc, cp))
		}
	}
	tok, err = s.cfg.Tokens.Issue(token.IssueRequest{Subject: u.Name, Scopes: scopes, Audience: r.Audience, TTL: r.TTL.Duration()})
	if err != nil {
		return "", kerr.New(kerr.Invalid, "token issue", what, err.Error())
	}
	return tok, nil
}

// RotateTokenKey makes a new signing key; tokens of the previous one stay
// valid until they expire. It returns the new key's id.
func (s *Server) RotateTokenKey(ctx context.Context, p auth.Principal) (kid string, err error) {
	defer func() { err = s.audit(ctx, p, "token rotate", "", kid, err) }()
	if err := requireRoot(p, "token rotate"); err != nil {
		return "", err
	}
	if s.cfg.Tokens == nil {
		return "", kerr.New(kerr.Unsupported, "token rotate", "", "this server issues no tokens")
	}
	kid, err = s.cfg.Tokens.Rotate()
	if err != nil {
		return "", kerr.Wrap(kerr.IO, "token rotate", "", err)
	}
	return kid, nil
}

// TokenKeys lists the signing keys, with when they were made and retired
// (admin only; the public keys themselves are published: the JWKS).
func (s *Server) TokenKeys(_ context.Context, p auth.Principal) ([]nsapi.TokenKey, error) {
	if err := requireRoot(p, "token keys"); err != nil || s.cfg.Tokens == nil {
		return nil, err
	}
	var out []nsapi.TokenKey
	for _, k := range s.cfg.Tokens.Keys() {
		out = append(out, nsapi.TokenKey{KID: k.KID, Created: k.Created, Retired: k.Retired, Next: k.Next})
	}
	return out, nil
}

// TokenIssuer is this instance's issuer (nil: none), whose public
// metadata and keys the front ends publish.
func (s *Server) TokenIssuer() *token.Issuer { return s.cfg.Tokens }

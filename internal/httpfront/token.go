package httpfront

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/gateway"
	"github.com/kaon-storage/kaon/internal/auth/token"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Bearer tokens reach the namespace endpoint in the Authorization header
// or, for clients that cannot set headers, as ?authz=Bearer%20TOKEN
// (XRootD's HTTP convention). takeBearer removes the query parameter from
// the request's URL before anything below sees it, so no log line, error
// message or redirect can carry it.

type bearerKey struct{}

// takeBearer returns r with its bearer token (if any) moved into its
// context.
func takeBearer(r *http.Request) *http.Request {
	tok := bearerOf(r.Header.Get("Authorization"))
	if strings.Contains(r.URL.RawQuery, "authz") {
		q := r.URL.Query()
		if v, ok := q["authz"]; ok {
			if tok == "" && len(v) > 0 {
				tok = bearerOf(v[0])
			}
			q.Del("authz")
			u := *r.URL
			u.RawQuery = q.Encode()
			r = r.Clone(r.Context())
			r.URL, r.RequestURI = &u, u.RequestURI()
			r.Form, r.PostForm = nil, nil
		}
	}
	if tok == "" {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), bearerKey{}, tok))
}

// bearerOf is the token of an Authorization value "Bearer TOKEN".
func bearerOf(v string) string {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(rest)
}

// bearer is the token takeBearer found in r ("" if none).
func bearer(r *http.Request) string {
	t, _ := r.Context().Value(bearerKey{}).(string)
	return t
}

// serveWellKnown publishes this instance's token issuer metadata and
// keys, so other services (another Kaon, xrootd's SciTokens plugin) can
// verify its tokens; false when r is not for them.
func (f *Namespace) serveWellKnown(w http.ResponseWriter, r *http.Request) bool {
	is := f.NS.TokenIssuer()
	if is == nil || (r.URL.Path != token.DiscoveryPath && r.URL.Path != token.JWKSPath) {
		return false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, r.URL.Path+": method not allowed", http.StatusMethodNotAllowed)
		return true
	}
	w.Header().Set("Cache-Control", "max-age=600")
	if r.URL.Path == token.DiscoveryPath {
		writeJSON(w, is.Discovery())
	} else {
		writeJSON(w, is.JWKS())
	}
	return true
}

// authError is a failed authentication of a request for path p: a copy
// (the connection's error is shared by its requests) naming method and
// path when the error names no object of its own.
func authError(err error, method, p string) error {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return err
	}
	c := *ke
	if c.Op == "" {
		c.Op = method
	}
	if c.Path == "" {
		c.Path = p
	}
	return &c
}

// acceptsGateway says whether chain takes gateways' assertions; without
// the gateway method the header is ignored, whoever sends it.
func acceptsGateway(chain auth.Chain) bool {
	for _, a := range chain {
		if _, ok := a.(*gateway.Method); ok {
			return true
		}
	}
	return false
}

// acceptsTokens says whether chain has a method of bearer credentials
// (tokens, macaroons); without one a bearer credential is ignored and the
// connection's authentication (cached) applies.
func acceptsTokens(chain auth.Chain) bool {
	for _, a := range chain {
		if _, ok := a.(auth.BearerMethod); ok {
			return true
		}
	}
	return false
}

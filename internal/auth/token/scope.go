package token

import (
	"path"
	"strings"

	"github.com/kaon-storage/kaon/internal/auth"
)

// Scope names a token may carry, WLCG profile and SciTokens 2.0 forms,
// and the operation each allows (auth.Scope*). write (SciTokens) is
// modify, which includes create.
var scopeOps = map[string]string{
	"storage.read":   auth.ScopeRead,
	"storage.create": auth.ScopeCreate,
	"storage.modify": auth.ScopeModify,
	"read":           auth.ScopeRead,
	"write":          auth.ScopeModify,
}

// ScopeNames are the scope names Kaon understands (and issues).
var ScopeNames = []string{"storage.read", "storage.create", "storage.modify", "read", "write"}

// ParseScopes turns a token's scope claim (space-separated) into the
// principal's scopes. Paths are relative to the issuer's base path; a
// missing path is the base itself. Scopes Kaon does not know (openid,
// storage.stage, compute.*) allow nothing; a storage scope whose path is
// not absolute or holds "." or ".." components is dropped whole rather
// than cleaned into something its issuer did not write. The result is
// never nil: a token without a storage scope is allowed nothing.
func ParseScopes(claim, base string) []auth.Scope {
	out := []auth.Scope{}
	for _, s := range strings.Fields(claim) {
		name, p, hasPath := strings.Cut(s, ":")
		op, ok := scopeOps[name]
		if !ok {
			continue
		}
		if !hasPath || p == "" {
			p = "/"
		}
		full, ok := underBase(base, p)
		if !ok {
			continue
		}
		out = append(out, auth.Scope{Op: op, Path: full})
	}
	return out
}

// underBase joins scope path p below base, or false when p is not a
// plain absolute path.
func underBase(base, p string) (string, bool) {
	if !strings.HasPrefix(p, "/") {
		return "", false
	}
	for _, c := range strings.Split(p, "/") {
		if c == "." || c == ".." {
			return "", false
		}
	}
	if base == "" {
		base = "/"
	}
	return path.Join(base, p), true
}

// ScopeString is the claim form of scope name on path ("storage.read:/p").
func ScopeString(name, p string) string { return name + ":" + p }

// KnownScope reports whether name is a scope Kaon understands.
func KnownScope(name string) bool { _, ok := scopeOps[name]; return ok }

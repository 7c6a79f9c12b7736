package nsserver

import (
	"strings"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Authorization happens here, for every protocol: the token scopes (which
// only narrow what the identity may do) and what the namespace does not
// know (administration, content-derived metadata) are checked below; the
// namespace checks the identity's mode bits and ACLs wherever it walks or
// changes the tree (namespace/access.go).

// caller is the namespace identity of a principal.
func caller(p auth.Principal) namespace.Caller {
	return namespace.Caller{UID: p.UID, GID: p.GID, Groups: p.Groups}
}

// canRead says whether p may read file n's content (and what is derived
// from it, such as checksums).
func (s *Server) canRead(p auth.Principal, n *namespace.Inode) bool {
	return s.ns.Permits(caller(p), n, namespace.Read)
}

// requireRoot allows administrative operations, and what tells about the
// instance, to the admin role only.
func requireRoot(p auth.Principal, op string) error { return auth.RequireAdmin(p, op) }

// scope refuses what p's token scopes do not allow: op on path. Scopes can
// only narrow what the identity may do (checked by the namespace after).
func scope(p auth.Principal, op, path, what string) error {
	if p.Scopes == nil {
		return nil
	}
	cp, err := nsapi.CleanPath(path)
	if err != nil {
		return kerr.WithOp(err, what)
	}
	if !p.Allows(op, cp) {
		return kerr.New(kerr.Permission, what, cp, "the token's scopes do not allow "+op+" here")
	}
	return nil
}

// scopeIno is scope for an inode-based request.
func (s *Server) scopeIno(p auth.Principal, op string, ino uint64, name, what string) error {
	if p.Scopes == nil {
		return nil
	}
	_, path, err := s.ns.ByID(ino)
	if err != nil {
		return err
	}
	if name != "" {
		path = strings.TrimSuffix(path, "/") + "/" + name
	}
	return scope(p, op, path, what)
}

// unrestricted refuses administrative requests from scoped principals: a
// token is never good for administration, whoever it maps to.
func unrestricted(p auth.Principal, what string) error {
	if p.Scopes != nil {
		return kerr.New(kerr.Permission, what, "", "not allowed with a scoped token")
	}
	return nil
}

package nsserver

import (
	"strings"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Authorization happens here, for every protocol. The namespace asks
// permits wherever it walks or changes the tree; operations the namespace
// does not know (administration, content-derived metadata) are checked by
// the service itself below.

// caller is the namespace identity of a principal.
func caller(p auth.Principal) namespace.Caller {
	return namespace.Caller{UID: p.UID, GID: p.GID, Groups: p.Groups}
}

// permits is the namespace's authorization hook for want on n, whose
// directory is dir (n itself for a directory): the POSIX mode bits, then
// the directory's ACLs, which add rights and deny deletion or update
// (namespace.ParseACL has the grammar). Root is never refused.
func (s *Server) permits(c namespace.Caller, n, dir *namespace.Inode, want uint32) bool {
	if c.UID == 0 {
		return true
	}
	grant, deny := namespace.ACLRights(c, dir)
	if want&deny != 0 {
		return false
	}
	// Each right asked for is granted by the mode bits or by the ACL.
	for r := uint32(1); r <= want; r <<= 1 {
		if want&r != 0 && grant&r == 0 && !namespace.ModeBits(c, n, dir, r) {
			return false
		}
	}
	return true
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

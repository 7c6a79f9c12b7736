package nsserver

import (
	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
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

// requireRoot allows administrative operations to root only.
func requireRoot(p auth.Principal, op string) error {
	if !p.IsRoot() {
		return kerr.New(kerr.Permission, op, "", "root only")
	}
	return nil
}

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

// permits is the namespace's authorization hook: POSIX mode bits.
func (s *Server) permits(c namespace.Caller, n *namespace.Inode, want uint32) bool {
	return namespace.ModeBits(c, n, want)
}

// canRead says whether p may read file n's content (and what is derived
// from it, such as checksums).
func (s *Server) canRead(p auth.Principal, n *namespace.Inode) bool {
	return s.permits(caller(p), n, namespace.Read)
}

// requireRoot allows administrative operations to root only.
func requireRoot(p auth.Principal, op string) error {
	if !p.IsRoot() {
		return kerr.New(kerr.Permission, op, "", "root only")
	}
	return nil
}

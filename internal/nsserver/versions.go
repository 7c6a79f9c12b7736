package nsserver

import (
	"context"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// Versions lists the versions kept of the file at path (sys.versioning),
// oldest first; each one's Name is its version id, readable at
// namespace.VersionsPath(path)/ID.
func (s *Server) Versions(ctx context.Context, p auth.Principal, path string) ([]*namespace.Inode, error) {
	if err := scope(p, auth.ScopeRead, path, "versions"); err != nil {
		return nil, s.refused(ctx, p, "versions", path, err)
	}
	vs, err := s.ns.Versions(caller(p), path)
	return vs, s.refused(ctx, p, "versions", path, err)
}

// RestoreVersion makes version id the content of the file at path again;
// the current content becomes a version. It needs what an overwrite
// needs, and read of the version.
func (s *Server) RestoreVersion(ctx context.Context, p auth.Principal, path, id string) (*namespace.Inode, error) {
	err := scope(p, auth.ScopeModify, path, "restore-version")
	if err == nil {
		err = scope(p, auth.ScopeRead, path, "restore-version")
	}
	var n *namespace.Inode
	if err == nil {
		n, err = s.ns.RestoreVersion(caller(p), path, id)
	}
	return n, s.audit(ctx, p, "restore-version", path, id, err)
}

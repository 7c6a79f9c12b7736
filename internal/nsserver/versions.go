package nsserver

import (
	"context"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Versions lists the versions kept of the file at path (sys.versioning),
// oldest first, each one readable at its Path.
func (s *Server) Versions(ctx context.Context, p auth.Principal, path string) ([]nsapi.Version, error) {
	if err := scope(p, auth.ScopeRead, path, "versions"); err != nil {
		return nil, s.refused(ctx, p, "versions", path, err)
	}
	vs, err := s.ns.Versions(caller(p), path)
	if err != nil {
		return nil, s.refused(ctx, p, "versions", path, err)
	}
	dir := namespace.VersionsPath(clean(path))
	out := []nsapi.Version{}
	for _, v := range vs {
		out = append(out, nsapi.Version{ID: v.Name, Path: dir + "/" + v.Name, Fid: v.ID, Size: v.Size,
			MTime: time.Unix(0, v.MTime), Checksums: v.Checksums})
	}
	return out, nil
}

// RestoreVersion makes version id the content of the file at path again;
// the current content becomes a version. It needs what an overwrite
// needs, and read of the version.
func (s *Server) RestoreVersion(ctx context.Context, p auth.Principal, path, id string) (nsapi.Entry, error) {
	err := scope(p, auth.ScopeModify, path, "restore-version")
	if err == nil {
		err = scope(p, auth.ScopeRead, path, "restore-version")
	}
	var n *namespace.Inode
	if err == nil {
		n, err = s.ns.RestoreVersion(caller(p), path, id)
	}
	if err = s.audit(ctx, p, "restore-version", path, id, err); err != nil {
		return nsapi.Entry{}, err
	}
	return entryOf(clean(path), n), nil
}

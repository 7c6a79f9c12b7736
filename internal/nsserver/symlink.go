package nsserver

import (
	"context"
	"errors"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Symbolic links. The namespace stores a link's target verbatim and
// never resolves it for stat, list, rm, mv (they act on the link, as
// lstat, unlink and rename(2) do); a FUSE mount hands links to the kernel,
// which follows them. Operations on a file's data named by a path — open
// (read or write), truncate, a touch that may replace — follow links
// here, once, for every front end (Follow): the path reached must be
// inside the namespace (a target's ".." stops at its root) and the
// caller must be allowed there, as if it had named that path itself (its
// token's scopes and the namespace's permissions are checked on the path
// reached, and on the path named).

// Symlink creates a symbolic link at path to target: what creating a
// file there needs (the create scope, write permission on the parent),
// one entry of quota.
func (s *Server) Symlink(ctx context.Context, p auth.Principal, target, path string) (nsapi.Entry, error) {
	if err := scope(p, auth.ScopeCreate, path, "symlink"); err != nil {
		return nsapi.Entry{}, s.audit(ctx, p, "symlink", path, target, err)
	}
	n, err := s.ns.Symlink(caller(p), target, path)
	if err = s.audit(ctx, p, "symlink", path, target, err); err != nil {
		return nsapi.Entry{}, err
	}
	return entryOf(clean(path), n), nil
}

// follow resolves the symbolic links of path for operation op (a scope)
// and returns the path reached and its inode (nil when missing); what
// names the operation in errors. The path named and the path reached
// both need op's scope.
func (s *Server) follow(p auth.Principal, op, path, what string) (string, *namespace.Inode, error) {
	if err := scope(p, op, path, what); err != nil {
		return "", nil, err
	}
	to, n, err := s.ns.Follow(caller(p), path)
	if err != nil {
		return "", nil, asOp(err, what)
	}
	if err := scope(p, op, to, what); err != nil {
		return "", nil, err
	}
	return to, n, nil
}

// asOp names op as err's operation (Follow's errors name "follow").
func asOp(err error, op string) error {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		ke.Op = op
	}
	return err
}

// Follow returns the entry path leads to, its symbolic links followed
// (Path: the path reached): a front end's stat (root:// kXR_stat, a
// WebDAV PROPFIND, an HTTP HEAD). A dangling link is NotFound, naming
// the link and the path it leads to.
func (s *Server) Follow(ctx context.Context, p auth.Principal, path string) (nsapi.Entry, error) {
	to, n, err := s.follow(p, auth.ScopeRead, path, "stat")
	switch {
	case err != nil:
		return nsapi.Entry{}, s.refused(ctx, p, "stat", path, err)
	case n == nil && to != clean(path):
		return nsapi.Entry{}, kerr.New(kerr.NotFound, "stat", path, "symbolic link to "+to+", which does not exist")
	case n == nil:
		return nsapi.Entry{}, kerr.New(kerr.NotFound, "stat", path, "no such file or directory")
	}
	return entryOf(to, n), nil
}

// ListFollowing lists the directory path leads to for a front end
// (root:// kXR_dirlist, a WebDAV PROPFIND, an HTML listing): a symbolic
// link in it is listed under its own name and path with what it leads
// to, so a client sees a file or a directory it can open; a link that
// leads nowhere it may go (dangling, a loop, refused) is listed as
// itself, a file of its target's length.
func (s *Server) ListFollowing(ctx context.Context, p auth.Principal, path string) ([]nsapi.Entry, error) {
	d, err := s.Follow(ctx, p, path)
	if err != nil {
		return nil, kerr.WithOp(err, "list")
	}
	ents, err := s.List(ctx, p, d.Path)
	if err != nil {
		return nil, err
	}
	for i, e := range ents {
		if !e.IsLink() {
			continue
		}
		// Not audited: a listing is not a request for what its links
		// lead to, so a link it may not follow is no refusal.
		if _, n, err := s.follow(p, auth.ScopeRead, e.Path, "list"); err == nil && n != nil {
			ents[i] = entryOf(e.Path, n)
			ents[i].Name = e.Name
		}
	}
	return ents, nil
}

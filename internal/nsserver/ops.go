package nsserver

import (
	"context"
	"fmt"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/movement"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Stat returns the entry at path.
func (s *Server) Stat(ctx context.Context, p auth.Principal, path string) (nsapi.Entry, error) {
	if err := scope(p, auth.ScopeRead, path, "stat"); err != nil {
		return nsapi.Entry{}, s.refused(ctx, p, "stat", path, err)
	}
	n, err := s.ns.Stat(caller(p), path)
	if err != nil {
		return nsapi.Entry{}, s.refused(ctx, p, "stat", path, err)
	}
	return entryOf(clean(path), n), nil
}

// List returns the entries of the directory at path with their
// attributes, sorted by name.
func (s *Server) List(ctx context.Context, p auth.Principal, path string) ([]nsapi.Entry, error) {
	if err := scope(p, auth.ScopeRead, path, "list"); err != nil {
		return nil, s.refused(ctx, p, "list", path, err)
	}
	ns, err := s.ns.List(caller(p), path)
	if err != nil {
		return nil, s.refused(ctx, p, "list", path, err)
	}
	return entriesOf(clean(path), ns), nil
}

// Lookup returns entry name of directory parent (without its path).
func (s *Server) Lookup(_ context.Context, p auth.Principal, parent uint64, name string) (nsapi.Entry, error) {
	if err := s.scopeIno(p, auth.ScopeRead, parent, name, "lookup"); err != nil {
		return nsapi.Entry{}, err
	}
	n, err := s.ns.Lookup(caller(p), parent, name)
	if err != nil {
		return nsapi.Entry{}, err
	}
	return entryOf("", n), nil
}

// GetAttr returns inode ino (without its path).
func (s *Server) GetAttr(_ context.Context, p auth.Principal, ino uint64) (nsapi.Entry, error) {
	if err := s.scopeIno(p, auth.ScopeRead, ino, "", "getattr"); err != nil {
		return nsapi.Entry{}, err
	}
	n, err := s.ns.GetAttr(caller(p), ino)
	if err != nil {
		return nsapi.Entry{}, err
	}
	return entryOf("", n), nil
}

// ReadDir returns the entries of directory ino with their attributes
// (without their paths).
func (s *Server) ReadDir(_ context.Context, p auth.Principal, ino uint64) ([]nsapi.Entry, error) {
	if err := s.scopeIno(p, auth.ScopeRead, ino, "", "list"); err != nil {
		return nil, err
	}
	ns, err := s.ns.ReadDir(caller(p), ino)
	if err != nil {
		return nil, err
	}
	return entriesOf("", ns), nil
}

// Mkdir creates a directory (with parents, missing ancestors too).
func (s *Server) Mkdir(ctx context.Context, p auth.Principal, path string, mode uint32, parents bool) error {
	if mode == 0 {
		mode = 0o755
	}
	if err := scope(p, auth.ScopeCreate, path, "mkdir"); err != nil {
		return s.audit(ctx, p, "mkdir", path, "", err)
	}
	return s.audit(ctx, p, "mkdir", path, "", s.ns.Mkdir(caller(p), path, mode, parents))
}

// Remove unlinks a file, a directory or a tree as o says.
func (s *Server) Remove(ctx context.Context, p auth.Principal, path string, o nsapi.RemoveOptions) error {
	if err := scope(p, auth.ScopeModify, path, "rm"); err != nil {
		return s.audit(ctx, p, "remove", path, "", err)
	}
	err := s.ns.Remove(caller(p), path, namespace.RemoveOptions{Dir: o.Dir, Any: o.Any, Recursive: o.Recursive})
	return s.audit(ctx, p, "remove", path, "", err)
}

// Rename moves from to to; replaced says whether something was there.
func (s *Server) Rename(ctx context.Context, p auth.Principal, from, to string, overwrite bool) (replaced bool, err error) {
	err = scope(p, auth.ScopeModify, from, "mv")
	if err == nil {
		err = scope(p, auth.ScopeCreate, to, "mv")
	}
	if err == nil && p.Scopes != nil && overwrite {
		if _, serr := s.ns.Stat(caller(p), to); serr == nil {
			err = scope(p, auth.ScopeModify, to, "mv")
		}
	}
	if err == nil {
		replaced, err = s.ns.Rename(caller(p), from, to, overwrite)
	}
	return replaced, s.audit(ctx, p, "rename", from, to, err)
}

// Chmod sets permission bits.
func (s *Server) Chmod(ctx context.Context, p auth.Principal, path string, mode uint32) error {
	if err := scope(p, auth.ScopeModify, path, "chmod"); err != nil {
		return s.audit(ctx, p, "chmod", path, "", err)
	}
	return s.audit(ctx, p, "chmod", path, "", s.ns.Chmod(caller(p), path, mode))
}

// SetMTime sets the modification time of path (mtime in unix ns), or
// the current time when now.
func (s *Server) SetMTime(ctx context.Context, p auth.Principal, path string, mtime int64, now bool) error {
	if err := scope(p, auth.ScopeModify, path, "utimes"); err != nil {
		return s.audit(ctx, p, "utimes", path, "", err)
	}
	return s.audit(ctx, p, "utimes", path, "", s.ns.SetMTime(caller(p), path, mtime, now))
}

// Chown sets owner and group.
func (s *Server) Chown(ctx context.Context, p auth.Principal, path string, uid, gid uint32) error {
	if err := unrestricted(p, "chown"); err != nil {
		return s.audit(ctx, p, "chown", path, "", err)
	}
	return s.audit(ctx, p, "chown", path, "", s.ns.Chown(caller(p), path, uid, gid))
}

// SetXAttr sets an extended attribute. sys.forced.space must name a
// space that exists (defined, or with filesystems).
func (s *Server) SetXAttr(ctx context.Context, p auth.Principal, path, name, value string) error {
	if err := scope(p, auth.ScopeModify, path, "attr set"); err != nil {
		return s.audit(ctx, p, "attr set "+name, path, "", err)
	}
	if (name == nsapi.AttrSpace || name == nsapi.AttrConvertSpace) && namespace.CheckSpaceName(value) == nil {
		if !s.reg.SpaceExists(value) {
			return s.audit(ctx, p, "attr set "+name, path, "", kerr.New(kerr.Invalid, "attr set", path,
				fmt.Sprintf("no space %q (kaon space define %s, or fs add --space %s)", value, value, value)))
		}
	}
	err := s.ns.SetXAttr(caller(p), path, name, value)
	if err == nil && movement.IsConvertAttr(name) {
		s.mv.KickPolicies()
	}
	return s.audit(ctx, p, "attr set "+name, path, "", err)
}

// RemoveXAttr removes an extended attribute.
func (s *Server) RemoveXAttr(ctx context.Context, p auth.Principal, path, name string) error {
	if err := scope(p, auth.ScopeModify, path, "attr rm"); err != nil {
		return s.audit(ctx, p, "attr rm "+name, path, "", err)
	}
	return s.audit(ctx, p, "attr rm "+name, path, "", s.ns.RemoveXAttr(caller(p), path, name))
}

// XAttrs lists the extended attributes of path.
func (s *Server) XAttrs(ctx context.Context, p auth.Principal, path string) ([][2]string, error) {
	if err := scope(p, auth.ScopeRead, path, "attr ls"); err != nil {
		return nil, s.refused(ctx, p, "attr ls", path, err)
	}
	a, err := s.ns.XAttrs(caller(p), path)
	return a, s.refused(ctx, p, "attr ls", path, err)
}

// Touch creates an empty file (or replaces a file by an empty one unless
// exclusive) in one step.
func (s *Server) Touch(ctx context.Context, p auth.Principal, path string, exclusive bool, mode uint32) (nsapi.Entry, error) {
	named := path
	if !exclusive { // a link in the way: its target is touched (symlink.go)
		to, _, err := s.ns.Follow(caller(p), path)
		if err != nil {
			return nsapi.Entry{}, s.audit(ctx, p, "create", path, "", asOp(err, "create"))
		}
		path = to
	}
	op := auth.ScopeCreate
	if p.Scopes != nil && !exclusive {
		if _, err := s.ns.Stat(caller(p), path); err == nil {
			op = auth.ScopeModify // replaces a file
		}
	}
	for _, sp := range []string{named, path} { // the path named and the path reached
		if err := scope(p, op, sp, "create"); err != nil {
			return nsapi.Entry{}, s.audit(ctx, p, "create", named, "", err)
		}
	}
	n, err := s.ns.CreateEmpty(caller(p), path, namespace.CreateOptions{Exclusive: exclusive, Mode: mode})
	if err = s.audit(ctx, p, "create", path, "", err); err != nil {
		return nsapi.Entry{}, err
	}
	return entryOf(clean(path), n), nil
}

// Truncate changes the size of a file in place (cutting it, or
// extending it with zeros): the file's next data version.
func (s *Server) Truncate(ctx context.Context, p auth.Principal, path string, size int64) (err error) {
	defer func() { err = s.audit(ctx, p, "truncate", path, "", err) }()
	to, n, err := s.follow(p, auth.ScopeModify, path, "truncate")
	if err != nil {
		return err
	}
	if n == nil {
		return kerr.New(kerr.NotFound, "truncate", path, "no such file or directory")
	}
	if n.IsDir {
		return kerr.New(kerr.IsDir, "truncate", path, "is a directory")
	}
	if size == n.Size {
		return nil
	}
	return s.truncate(ctx, p, to, n, size)
}

package nsserver

import (
	"context"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// Stat returns the inode at path.
func (s *Server) Stat(_ context.Context, p auth.Principal, path string) (*namespace.Inode, error) {
	return s.ns.Stat(caller(p), path)
}

// List returns the entries of the directory at path with their
// attributes, sorted by name.
func (s *Server) List(_ context.Context, p auth.Principal, path string) ([]*namespace.Inode, error) {
	return s.ns.List(caller(p), path)
}

// Lookup returns entry name of directory parent.
func (s *Server) Lookup(_ context.Context, p auth.Principal, parent uint64, name string) (*namespace.Inode, error) {
	return s.ns.Lookup(caller(p), parent, name)
}

// GetAttr returns inode ino.
func (s *Server) GetAttr(_ context.Context, p auth.Principal, ino uint64) (*namespace.Inode, error) {
	return s.ns.GetAttr(caller(p), ino)
}

// ReadDir returns the entries of directory ino with their attributes.
func (s *Server) ReadDir(_ context.Context, p auth.Principal, ino uint64) ([]*namespace.Inode, error) {
	return s.ns.ReadDir(caller(p), ino)
}

// Mkdir creates a directory (with parents, missing ancestors too).
func (s *Server) Mkdir(_ context.Context, p auth.Principal, path string, mode uint32, parents bool) error {
	if mode == 0 {
		mode = 0o755
	}
	return s.ns.Mkdir(caller(p), path, mode, parents)
}

// Remove unlinks a file, a directory or a tree as o says.
func (s *Server) Remove(_ context.Context, p auth.Principal, path string, o namespace.RemoveOptions) error {
	return s.ns.Remove(caller(p), path, o)
}

// Rename moves from to to; replaced says whether something was there.
func (s *Server) Rename(_ context.Context, p auth.Principal, from, to string, overwrite bool) (replaced bool, err error) {
	return s.ns.Rename(caller(p), from, to, overwrite)
}

// Chmod sets permission bits.
func (s *Server) Chmod(_ context.Context, p auth.Principal, path string, mode uint32) error {
	return s.ns.Chmod(caller(p), path, mode)
}

// Chown sets owner and group.
func (s *Server) Chown(_ context.Context, p auth.Principal, path string, uid, gid uint32) error {
	return s.ns.Chown(caller(p), path, uid, gid)
}

// SetXAttr sets an extended attribute.
func (s *Server) SetXAttr(_ context.Context, p auth.Principal, path, name, value string) error {
	return s.ns.SetXAttr(caller(p), path, name, value)
}

// RemoveXAttr removes an extended attribute.
func (s *Server) RemoveXAttr(_ context.Context, p auth.Principal, path, name string) error {
	return s.ns.RemoveXAttr(caller(p), path, name)
}

// XAttrs lists the extended attributes of path.
func (s *Server) XAttrs(_ context.Context, p auth.Principal, path string) ([][2]string, error) {
	return s.ns.XAttrs(caller(p), path)
}

// Touch creates an empty file (or replaces a file by an empty one unless
// exclusive) in one step.
func (s *Server) Touch(_ context.Context, p auth.Principal, path string, exclusive bool, mode uint32) (*namespace.Inode, error) {
	return s.ns.CreateEmpty(caller(p), path, namespace.CreateOptions{Exclusive: exclusive, Mode: mode})
}

// Truncate supports emptying a file (its data is queued for deletion):
// committed files are immutable, so other sizes are refused.
func (s *Server) Truncate(ctx context.Context, p auth.Principal, path string, size int64) error {
	n, err := s.ns.Stat(caller(p), path)
	if err != nil {
		return err
	}
	if n.IsDir {
		return kerr.New(kerr.IsDir, "truncate", path, "is a directory")
	}
	switch {
	case size == n.Size:
		return nil
	case size == 0:
		_, err := s.Touch(ctx, p, path, false, n.Mode)
		return err
	}
	return kerr.New(kerr.Unsupported, "truncate", path, "committed files are immutable; only truncation to 0 is supported")
}

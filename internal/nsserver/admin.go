package nsserver

import (
	"context"
	"fmt"
	pathpkg "path"
	"sort"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Filesystems lists the registry (`fs ls`), with the progress of drains
// (admin only: nodes, disk paths, uuids).
func (s *Server) Filesystems(_ context.Context, p auth.Principal) ([]nsapi.Filesystem, error) {
	if err := requireRoot(p, "fs ls"); err != nil {
		return nil, err
	}
	var out []nsapi.Filesystem
	for _, f := range s.reg.List() {
		out = append(out, filesystemOf(f, s.mv.DrainProgress(f)))
	}
	return out, nil
}

// FilesystemPaths lists where each filesystem's stripes live, for the
// direct path of a mount on a host the instance trusts: the admin, or a
// gateway (its host key authenticated it; the caller it asserts may be
// any user, even squashed root). Nothing about nodes, load or drains.
func (s *Server) FilesystemPaths(_ context.Context, p auth.Principal) ([]nsapi.FsPath, error) {
	if p.Method != "gateway" {
		if err := requireRoot(p, "fs paths"); err != nil {
			return nil, err
		}
	}
	var out []nsapi.FsPath
	for _, f := range s.reg.List() {
		out = append(out, nsapi.FsPath{ID: f.ID, Path: f.Path, UUID: f.UUID, NoBlockSums: f.NoBlockSums})
	}
	return out, nil
}

// AddFilesystem registers a new filesystem on a storage server node.
func (s *Server) AddFilesystem(ctx context.Context, p auth.Principal, nf nsapi.NewFilesystem) (f nsapi.Filesystem, err error) {
	defer func() { err = s.audit(ctx, p, "fs add", nf.Node+":"+nf.Path, "", err) }()
	if err := requireRoot(p, "fs add"); err != nil {
		return nsapi.Filesystem{}, err
	}
	add := fleet.NewFilesystem{Node: nf.Node, Path: nf.Path, Group: nf.Group, Space: nf.Space, IO: nf.IO, Location: nf.Location}
	if nf.ObjectSize != "" {
		if add.ObjectSize, err = nsapi.ParseSize(nf.ObjectSize); err != nil {
			return nsapi.Filesystem{}, kerr.New(kerr.Invalid, "fs add", nf.ObjectSize, err.Error())
		}
	}
	added, err := s.reg.Add(add)
	if err != nil {
		return nsapi.Filesystem{}, err
	}
	return filesystemOf(added, nil), nil
}

// ConfigFilesystem sets a filesystem key (configstatus, group).
func (s *Server) ConfigFilesystem(ctx context.Context, p auth.Principal, id uint32, key, value string) error {
	what := fmt.Sprintf("fs %d %s=%s", id, key, value)
	if err := requireRoot(p, "fs config"); err != nil {
		return s.audit(ctx, p, "fs config", what, "", err)
	}
	err := s.reg.Config(id, key, value)
	if err == nil {
		s.mv.SettingsChanged()
	}
	return s.audit(ctx, p, "fs config", what, "", err)
}

// ReinitFilesystem lets the storage server create filesystem id anew.
func (s *Server) ReinitFilesystem(ctx context.Context, p auth.Principal, id uint32) error {
	what := fmt.Sprintf("fs %d", id)
	if err := requireRoot(p, "fs reinit"); err != nil {
		return s.audit(ctx, p, "fs reinit", what, "", err)
	}
	return s.audit(ctx, p, "fs reinit", what, "", s.reg.Reinit(id))
}

// FileInfo returns a file's entry with its stripes; where they are (node,
// physical path) only to the admin.
func (s *Server) FileInfo(_ context.Context, p auth.Principal, path string) (nsapi.Entry, error) {
	if err := scope(p, auth.ScopeRead, path, "file info"); err != nil {
		return nsapi.Entry{}, err
	}
	n, err := s.ns.Stat(caller(p), path)
	if err != nil {
		return nsapi.Entry{}, err
	}
	out := entryOf(clean(path), n)
	if n.IsDir {
		return out, nil
	}
	admin := requireRoot(p, "file info") == nil
	for i, fsid := range n.Locations {
		st := nsapi.Stripe{Index: i, FsID: fsid}
		if fs, ok := s.reg.Filesystem(fsid); ok && admin {
			st.Node = s.reg.Node(fsid).HTTP
			if s.phys != nil {
				st.PhysPath = s.phys(fs, n.ID)
			}
		}
		out.Stripes = append(out.Stripes, st)
	}
	return out, nil
}

// Locate returns the storage servers holding the file at path.
func (s *Server) Locate(ctx context.Context, p auth.Principal, path string) ([]nsapi.Node, error) {
	_, n, err := s.follow(p, auth.ScopeRead, path, "locate")
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, kerr.New(kerr.NotFound, "locate", path, "no such file or directory")
	}
	if n.IsDir {
		return nil, kerr.New(kerr.IsDir, "locate", path, "is a directory")
	}
	seen := map[string]bool{}
	var out []nsapi.Node
	for _, fsid := range n.Locations {
		if nd := s.reg.Node(fsid); nd.Name != "" && !seen[nd.Name] {
			seen[nd.Name] = true
			out = append(out, nodeOf(nd))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// StatFS sums the writable filesystems of the space new files below path
// go to (its directory's sys.forced.space), each backend once.
func (s *Server) StatFS(_ context.Context, p auth.Principal, path string) (nsapi.SpaceStats, error) {
	if err := scope(p, auth.ScopeRead, path, "statfs"); err != nil {
		return nsapi.SpaceStats{}, err
	}
	n, err := s.ns.Stat(caller(p), path)
	if err != nil {
		return nsapi.SpaceStats{}, err
	}
	if !n.IsDir { // a file: the space of its directory
		if n, err = s.ns.Stat(caller(p), pathpkg.Dir(path)); err != nil {
			return nsapi.SpaceStats{}, err
		}
	}
	st := nsapi.SpaceStats{Space: fleet.DefaultSpace}
	if sp := n.XAttrs[nsapi.AttrSpace]; sp != "" {
		st.Space = sp
	}
	seen := map[string]bool{}
	for _, f := range s.reg.List() {
		if f.BootStatus != "booted" || f.ConfigStatus != "rw" || f.Space != st.Space {
			continue
		}
		st.Filesystems++
		if b := f.BackendID(); !seen[b] {
			seen[b] = true
			st.Total += f.Capacity
			free := f.Capacity - min(f.Used, f.Capacity)
			st.Free += free
			st.MaxFree = max(st.MaxFree, free)
		}
	}
	return st, nil
}

package nsserver

import (
	"context"
	"fmt"
	pathpkg "path"
	"sort"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// Filesystems lists the registry (`fs ls`), with the progress of drains
// (admin only: nodes, disk paths, uuids).
func (s *Server) Filesystems(_ context.Context, p auth.Principal) ([]FsState, error) {
	if err := requireRoot(p, "fs ls"); err != nil {
		return nil, err
	}
	fss := s.reg.List()
	out := make([]FsState, 0, len(fss))
	for _, f := range fss {
		out = append(out, FsState{FsState: f, DrainProgress: s.mv.DrainProgress(f)})
	}
	return out, nil
}

// AddFilesystem registers a new filesystem on a storage server node.
func (s *Server) AddFilesystem(ctx context.Context, p auth.Principal, nf NewFilesystem) (f FsState, err error) {
	defer func() { err = s.audit(ctx, p, "fs add", nf.Node+":"+nf.Path, "", err) }()
	if err := requireRoot(p, "fs add"); err != nil {
		return FsState{}, err
	}
	added, err := s.reg.Add(nf)
	return FsState{FsState: added}, err
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

// Stripe describes one physical file of a logical file.
type Stripe struct {
	Index    int
	FsID     uint32
	Node     string // storage server data endpoint (admin only)
	PhysPath string // as the filesystem's backend names it (admin only)
}

// FileInfo returns a file's inode and its stripes; where they are (node,
// physical path) only to the admin.
func (s *Server) FileInfo(_ context.Context, p auth.Principal, path string) (*namespace.Inode, []Stripe, error) {
	if err := scope(p, auth.ScopeRead, path, "file info"); err != nil {
		return nil, nil, err
	}
	n, err := s.ns.Stat(caller(p), path)
	if err != nil || n.IsDir {
		return n, nil, err
	}
	admin := requireRoot(p, "file info") == nil
	var out []Stripe
	for i, fsid := range n.Locations {
		st := Stripe{Index: i, FsID: fsid}
		if fs, ok := s.reg.Filesystem(fsid); ok && admin {
			st.Node = s.reg.Node(fsid).HTTP
			if s.phys != nil {
				st.PhysPath = s.phys(fs, n.ID)
			}
		}
		out = append(out, st)
	}
	return n, out, nil
}

// Locate returns the storage servers holding the file at path.
func (s *Server) Locate(ctx context.Context, p auth.Principal, path string) ([]Node, error) {
	if err := scope(p, auth.ScopeRead, path, "locate"); err != nil {
		return nil, err
	}
	n, err := s.ns.Stat(caller(p), path)
	if err != nil {
		return nil, err
	}
	if n.IsDir {
		return nil, kerr.New(kerr.IsDir, "locate", path, "is a directory")
	}
	seen := map[string]bool{}
	var out []Node
	for _, fsid := range n.Locations {
		if nd := s.reg.Node(fsid); nd.Name != "" && !seen[nd.Name] {
			seen[nd.Name] = true
			out = append(out, nd)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// SpaceStats is the capacity behind a path (for statfs-like requests).
type SpaceStats struct {
	Space       string
	Total, Free uint64
	MaxFree     uint64 // the largest free space on one filesystem
	Filesystems int
}

// StatFS sums the writable filesystems of the space new files below path
// go to (its directory's sys.forced.space), each backend once.
func (s *Server) StatFS(_ context.Context, p auth.Principal, path string) (SpaceStats, error) {
	if err := scope(p, auth.ScopeRead, path, "statfs"); err != nil {
		return SpaceStats{}, err
	}
	n, err := s.ns.Stat(caller(p), path)
	if err != nil {
		return SpaceStats{}, err
	}
	if !n.IsDir { // a file: the space of its directory
		if n, err = s.ns.Stat(caller(p), pathpkg.Dir(path)); err != nil {
			return SpaceStats{}, err
		}
	}
	st := SpaceStats{Space: fleet.DefaultSpace}
	if sp := n.XAttrs[namespace.AttrSpace]; sp != "" {
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

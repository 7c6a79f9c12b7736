package nsserver

import (
	"context"
	"fmt"
	"sort"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// Filesystems lists the registry (`fs ls`).
func (s *Server) Filesystems(context.Context, auth.Principal) []FsState { return s.reg.list() }

// AddFilesystem registers a new filesystem on a storage server node.
func (s *Server) AddFilesystem(ctx context.Context, p auth.Principal, nodeName, path, group string) (f FsState, err error) {
	defer func() { err = s.audit(ctx, p, "fs add", nodeName+":"+path, "", err) }()
	if err := requireRoot(p, "fs add"); err != nil {
		return FsState{}, err
	}
	if nodeName == "" || path == "" || path[0] != '/' {
		return FsState{}, kerr.New(kerr.Invalid, "fs add", nodeName+":"+path, "need a node and an absolute path")
	}
	if group != "" && spaceOf(group) == "" {
		return FsState{}, kerr.New(kerr.Invalid, "fs add", group, "bad group name")
	}
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	if _, ok := s.reg.nodes[nodeName]; !ok {
		return FsState{}, kerr.New(kerr.NotFound, "fs add", nodeName, "no storage server with that node name has registered")
	}
	added, err := s.reg.addLocked(nodeName, path, group)
	if err != nil {
		return FsState{}, err
	}
	return *added, nil
}

// ConfigFilesystem sets a filesystem key (configstatus, group).
func (s *Server) ConfigFilesystem(ctx context.Context, p auth.Principal, id uint32, key, value string) error {
	what := fmt.Sprintf("fs %d %s=%s", id, key, value)
	if err := requireRoot(p, "fs config"); err != nil {
		return s.audit(ctx, p, "fs config", what, "", err)
	}
	return s.audit(ctx, p, "fs config", what, "", s.reg.config(id, key, value))
}

// ReinitFilesystem lets the storage server create filesystem id anew.
func (s *Server) ReinitFilesystem(ctx context.Context, p auth.Principal, id uint32) error {
	what := fmt.Sprintf("fs %d", id)
	if err := requireRoot(p, "fs reinit"); err != nil {
		return s.audit(ctx, p, "fs reinit", what, "", err)
	}
	return s.audit(ctx, p, "fs reinit", what, "", s.reg.reinit(id))
}

// SpaceState summarizes a space for `space ls`.
type SpaceState struct {
	Name        string
	Groups      int
	Filesystems int
	RW          int
	Booted      int
	Capacity    uint64
	Used        uint64
	Files       int64
}

// Spaces aggregates the registry per space.
func (s *Server) Spaces(context.Context, auth.Principal) []SpaceState {
	m := map[string]*SpaceState{}
	groups := map[string]map[string]bool{}
	for _, f := range s.reg.list() {
		sp := m[f.Space]
		if sp == nil {
			sp = &SpaceState{Name: f.Space}
			m[f.Space] = sp
			groups[f.Space] = map[string]bool{}
		}
		groups[f.Space][f.Group] = true
		sp.Filesystems++
		if f.ConfigStatus == "rw" {
			sp.RW++
		}
		if f.BootStatus == "booted" {
			sp.Booted++
		}
		sp.Capacity += f.Capacity
		sp.Used += f.Used
		sp.Files += f.Files
	}
	var out []SpaceState
	for name, sp := range m {
		sp.Groups = len(groups[name])
		out = append(out, *sp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Stripe describes one physical file of a logical file.
type Stripe struct {
	Index    int
	FsID     uint32
	Node     string // storage server data endpoint
	PhysPath string // as the filesystem's backend names it
}

// FileInfo returns a file's inode and its stripes.
func (s *Server) FileInfo(_ context.Context, p auth.Principal, path string) (*namespace.Inode, []Stripe, error) {
	if err := scope(p, auth.ScopeRead, path, "file info"); err != nil {
		return nil, nil, err
	}
	n, err := s.ns.Stat(caller(p), path)
	if err != nil || n.IsDir {
		return n, nil, err
	}
	var out []Stripe
	for i, fsid := range n.Locations {
		st := Stripe{Index: i, FsID: fsid, Node: s.reg.node(fsid).HTTP}
		if fs, ok := s.reg.filesystem(fsid); ok && s.phys != nil {
			st.PhysPath = s.phys(fs, n.ID)
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
		if nd := s.reg.node(fsid); nd.Name != "" && !seen[nd.Name] {
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

// StatFS sums the writable filesystems that can take files below path.
func (s *Server) StatFS(_ context.Context, p auth.Principal, path string) (SpaceStats, error) {
	if err := scope(p, auth.ScopeRead, path, "statfs"); err != nil {
		return SpaceStats{}, err
	}
	if _, err := s.ns.Stat(caller(p), path); err != nil {
		return SpaceStats{}, err
	}
	st := SpaceStats{Space: "default"}
	for _, f := range s.reg.list() {
		if f.BootStatus != "booted" || f.ConfigStatus != "rw" {
			continue
		}
		st.Filesystems++
		st.Total += f.Capacity
		free := f.Capacity - f.Used
		st.Free += free
		st.MaxFree = max(st.MaxFree, free)
	}
	return st, nil
}

package nsserver

import (
	"context"
	"fmt"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// The fleet's settings, as the service's configuration takes them
// (package fleet keeps the registry, spaces, placement and slow disks).

// SlowPolicy configures slow-disk detection.
type SlowPolicy = fleet.SlowPolicy

// Defaults of SlowPolicy.
const (
	DefaultSlowFactor = fleet.DefaultSlowFactor
	DefaultSlowMin    = fleet.DefaultSlowMin
)

// DefineSpace defines a space (`space define NAME`); defining one that
// exists is not an error.
func (s *Server) DefineSpace(ctx context.Context, p auth.Principal, name string) error {
	if err := requireRoot(p, "space define"); err != nil {
		return s.audit(ctx, p, "space define", name, "", err)
	}
	return s.audit(ctx, p, "space define", name, "", s.reg.DefineSpace(name))
}

// ConfigSpace sets a space's key (`space config NAME key=value`,
// fleet.Registry.ConfigSpace). The space is defined if it was not.
func (s *Server) ConfigSpace(ctx context.Context, p auth.Principal, name, key, value string) error {
	what := fmt.Sprintf("space %s %s=%s", name, key, value)
	if err := requireRoot(p, "space config"); err != nil {
		return s.audit(ctx, p, "space config", what, "", err)
	}
	return s.audit(ctx, p, "space config", what, "", s.reg.ConfigSpace(name, key, value))
}

// Spaces aggregates the registry per space, defined ones included (admin
// only).
func (s *Server) Spaces(_ context.Context, p auth.Principal) ([]nsapi.Space, error) {
	if err := requireRoot(p, "space ls"); err != nil {
		return nil, err
	}
	var out []nsapi.Space
	for _, sp := range s.reg.Spaces() {
		out = append(out, nsapi.Space(sp))
	}
	return out, nil
}

// StorageShares is what a WLCG Storage Resource Report (internal/srr)
// tells anyone: each space's capacity and use, and each project quota
// node's byte limit and use. No disk, node, user or group is named.
func (s *Server) StorageShares(context.Context) ([]nsapi.Space, []nsapi.Quota, error) {
	var spaces []nsapi.Space
	for _, sp := range s.reg.Spaces() {
		spaces = append(spaces, nsapi.Space{Name: sp.Name, Capacity: sp.Capacity, Used: sp.Used})
	}
	qs, err := s.ns.Quotas(namespace.Root, "/")
	if err != nil {
		return nil, nil, err
	}
	var projects []nsapi.Quota
	for _, q := range qs {
		for k, limit := range q.Limits {
			if k.Kind == namespace.QuotaProject {
				projects = append(projects, nsapi.Quota{Path: q.Path, Kind: nsapi.QuotaProject, LimitBytes: limit.Bytes, UsedBytes: q.Used[k].Bytes})
			}
		}
	}
	return spaces, projects, nil
}

// Dump streams the path of every file below path to fn, one at a time
// (namespace.Dump: Rucio's consistency checks); admin only, audited.
func (s *Server) Dump(ctx context.Context, p auth.Principal, path string, fn func(path string) error) error {
	if err := requireRoot(p, "ns dump"); err != nil {
		return err
	}
	return s.audit(ctx, p, "ns dump", path, "", s.ns.Dump(caller(p), path, fn))
}

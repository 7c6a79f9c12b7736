package nsserver

import (
	"context"
	"fmt"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/fleet"
)

// The fleet's vocabulary, as the service's callers use it (package fleet
// keeps the registry, spaces, placement and slow disks).
type (
	// Node is a storage server, as clients reach it.
	Node = fleet.Node
	// NewFilesystem is what `fs add` registers.
	NewFilesystem = fleet.NewFilesystem
	// SpaceState summarizes a space for `space ls`.
	SpaceState = fleet.SpaceState
	// SlowPolicy configures slow-disk detection.
	SlowPolicy = fleet.SlowPolicy
)

// FsState is a filesystem as operators see it in `fs ls`: its
// registration, what its storage server last reported, and its drain.
type FsState struct {
	fleet.FsState
	// DrainProgress is set while the filesystem drains or once drained
	// (Filesystems, DrainStatus).
	DrainProgress *DrainProgress
}

// DefaultSpace is where files go whose directory names no space.
const DefaultSpace = fleet.DefaultSpace

// Defaults of SlowPolicy.
const (
	DefaultSlowFactor = fleet.DefaultSlowFactor
	DefaultSlowMin    = fleet.DefaultSlowMin
)

// ParseSize reads a byte count with an optional binary suffix (K, M, G:
// 16M is 16 MiB).
func ParseSize(s string) (int64, error) { return fleet.ParseSize(s) }

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
func (s *Server) Spaces(_ context.Context, p auth.Principal) ([]SpaceState, error) {
	if err := requireRoot(p, "space ls"); err != nil {
		return nil, err
	}
	return s.reg.Spaces(), nil
}

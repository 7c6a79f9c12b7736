package nsserver

import (
	"context"
	"fmt"
	"strconv"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/movement"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// Data movement's calls (package movement schedules drains, balancers
// and conversions), and its vocabulary as the service's callers use it.
type (
	// DrainProgress is where the drain of one filesystem stands.
	DrainProgress = movement.DrainProgress
	// BalanceProgress is where the balancer of a group stands.
	BalanceProgress = movement.BalanceProgress
	// ConvertProgress is where the conversion policies stand.
	ConvertProgress = movement.ConvertProgress
	// MoveFailure is a stripe that could not be moved, and why.
	MoveFailure = movement.MoveFailure
	// MoveCounters count what a kind of movement did since the start.
	MoveCounters = movement.MoveCounters
	// Movement is what the service says about data movement.
	Movement = movement.Movement
	// MoveReporter is told about data movement as it happens.
	MoveReporter = movement.MoveReporter
	// GroupState is a row of `group ls`.
	GroupState = movement.GroupState
	// Risk is what the files risk while filesystems are unreadable, and
	// where the rebuilds stand.
	Risk = movement.Risk
	// RiskCounts are files at risk by class.
	RiskCounts = movement.RiskCounts
	// FileCount is a number of files and their bytes.
	FileCount = movement.FileCount
)

// Drain states (namespace.Filesystem.Drain, fs ls).
const (
	DrainDraining   = movement.DrainDraining
	DrainDrained    = movement.DrainDrained
	DrainRebuilding = movement.DrainRebuilding
	DrainEmpty      = movement.DrainEmpty
)

// DefaultRebuildAfter is how long a filesystem may be unreadable before
// it is declared lost and rebuilt (Config.RebuildAfter).
const DefaultRebuildAfter = movement.DefaultRebuildAfter

// ReportMovement makes the service tell r about data movement (nil: no
// one).
func (s *Server) ReportMovement(r MoveReporter) { s.mv.ReportMovement(r) }

// Movement reports data movement (for metrics: no authorization).
func (s *Server) Movement() Movement { return s.mv.Movement() }

// Risk reports the files at risk and the rebuilds (for metrics: no
// authorization).
func (s *Server) Risk() Risk { return s.mv.Risk() }

// AtRisk reports the files at risk and the rebuilds (`fsck stat`; admin
// only).
func (s *Server) AtRisk(_ context.Context, p auth.Principal) (Risk, error) {
	if err := requireRoot(p, "fsck stat"); err != nil {
		return Risk{}, err
	}
	return s.mv.Risk(), nil
}

// DrainStatus returns the drain progress of fs id (`fs status`): the
// running (or just ended) drain's, or, for a filesystem drained before
// this process started, its recorded state (admin only).
func (s *Server) DrainStatus(_ context.Context, p auth.Principal, id uint32) (FsState, *DrainProgress, error) {
	var st FsState
	if err := requireRoot(p, "fs status"); err != nil {
		return st, nil, err
	}
	found := false
	for _, f := range s.reg.List() {
		if f.ID == id {
			st, found = FsState{FsState: f}, true
		}
	}
	if !found {
		return st, nil, kerr.New(kerr.NotFound, "fs status", "fs "+strconv.FormatUint(uint64(id), 10), "no such filesystem")
	}
	return st, s.mv.DrainProgress(st.FsState), nil
}

// Groups lists every group (those filesystems name and those with
// settings; admin only).
func (s *Server) Groups(_ context.Context, p auth.Principal) ([]GroupState, error) {
	if err := requireRoot(p, "group ls"); err != nil {
		return nil, err
	}
	return s.mv.Groups(), nil
}

// SetGroup sets a group's key (`group set G key=value`): balancer=on|off,
// threshold=N (percentage points, 0 < N < 100), balancer.rate=SIZE (bytes
// per second, 0 = no cap), balancer.parallel=N.
func (s *Server) SetGroup(ctx context.Context, p auth.Principal, name, key, value string) error {
	what := fmt.Sprintf("group %s %s=%s", name, key, value)
	if err := requireRoot(p, "group set"); err != nil {
		return s.audit(ctx, p, "group set", what, "", err)
	}
	err := s.reg.SetGroup(name, key, value)
	if err == nil {
		s.mv.SettingsChanged()
	}
	return s.audit(ctx, p, "group set", what, "", err)
}

// ConvertFile converts the file at path to layout and space ("": keep
// the file's) and returns it as it is afterwards. Root only: it moves
// data between the operator's spaces.
func (s *Server) ConvertFile(ctx context.Context, p auth.Principal, path, space, lay string) (n *namespace.Inode, err error) {
	what := fmt.Sprintf("%s space=%s layout=%s", path, space, lay)
	defer func() { err = s.audit(ctx, p, "file convert", what, "", err) }()
	if err := requireRoot(p, "file convert"); err != nil {
		if ke, ok := err.(*kerr.Error); ok {
			ke.Path = path
		}
		return nil, err
	}
	f, err := s.ns.Stat(caller(p), path)
	if err != nil {
		return nil, err
	}
	if f.IsDir {
		return nil, kerr.New(kerr.IsDir, "file convert", path, "is a directory (set sys.convert.space or sys.convert.layout on it to convert the files below)")
	}
	converted, err := s.mv.Convert(ctx, f, path, space, lay)
	switch {
	case err != nil:
		return nil, err
	case !converted:
		return f, nil // nothing to move (an empty file has no stripes)
	}
	return s.ns.Stat(caller(p), path)
}

// ConvertStatus reports the conversion policies' progress (admin only).
func (s *Server) ConvertStatus(_ context.Context, p auth.Principal) (ConvertProgress, error) {
	if err := requireRoot(p, "file convert status"); err != nil {
		return ConvertProgress{}, err
	}
	return s.mv.ConvertStatus(), nil
}

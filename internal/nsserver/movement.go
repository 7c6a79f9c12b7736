package nsserver

import (
	"context"
	"fmt"
	"strconv"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/movement"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Data movement's calls (package movement schedules drains, balancers
// and conversions), and what it reports for metrics.
type (
	// MoveCounters count what a kind of movement did since the start.
	MoveCounters = movement.MoveCounters
	// Movement is what the service says about data movement.
	Movement = movement.Movement
	// MoveReporter is told about data movement as it happens.
	MoveReporter = movement.MoveReporter
	// Risk is what the files risk while filesystems are unreadable, and
	// where the rebuilds stand.
	Risk = movement.Risk
	// RiskCounts are files at risk by class.
	RiskCounts = movement.RiskCounts
	// FileCount is a number of files and their bytes.
	FileCount = movement.FileCount
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

// DrainStatus returns the drain progress of fs id (`fs status`): the
// running (or just ended) drain's, or, for a filesystem drained before
// this process started, its recorded state (admin only).
func (s *Server) DrainStatus(_ context.Context, p auth.Principal, id uint32) (nsapi.FsStatus, error) {
	if err := requireRoot(p, "fs status"); err != nil {
		return nsapi.FsStatus{}, err
	}
	for _, f := range s.reg.List() {
		if f.ID != id {
			continue
		}
		d := s.mv.DrainProgress(f)
		out := nsapi.FsStatus{Filesystem: filesystemOf(f, d)}
		if d != nil {
			out.DrainPhase, out.DrainStarted, out.FilesMoved, out.BytesMoved = d.Phase, d.Started, d.FilesMoved, d.BytesMoved
			out.InFlight, out.Failures, out.Failed = d.InFlight, failuresOf(d.Failures), d.Failed
			out.Kind, out.LostWhy, out.LostAt, out.SafeAt = d.Kind, d.LostWhy, d.LostAt, d.SafeAt
			if d.Kind == "rebuild" {
				r := atRiskOf(d.Risk, FileCount{})
				out.Risk = &r
			}
		}
		return out, nil
	}
	return nsapi.FsStatus{}, kerr.New(kerr.NotFound, "fs status", "fs "+strconv.FormatUint(uint64(id), 10), "no such filesystem")
}

// Groups lists every group (those filesystems name and those with
// settings; admin only).
func (s *Server) Groups(_ context.Context, p auth.Principal) ([]nsapi.Group, error) {
	if err := requireRoot(p, "group ls"); err != nil {
		return nil, err
	}
	out := []nsapi.Group{}
	for _, g := range s.mv.Groups() {
		out = append(out, groupOf(g))
	}
	return out, nil
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
func (s *Server) ConvertFile(ctx context.Context, p auth.Principal, path, space, lay string) (e nsapi.Entry, err error) {
	what := fmt.Sprintf("%s space=%s layout=%s", path, space, lay)
	defer func() { err = s.audit(ctx, p, "file convert", what, "", err) }()
	if err := requireRoot(p, "file convert"); err != nil {
		if ke, ok := err.(*kerr.Error); ok {
			ke.Path = path
		}
		return nsapi.Entry{}, err
	}
	f, err := s.ns.Stat(caller(p), path)
	if err != nil {
		return nsapi.Entry{}, err
	}
	if f.IsDir {
		return nsapi.Entry{}, kerr.New(kerr.IsDir, "file convert", path, "is a directory (set sys.convert.space or sys.convert.layout on it to convert the files below)")
	}
	converted, err := s.mv.Convert(ctx, f, path, space, lay)
	if err != nil {
		return nsapi.Entry{}, err
	}
	if converted { // else nothing moved (an empty file has no stripes)
		if f, err = s.ns.Stat(caller(p), path); err != nil {
			return nsapi.Entry{}, err
		}
	}
	return entryOf(clean(path), f), nil
}

// ConvertStatus reports the conversion policies' progress (admin only).
func (s *Server) ConvertStatus(_ context.Context, p auth.Principal) (nsapi.ConvertStatus, error) {
	if err := requireRoot(p, "file convert status"); err != nil {
		return nsapi.ConvertStatus{}, err
	}
	st := s.mv.ConvertStatus()
	return nsapi.ConvertStatus{LastSweep: st.LastSweep, Pending: st.Pending, Converted: st.Converted,
		Failures: failuresOf(st.Failures), Failed: st.Failed}, nil
}

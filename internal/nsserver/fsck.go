package nsserver

import (
	"context"
	"fmt"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/fsck"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// fsck's calls (package fsck compares, keeps the findings and plans
// repairs), and its settings and counters.

// FsckCounters are fsck's counters for metrics.
type FsckCounters = fsck.Counters

// Defaults of the namespace side of fsck.
const (
	DefaultFsckRate    = fsck.DefaultFsckRate
	DefaultOrphanGrace = fsck.DefaultOrphanGrace
)

var _ message.Fsck = (*Server)(nil)

// FsckScan implements message.Fsck: one batch of a storage server's scan.
func (s *Server) FsckScan(ctx context.Context, m message.FsckScan) error { return s.fsck.Scan(ctx, m) }

// FsckStat reports the findings per class and the scans.
func (s *Server) FsckStat(_ context.Context, p auth.Principal) (nsapi.FsckStatus, error) {
	if err := requireRoot(p, "fsck stat"); err != nil {
		return nsapi.FsckStatus{}, err
	}
	out := fsckStatusOf(s.fsck.Stat())
	r := s.mv.Risk()
	out.Risk = &nsapi.Rebuilds{AtRisk: atRiskOf(r.RiskCounts, r.Rebuilding), Rebuilt: nsapi.Count(r.Rebuilt),
		Remaining: nsapi.Count(r.Remaining), Rate: r.Rate, ETA: r.ETA.Seconds(), Unavailable: r.Unavailable, Surveyed: r.Surveyed,
		Took: nsapi.Duration(r.Took)}
	return out, nil
}

// FsckReport lists the findings of class (all with ""), of filesystem
// fsid (all with 0).
func (s *Server) FsckReport(_ context.Context, p auth.Principal, class string, fsid uint32) ([]nsapi.FsckFinding, error) {
	if err := requireRoot(p, "fsck report"); err != nil {
		return nil, err
	}
	fs, err := s.fsck.Report(class, fsid)
	if err != nil {
		return nil, err
	}
	out := []nsapi.FsckFinding{}
	for _, x := range fs {
		out = append(out, findingOf(x))
	}
	return out, nil
}

// FsckRun asks the storage servers to scan filesystem fsid (every
// registered one with 0) now; scrub makes the scans re-read the data.
func (s *Server) FsckRun(ctx context.Context, p auth.Principal, fsid uint32, scrub bool) (err error) {
	what := "all filesystems"
	if fsid != 0 {
		what = fmt.Sprintf("fs %d", fsid)
	}
	defer func() { err = s.audit(ctx, p, "fsck run", what, "", err) }()
	if err := requireRoot(p, "fsck run"); err != nil {
		return err
	}
	return s.fsck.Request(fsid, scrub)
}

// FsckRepair repairs what is repairable of the findings of class ("all":
// every class, in priority order) on filesystem fsid (all with 0):
// stripes are rebuilt in place from the file's healthy ones, orphans older
// than the grace time and copies no file registers are queued for
// deletion. It returns when every repair has ended.
func (s *Server) FsckRepair(ctx context.Context, p auth.Principal, class string, fsid uint32) (out []nsapi.FsckRepair, err error) {
	defer func() { err = s.audit(ctx, p, "fsck repair", class, "", err) }()
	if err := requireRoot(p, "fsck repair"); err != nil {
		return nil, err
	}
	rs, err := s.fsck.Repair(ctx, class, fsid)
	if err != nil {
		return nil, err
	}
	out = []nsapi.FsckRepair{}
	for _, r := range rs {
		out = append(out, nsapi.FsckRepair{FsckFinding: findingOf(r.Finding), Result: r.Result, Why: r.Why})
	}
	return out, nil
}

// FsckCounters returns fsck's counters (no authorization: for metrics).
func (s *Server) FsckCounters() FsckCounters { return s.fsck.Counters() }

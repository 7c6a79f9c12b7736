package httpfront

import (
	"context"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Admin API: fsck.

func (a api) fsckStat(ctx context.Context, c auth.Principal, _ nsapi.None) (nsapi.FsckStatus, error) {
	return a.ns.FsckStat(ctx, c)
}

func (a api) fsckReport(ctx context.Context, c auth.Principal, r nsapi.FsckReportRequest) ([]nsapi.FsckFinding, error) {
	return a.ns.FsckReport(ctx, c, r.Class, r.FsID)
}

func (a api) fsckRun(ctx context.Context, c auth.Principal, r nsapi.FsckRunRequest) (done, error) {
	return done{}, a.ns.FsckRun(ctx, c, r.FsID, r.Scrub)
}

func (a api) fsckRepair(ctx context.Context, c auth.Principal, r nsapi.FsckRepairRequest) ([]nsapi.FsckRepair, error) {
	return a.ns.FsckRepair(ctx, c, r.Class, r.FsID)
}

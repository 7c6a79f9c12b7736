package httpfront

import (
	"context"
	"strconv"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/fsck"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// fsckAPI adds the fsck routes (fsck/stat, fsck/report, fsck/run,
// fsck/repair) to the admin API.
func (f *Namespace) fsckAPI(handle func(route string, write bool, fn apiFunc)) {
	ns := f.NS
	fsOf := func(a apiArgs, op string) (uint32, error) {
		if a["fs"] == "" {
			return 0, nil
		}
		id, err := strconv.ParseUint(a["fs"], 10, 32)
		if err != nil {
			return 0, kerr.New(kerr.Invalid, op, a["fs"], "bad filesystem id")
		}
		return uint32(id), nil
	}
	handle("fsck/stat", false, func(ctx context.Context, c auth.Principal, _ apiArgs) (any, error) {
		st, err := ns.FsckStat(ctx, c)
		if err != nil {
			return nil, err
		}
		out := client.FsckStatus{OrphanGrace: client.JSONDuration(st.OrphanGrace.String()), Checked: st.Checked,
			Pass: client.FsckPass{Running: st.Pass.Running, LastStart: st.Pass.LastStart, LastEnd: st.Pass.LastEnd,
				Files: st.Pass.Files, LastError: st.Pass.LastErr}}
		for _, cl := range fsck.Classes {
			out.Classes = append(out.Classes, client.FsckClass{Name: string(cl), Description: cl.Describe(), Count: st.Counts[cl]})
		}
		for _, f := range st.Filesystems {
			out.Filesystems = append(out.Filesystems, client.FsckFs(f))
		}
		r, err := ns.AtRisk(ctx, c)
		if err != nil {
			return nil, err
		}
		out.Risk = &client.Rebuilds{AtRisk: atRiskOf(r.RiskCounts, r.Rebuilding), Rebuilt: client.Count(r.Rebuilt),
			Remaining: client.Count(r.Remaining), Rate: r.Rate, ETA: r.ETA.Seconds(), Unavailable: r.Unavailable, Surveyed: r.Surveyed,
			Took: client.JSONDuration(r.Took.String())}
		return out, nil
	})
	handle("fsck/report", false, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		id, err := fsOf(a, "fsck report")
		if err != nil {
			return nil, err
		}
		fs, err := ns.FsckReport(ctx, c, a["class"], id)
		if err != nil {
			return nil, err
		}
		out := []client.FsckFinding{}
		for _, x := range fs {
			out = append(out, findingOf(x))
		}
		return out, nil
	})
	handle("fsck/run", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		id, err := fsOf(a, "fsck run")
		if err != nil {
			return nil, err
		}
		return struct{}{}, ns.FsckRun(ctx, c, id, a.bool("scrub"))
	})
	handle("fsck/repair", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		id, err := fsOf(a, "fsck repair")
		if err != nil {
			return nil, err
		}
		if a["class"] == "" {
			return nil, kerr.New(kerr.Invalid, "fsck repair", "", "name the class to repair (or all)")
		}
		rs, err := ns.FsckRepair(ctx, c, a["class"], id)
		if err != nil {
			return nil, err
		}
		out := []client.FsckRepair{}
		for _, r := range rs {
			out = append(out, client.FsckRepair{FsckFinding: findingOf(r.Finding), Result: r.Result, Why: r.Why})
		}
		return out, nil
	})
}

func findingOf(x fsck.Finding) client.FsckFinding {
	return client.FsckFinding{Class: string(x.Class), Fid: x.Fid, FsID: x.FsID, Stripe: x.Stripe, Path: x.Path, Phys: x.Phys,
		Detail: x.Detail, First: x.First, Last: x.Last}
}

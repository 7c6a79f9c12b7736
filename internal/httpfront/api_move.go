package httpfront

import (
	"context"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsserver"
)

// Admin API of data movement: drain status, groups and their balancer,
// conversions.

// withDrain adds a filesystem's drain summary to its row.
func withDrain(c client.Filesystem, p *nsserver.DrainProgress) client.Filesystem {
	if p == nil {
		return c
	}
	c.Drain, c.DrainFilesLeft, c.DrainBytesLeft, c.DrainRate = p.Status, p.FilesLeft, p.BytesLeft, p.Rate
	c.DrainETA, c.DrainFailures, c.DrainRateLimit, c.DrainParallel = p.ETA.Seconds(), len(p.Failures), p.RateLimit, p.Parallel
	return c
}

// atRiskOf is the wire form of files at risk.
func atRiskOf(r nsserver.RiskCounts, rebuilding nsserver.FileCount) client.AtRisk {
	return client.AtRisk{Unreadable: client.Count(r.Unreadable), Critical: client.Count(r.Critical), Degraded: client.Count(r.Degraded),
		Rebuilding: client.Count(rebuilding)}
}

func failuresOf(fs []nsserver.MoveFailure) []client.MoveFailure {
	var out []client.MoveFailure
	for _, f := range fs {
		out = append(out, client.MoveFailure(f))
	}
	return out
}

func (f *Namespace) moveAPI(handle func(route string, write bool, fn apiFunc)) {
	ns := f.NS
	handle("fs/status", false, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		id, err := a.fsID("fs status")
		if err != nil {
			return nil, err
		}
		st, p, err := ns.DrainStatus(ctx, c, id)
		if err != nil {
			return nil, err
		}
		out := client.FsStatus{Filesystem: withDrain(filesystemOf(st), p)}
		if p != nil {
			out.DrainPhase, out.DrainStarted, out.FilesMoved, out.BytesMoved = p.Phase, p.Started, p.FilesMoved, p.BytesMoved
			out.InFlight, out.Failures, out.Failed = p.InFlight, failuresOf(p.Failures), p.Failed
			out.Kind, out.LostWhy, out.LostAt, out.SafeAt = p.Kind, p.LostWhy, p.LostAt, p.SafeAt
			if p.Kind == "rebuild" {
				r := atRiskOf(p.Risk, nsserver.FileCount{})
				out.Risk = &r
			}
		}
		return out, nil
	})
	handle("group/ls", false, func(ctx context.Context, c auth.Principal, _ apiArgs) (any, error) {
		gs, err := ns.Groups(ctx, c)
		if err != nil {
			return nil, err
		}
		out := []client.Group{}
		for _, g := range gs {
			row := client.Group{Name: g.Name, Filesystems: g.Filesystems, Usable: g.Usable, MinFill: g.MinFill, MaxFill: g.MaxFill,
				Balancer: g.Balancer, Threshold: g.Threshold, RateLimit: g.Rate, Parallel: g.Parallel}
			if b := g.Balance; b != nil {
				row.Phase, row.Moved, row.Bytes, row.Rate, row.InFlight = b.Phase, b.Moved, b.Bytes, b.Rate, b.InFlight
				row.Failures = failuresOf(b.Failures)
			}
			out = append(out, row)
		}
		return out, nil
	})
	handle("group/set", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		return struct{}{}, ns.SetGroup(ctx, c, a["name"], a["key"], a["value"])
	})
	handle("file/convert", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		n, err := ns.ConvertFile(ctx, c, a["path"], a["space"], a["layout"])
		if err != nil {
			return nil, err
		}
		p, _ := namespace.CleanPath(a["path"])
		return entryOf(p, n), nil
	})
	handle("file/convert/status", false, func(ctx context.Context, c auth.Principal, _ apiArgs) (any, error) {
		st, err := ns.ConvertStatus(ctx, c)
		if err != nil {
			return nil, err
		}
		return client.ConvertStatus{LastSweep: st.LastSweep, Pending: st.Pending, Converted: st.Converted,
			Failures: failuresOf(st.Failures), Failed: st.Failed}, nil
	})
}

package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// FsckStat returns the state of fsck.
func (c *Client) FsckStat(ctx context.Context) (nsapi.FsckStatus, error) {
	return get[nsapi.FsckStatus](ctx, c, "fsck/stat", nsapi.None{})
}

// FsckReport lists findings, of one class ("" all) and filesystem (0 all).
func (c *Client) FsckReport(ctx context.Context, class string, fsid uint32) ([]nsapi.FsckFinding, error) {
	return get[[]nsapi.FsckFinding](ctx, c, "fsck/report", nsapi.FsckReportRequest{Class: class, FsID: fsid})
}

// FsckRun asks for scans of filesystem fsid (0: all) now; scrub makes
// them re-read the data.
func (c *Client) FsckRun(ctx context.Context, fsid uint32, scrub bool) error {
	return c.change(ctx, "fsck/run", nsapi.FsckRunRequest{FsID: fsid, Scrub: scrub})
}

// FsckRepair repairs the findings of class ("all": every class) on
// filesystem fsid (0: all) and returns what was done.
func (c *Client) FsckRepair(ctx context.Context, class string, fsid uint32) ([]nsapi.FsckRepair, error) {
	return post[[]nsapi.FsckRepair](ctx, c, "fsck/repair", nsapi.FsckRepairRequest{Class: class, FsID: fsid})
}

// FsckWait waits until every scan requested of filesystem fsid (0: any)
// has completed after the state before, and a namespace pass started
// after the last of them has ended; it gives up after timeout.
func (c *Client) FsckWait(ctx context.Context, before nsapi.FsckStatus, fsid uint32, timeout time.Duration) error {
	prev := map[uint32]time.Time{}
	for _, f := range before.Filesystems {
		prev[f.FsID] = f.LastEnd
	}
	deadline := time.Now().Add(timeout)
	for {
		st, err := c.FsckStat(ctx)
		if err != nil {
			return err
		}
		var waiting []string
		var last time.Time
		for _, f := range st.Filesystems {
			if fsid != 0 && f.FsID != fsid {
				continue
			}
			if f.Requested || f.Scanning {
				waiting = append(waiting, fmt.Sprintf("fs %d", f.FsID))
				continue
			}
			if f.LastEnd.After(prev[f.FsID]) && f.LastEnd.After(last) {
				last = f.LastEnd
			}
		}
		p := st.Pass
		if len(waiting) == 0 && (last.IsZero() || (!p.Running && !p.LastStart.Before(last) && p.LastEnd.After(p.LastStart))) {
			return nil
		}
		if len(waiting) == 0 {
			waiting = append(waiting, "the namespace pass")
		}
		if time.Now().After(deadline) {
			return kerr.New(kerr.Busy, "", "", fmt.Sprintf("still waiting for %s after %v", strings.Join(waiting, ", "), timeout))
		}
		select {
		case <-ctx.Done():
			return kerr.Wrap(kerr.Busy, "fsck wait", "", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

package client

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// FsckStatus is `fsck stat`: findings per class, scans per filesystem,
// and the namespace pass.
type FsckStatus struct {
	Classes     []FsckClass  `json:"classes"` // every class, in repair priority order
	Filesystems []FsckFs     `json:"filesystems"`
	Pass        FsckPass     `json:"pass"`
	OrphanGrace JSONDuration `json:"orphan_grace"`
	Checked     int64        `json:"checked"` // stripes compared since the namespace server started
	Risk        *Rebuilds    `json:"at_risk,omitempty"`
}

// FsckClass is the number of findings of one class.
type FsckClass struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Count       int    `json:"count"`
}

// FsckFs is the scan state of one filesystem.
type FsckFs struct {
	FsID      uint32    `json:"fsid"`
	Node      string    `json:"node"`
	Path      string    `json:"path"`
	Settings  string    `json:"settings"`
	Requested bool      `json:"requested,omitempty"` // fsck run asked for a scan not completed yet
	Scanning  bool      `json:"scanning,omitempty"`
	Scrubbing bool      `json:"scrubbing,omitempty"`
	Seen      int64     `json:"seen,omitempty"`  // stripes walked by the running scan
	Total     int64     `json:"total,omitempty"` // stripes held when it started
	Bytes     int64     `json:"bytes,omitempty"` // bytes it re-read
	LastStart time.Time `json:"last_start"`
	LastEnd   time.Time `json:"last_end"`
	LastSeen  int64     `json:"last_seen"`
	LastScrub time.Time `json:"last_scrub"`
	LastError string    `json:"last_error,omitempty"`
}

// FsckPass is the state of the namespace pass (missing stripes).
type FsckPass struct {
	Running   bool      `json:"running,omitempty"`
	LastStart time.Time `json:"last_start"`
	LastEnd   time.Time `json:"last_end"`
	Files     int64     `json:"files"`
	LastError string    `json:"last_error,omitempty"`
}

// FsckFinding is one line of `fsck report`.
type FsckFinding struct {
	Class  string    `json:"class"`
	Fid    uint64    `json:"fid"`
	FsID   uint32    `json:"fsid"`   // 0: about the file
	Stripe int       `json:"stripe"` // -1: about the file
	Path   string    `json:"path"`
	Phys   string    `json:"phys,omitempty"`
	Detail string    `json:"detail"`
	First  time.Time `json:"first"`
	Last   time.Time `json:"last"`
}

// FsckRepair is what `fsck repair` did about one finding.
type FsckRepair struct {
	FsckFinding
	Result string `json:"result"` // repaired, dropped, skipped, failed
	Why    string `json:"why,omitempty"`
}

// JSONDuration is a duration as text ("24h0m0s").
type JSONDuration string

// Duration parses d (0 when it does not parse).
func (d JSONDuration) Duration() time.Duration { v, _ := time.ParseDuration(string(d)); return v }

// FsckStat returns the state of fsck.
func (c *Client) FsckStat(ctx context.Context) (FsckStatus, error) {
	var s FsckStatus
	err := c.get(ctx, "fsck/stat", nil, &s)
	return s, err
}

// FsckReport lists findings, of one class ("" all) and filesystem (0 all).
func (c *Client) FsckReport(ctx context.Context, class string, fsid uint32) ([]FsckFinding, error) {
	args := map[string]any{}
	if class != "" {
		args["class"] = class
	}
	if fsid != 0 {
		args["fs"] = fsid
	}
	var out []FsckFinding
	err := c.get(ctx, "fsck/report", args, &out)
	return out, err
}

// FsckRun asks for scans of filesystem fsid (0: all) now; scrub makes
// them re-read the data.
func (c *Client) FsckRun(ctx context.Context, fsid uint32, scrub bool) error {
	return c.post(ctx, "fsck/run", map[string]any{"fs": fsid, "scrub": scrub})
}

// FsckRepair repairs the findings of class ("all": every class) on
// filesystem fsid (0: all) and returns what was done.
func (c *Client) FsckRepair(ctx context.Context, class string, fsid uint32) ([]FsckRepair, error) {
	var out []FsckRepair
	err := c.Call(ctx, true, "fsck/repair", map[string]any{"class": class, "fs": fsid}, &out)
	return out, err
}

// FsckWait waits until every scan requested of filesystem fsid (0: any)
// has completed after the state before, and a namespace pass started
// after the last of them has ended; it gives up after timeout.
func (c *Client) FsckWait(ctx context.Context, before FsckStatus, fsid uint32, timeout time.Duration) error {
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
			return fmt.Errorf("still waiting for %s after %v", strings.Join(waiting, ", "), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

package client

import (
	"context"
	"time"
)

// Wire types and calls of data movement: drain status, groups and their
// balancer, conversions.

// MoveFailure is a stripe (or, for a conversion, a file: stripe -1)
// that could not be moved, and why.
type MoveFailure struct {
	Path   string    `json:"path"`
	Fid    uint64    `json:"fid"`
	Stripe int       `json:"stripe"`
	Reason string    `json:"reason"`
	Time   time.Time `json:"time"`
}

// FsStatus is `fs status ID`: the filesystem and its drain.
type FsStatus struct {
	Filesystem
	DrainPhase   string        `json:"drain_phase,omitempty"` // scanning, moving, waiting to retry, done
	DrainStarted time.Time     `json:"drain_started,omitempty"`
	FilesMoved   int64         `json:"drain_files_moved,omitempty"`
	BytesMoved   int64         `json:"drain_bytes_moved,omitempty"`
	InFlight     int           `json:"drain_in_flight,omitempty"`
	Failures     []MoveFailure `json:"drain_failure_list,omitempty"`
	Failed       int64         `json:"drain_failed_total,omitempty"` // failed attempts, retries included
	// A lost filesystem's rebuild: why and when it was declared lost,
	// its files at risk as the rebuild last found them less those
	// rebuilt since, and since when none of its stripes is one failure
	// from loss (zero: not yet, or none was).
	Kind    string    `json:"kind,omitempty"` // drain or rebuild
	LostWhy string    `json:"lost_why,omitempty"`
	LostAt  time.Time `json:"lost_at,omitzero"`
	Risk    *AtRisk   `json:"at_risk,omitempty"`
	SafeAt  time.Time `json:"safe_at,omitzero"`
}

// Count is a number of files (or stripes) and their bytes.
type Count struct {
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
}

// AtRisk are the files some of whose stripes cannot be read, by class:
// unreadable (fewer readable stripes than they need), one failure from
// loss (exactly as many), degraded (more); rebuilding are those with a
// stripe being rebuilt now (counted in their class too).
type AtRisk struct {
	Unreadable Count `json:"unreadable"`
	Critical   Count `json:"one_failure_from_loss"`
	Degraded   Count `json:"degraded"`
	Rebuilding Count `json:"rebuilding"`
}

// Rebuilds is `fsck stat`'s view of the files at risk and the rebuilds
// of lost filesystems: what they rebuilt since the namespace server
// started, what is left, the rate (bytes/s) and the time left at it
// (seconds, 0 unknown); when the counts were taken (zero: never), how
// long the walk of the namespace took ("0s": nothing to walk) and which
// filesystems cannot be read now.
type Rebuilds struct {
	AtRisk
	Rebuilt     Count        `json:"rebuilt"`
	Remaining   Count        `json:"remaining"`
	Rate        float64      `json:"rate"`
	ETA         float64      `json:"eta"`
	Unavailable []uint32     `json:"unavailable,omitempty"`
	Surveyed    time.Time    `json:"surveyed,omitzero"`
	Took        JSONDuration `json:"took,omitempty"`
}

// Group is a row of `group ls`.
type Group struct {
	Name        string  `json:"name"`
	Filesystems int     `json:"filesystems"`
	Usable      int     `json:"usable"`   // backends with rw, booted, healthy filesystems (a shared disk counts once)
	MinFill     float64 `json:"min_fill"` // percent
	MaxFill     float64 `json:"max_fill"`
	Balancer    bool    `json:"balancer"`
	Threshold   float64 `json:"threshold"` // percentage points
	RateLimit   int64   `json:"rate_limit,omitempty"`
	Parallel    int     `json:"parallel,omitempty"`
	// The balancer, when on: what it does, stripes and bytes moved, rate
	// (bytes/s over the last minute), moves in flight, failures.
	Phase    string        `json:"phase,omitempty"`
	Moved    int64         `json:"moved,omitempty"`
	Bytes    int64         `json:"bytes,omitempty"`
	Rate     float64       `json:"rate,omitempty"`
	InFlight int           `json:"in_flight,omitempty"`
	Failures []MoveFailure `json:"failures,omitempty"`
}

// ConvertStatus is where the conversion policies stand.
type ConvertStatus struct {
	LastSweep time.Time     `json:"last_sweep"`
	Pending   int           `json:"pending"`
	Converted int64         `json:"converted"`
	Failures  []MoveFailure `json:"failures,omitempty"`
	Failed    int64         `json:"failed"`
}

// FsStatus returns filesystem id with its drain progress.
func (c *Client) FsStatus(ctx context.Context, id string) (FsStatus, error) {
	var out FsStatus
	err := c.get(ctx, "fs/status", map[string]any{"id": id}, &out)
	return out, err
}

// Groups lists the scheduling groups.
func (c *Client) Groups(ctx context.Context) ([]Group, error) {
	var out []Group
	err := c.get(ctx, "group/ls", nil, &out)
	return out, err
}

// SetGroup sets key=value on group name (balancer, threshold,
// balancer.rate, balancer.parallel).
func (c *Client) SetGroup(ctx context.Context, name, key, value string) error {
	return c.post(ctx, "group/set", map[string]any{"name": name, "key": key, "value": value})
}

// ConvertFile converts the file at path to space and layout ("": keep)
// and returns it as it is afterwards.
func (c *Client) ConvertFile(ctx context.Context, path, space, layout string) (Entry, error) {
	var e Entry
	err := c.Call(ctx, true, "file/convert", map[string]any{"path": path, "space": space, "layout": layout}, &e)
	return e, err
}

// ConvertStatus reports the conversion policies' progress.
func (c *Client) ConvertStatus(ctx context.Context) (ConvertStatus, error) {
	var out ConvertStatus
	err := c.get(ctx, "file/convert/status", nil, &out)
	return out, err
}

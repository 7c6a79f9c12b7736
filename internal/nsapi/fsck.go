package nsapi

import "time"

// FsckStatus is `fsck stat`: findings per class, scans per filesystem,
// and the namespace pass.
type FsckStatus struct {
	Classes     []FsckClass `json:"classes"` // every class, in repair priority order
	Filesystems []FsckFs    `json:"filesystems"`
	Pass        FsckPass    `json:"pass"`
	OrphanGrace Duration    `json:"orphan_grace"`
	Checked     int64       `json:"checked"` // stripes compared since the namespace server started
	Risk        *Rebuilds   `json:"at_risk,omitempty"`
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
	Settings  string    `json:"settings"`            // as `fs config` sets them
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

package message

import (
	"context"
	"time"
)

// Messages of fsck (package fsck) and slow-disk detection. Storage servers
// scan their filesystems and send what they find about every stripe to
// the namespace server, which compares it with the namespace and keeps
// the findings; it asks a storage server to rebuild stripes (Repair).

// FsckSettings are one filesystem's scan settings (EOS' names in the
// comments), sent with its assignment. Zero durations and rates mean the
// defaults (Resolved).
type FsckSettings struct {
	DiskInterval  time.Duration `json:"disk_interval"`  // scan_disk_interval: walk and compare every stripe this often
	NSRate        int           `json:"ns_rate"`        // scan_ns_rate: stripes compared per second (<0: unthrottled)
	ScrubInterval time.Duration `json:"scrub_interval"` // scaninterval: re-read the data this often (<0: never)
	ScrubRate     int64         `json:"scrub_rate"`     // scanrate: bytes per second read by a scrub (<0: unthrottled)
	// Run asks for a scan now (fsck run): a request id, echoed by the
	// scan it starts; 0 when none is pending.
	Run      int64 `json:"run,omitempty"`
	RunScrub bool  `json:"run_scrub,omitempty"` // that scan re-reads the data
}

// Defaults of the scan settings (EOS' defaults where the work is the
// same; Kaon compares in batches, so its namespace rate is higher than
// EOS' 50 lookups per second).
const (
	DefaultScanDiskInterval  = 4 * time.Hour
	DefaultScanNSRate        = 1000
	DefaultScanScrubInterval = 7 * 24 * time.Hour
	DefaultScanScrubRate     = 100 << 20
)

// Resolved is s with its zero fields filled with the defaults.
func (s FsckSettings) Resolved() FsckSettings {
	if s.DiskInterval == 0 {
		s.DiskInterval = DefaultScanDiskInterval
	}
	if s.NSRate == 0 {
		s.NSRate = DefaultScanNSRate
	}
	if s.ScrubInterval == 0 {
		s.ScrubInterval = DefaultScanScrubInterval
	}
	if s.ScrubRate == 0 {
		s.ScrubRate = DefaultScanScrubRate
	}
	return s
}

// FsckStripe is what a scan found about one stripe.
type FsckStripe struct {
	Fid uint64 `json:"fid"`
	// Its metadata (backend.Meta) or why it could not be read.
	Stripe    int               `json:"stripe"`
	Layout    string            `json:"layout,omitempty"`
	Size      int64             `json:"size"` // logical size of the file
	Checksums map[string]string `json:"sums,omitempty"`
	Path      string            `json:"path,omitempty"`    // path at write time (a hint)
	Version   uint64            `json:"version,omitempty"` // data version of the file it holds
	MetaErr   string            `json:"meta_err,omitempty"`
	// DiskSize is the stripe's length in its filesystem (-1: could not
	// be opened, DiskErr says why).
	DiskSize int64  `json:"disk_size"`
	DiskErr  string `json:"disk_err,omitempty"`
	// Scrub results (when the scan re-read the data): blocks of a replica
	// or frames of an erasure-coded stripe fail their crc32c (BlockErr),
	// or, every block verifying, the whole-file checksum of a replica
	// recomputed from its bytes differs from its metadata (SumErr).
	Scrubbed bool   `json:"scrubbed,omitempty"`
	SumErr   string `json:"sum_err,omitempty"`
	BlockErr string `json:"block_err,omitempty"`
}

// FsckScan is one batch of a scan of one filesystem. A scan is named by
// its start time; its last batch has Done (the walk finished: the fids
// it reported are everything the filesystem holds) or Failed.
type FsckScan struct {
	Node    string       `json:"node"`
	FsID    uint32       `json:"fsid"`
	Start   time.Time    `json:"start"`
	Run     int64        `json:"run,omitempty"` // the request (FsckSettings.Run) it serves
	Scrub   bool         `json:"scrub,omitempty"`
	Stripes []FsckStripe `json:"stripes,omitempty"`
	Seen    int64        `json:"seen"`  // stripes walked so far
	Bytes   int64        `json:"bytes"` // bytes re-read so far
	Total   int64        `json:"total"` // stripes the filesystem held when the scan started
	Done    bool         `json:"done,omitempty"`
	Failed  string       `json:"failed,omitempty"`
}

// Fsck is what a storage server's scans need from the namespace server.
// A message.Namespace that implements it gets scans.
type Fsck interface {
	FsckScan(ctx context.Context, s FsckScan) error
}

// Unfinished lists stripes a storage server found without their
// metadata on filesystem FsID when it came online after the server
// started: being written when the previous run of the server stopped.
type Unfinished struct {
	Node string   `json:"node"`
	FsID uint32   `json:"fsid"`
	Fids []uint64 `json:"fids"`
}

// UnfinishedReply names those of the stripes the namespace knows nothing
// of: no file has the id, no upload or copy is pending under it, no move
// into the filesystem is in flight. The storage server removes them.
type UnfinishedReply struct {
	Unknown []uint64 `json:"unknown"`
}

// Leftovers is implemented by a message.Namespace that says which
// unfinished stripes a restarted storage server may remove at once.
type Leftovers interface {
	Unfinished(ctx context.Context, u Unfinished) (UnfinishedReply, error)
}

// RepairJob asks a storage server to rebuild stripes of one file on its
// own filesystems from the file's other stripes. Token is a read
// capability of the file (its layout, size, checksums and every stripe's
// filesystem and server); Rebuild lists the stripe indices to rebuild,
// each on a filesystem of that storage server.
//
// ReadDamage marks the repair of damage a read found (a storage server
// asking the holder of a stripe whose frames failed): a stripe is then
// rebuilt only where it still is, with the file's metadata (one moved or
// deleted since the read is left alone).
type RepairJob struct {
	Fid        uint64 `json:"fid"`
	Token      string `json:"token"`
	Rebuild    []int  `json:"rebuild"`
	ReadDamage bool   `json:"read_damage,omitempty"`
}

// Latency is one filesystem's I/O latency over the storage server's
// recent window: percentiles of small operations (metadata and transfers
// under 64 KiB) and large ones, with the number of samples.
type Latency struct {
	SmallN   int64         `json:"small_n"`
	SmallP50 time.Duration `json:"small_p50"`
	SmallP90 time.Duration `json:"small_p90"`
	SmallP99 time.Duration `json:"small_p99"`
	LargeN   int64         `json:"large_n"`
	LargeP50 time.Duration `json:"large_p50"`
	LargeP90 time.Duration `json:"large_p90"`
	LargeP99 time.Duration `json:"large_p99"`
}

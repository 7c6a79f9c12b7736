package nsapi

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// FsPath is where a filesystem's stripes live, for a client that may
// reach them itself (`kaon mount`'s direct path): the registered path,
// the identity marker expected there, and whether it keeps block sums.
type FsPath struct {
	ID          uint32 `json:"id"`
	Path        string `json:"path"`
	UUID        string `json:"uuid,omitempty"`
	NoBlockSums bool   `json:"no_block_sums,omitempty"`
}

// Filesystem is a row of `fs ls`: its registration, what its storage
// server last reported, and its drain.
type Filesystem struct {
	ID           uint32    `json:"id"`
	Node         string    `json:"node"`
	Path         string    `json:"path"`
	Group        string    `json:"group"`
	Space        string    `json:"space"`
	ConfigStatus string    `json:"configstatus"`
	UUID         string    `json:"uuid,omitempty"`
	Initialized  bool      `json:"initialized,omitempty"`
	Addr         string    `json:"addr"`
	BootStatus   string    `json:"bootstatus"` // booted, down, offline
	Capacity     uint64    `json:"capacity"`
	Used         uint64    `json:"used"`
	Files        int64     `json:"files"`
	Health       string    `json:"health"`
	LastBeat     time.Time `json:"lastbeat"`
	// Settings (io: auto, direct, buffered; RADOS object size) and what
	// the storage server found: kind (posix, cephfs, rados), the backend
	// it shares with other filesystems, the write mode in use, what is at
	// its place, the storage system's own health (Ceph's).
	IO            string `json:"io,omitempty"`
	NoBlockSums   bool   `json:"no_block_sums,omitempty"` // blocksums=off
	ObjectSize    int64  `json:"object_size,omitempty"`
	Kind          string `json:"kind,omitempty"`
	Backend       string `json:"backend,omitempty"`
	IOInUse       string `json:"io_in_use,omitempty"`
	FsType        string `json:"fstype,omitempty"`
	BackendHealth string `json:"backend_health,omitempty"`
	// Location is its failure-domain tag ("site::rack1"; "" none);
	// DownSince is when it stopped being readable (zero: it is) and
	// DownWhy why.
	Location  string    `json:"location,omitempty"`
	DownSince time.Time `json:"down_since,omitzero"`
	DownWhy   string    `json:"down_why,omitempty"`
	// Drain (configstatus drain): "draining" or "drained", the stripes
	// and bytes left on the filesystem, the measured rate (bytes/s) and
	// the time left at it (seconds, 0 unknown), stripes that failed to
	// move now, and the drain's settings (drain.rate 0 = no cap). The
	// rebuild of a lost filesystem (configstatus lost) fills the same
	// fields: "rebuilding" or "empty", and rebuild.rate (0 = giving way
	// to client streams, -1 = no cap) and rebuild.parallel.
	Drain          string  `json:"drain,omitempty"`
	DrainFilesLeft int64   `json:"drain_files_left,omitempty"`
	DrainBytesLeft int64   `json:"drain_bytes_left,omitempty"`
	DrainRate      float64 `json:"drain_rate,omitempty"`
	DrainETA       float64 `json:"drain_eta,omitempty"`
	DrainFailures  int     `json:"drain_failures,omitempty"`
	DrainRateLimit int64   `json:"drain_rate_limit,omitempty"`
	DrainParallel  int     `json:"drain_parallel,omitempty"`
	// Latency of its storage server's own I/O on it over the last window,
	// and why it is slow (standing out from its group; "" when it is not).
	Latency *Latency `json:"latency,omitempty"`
	Slow    string   `json:"slow,omitempty"`
}

// Latency is a filesystem's I/O latency: percentiles of small operations
// (metadata, transfers under 64 KiB) and large ones, with sample counts.
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

// NewFilesystem is what `fs add` registers (empty fields: defaults).
type NewFilesystem struct {
	Node       string `json:"node"`
	Path       string `json:"path"` // a directory, or rados://[USER@]POOL[/NAMESPACE][?conf=FILE]
	Group      string `json:"group"`
	Space      string `json:"space"`
	IO         string `json:"io"`          // auto, direct, buffered
	ObjectSize string `json:"object-size"` // RADOS object size, e.g. 16M (ParseSize)
	Location   string `json:"location"`    // failure-domain tag, site::rack1
}

// FsStatus is `fs status ID`: the filesystem and its drain or rebuild.
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
// long the walk of the namespace took (0: nothing to walk) and which
// filesystems cannot be read now.
type Rebuilds struct {
	AtRisk
	Rebuilt     Count     `json:"rebuilt"`
	Remaining   Count     `json:"remaining"`
	Rate        float64   `json:"rate"`
	ETA         float64   `json:"eta"`
	Unavailable []uint32  `json:"unavailable,omitempty"`
	Surveyed    time.Time `json:"surveyed,omitzero"`
	Took        Duration  `json:"took,omitempty"`
}

// MoveFailure is a stripe (or, for a conversion, a file: stripe -1)
// that could not be moved, and why.
type MoveFailure struct {
	Path   string    `json:"path"`
	Fid    uint64    `json:"fid"`
	Stripe int       `json:"stripe"`
	Reason string    `json:"reason"`
	Time   time.Time `json:"time"`
}

// Space is a row of `space ls`.
type Space struct {
	Name        string `json:"name"`
	Groups      int    `json:"groups"`
	Filesystems int    `json:"filesystems"`
	RW          int    `json:"rw"`
	Booted      int    `json:"booted"`
	Capacity    uint64 `json:"capacity"` // each backend counted once
	Used        uint64 `json:"used"`
	Files       int64  `json:"files"`
	Backends    int    `json:"backends"`
	CephPool    string `json:"ceph_pool,omitempty"`
	ObjectSize  int64  `json:"object_size,omitempty"`
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

// ParseSize reads a byte count with an optional binary suffix (K, M, G:
// 16M is 16 MiB), as `fs add --object-size`, `fs config`, `space config`
// and `group set` take sizes.
func ParseSize(s string) (int64, error) {
	mult := int64(1)
	t := strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "IB")
	t = strings.TrimSuffix(t, "B")
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			mult, t = 1<<10, t[:len(t)-1]
		case 'M':
			mult, t = 1<<20, t[:len(t)-1]
		case 'G':
			mult, t = 1<<30, t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("bad size %q (e.g. 4M, 16M, 64M)", s)
	}
	return n * mult, nil
}

// ParseFsID reads a filesystem id (decimal) for operation op.
func ParseFsID(op, s string) (uint32, error) {
	id, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, kerr.New(kerr.Invalid, op, s, "bad filesystem id")
	}
	return uint32(id), nil
}

// NodeRow is a row of `kaon node ls`: a storage server, whether it beats,
// how long ago it last did, its software version, its filesystems, and
// its I/O rates between its last two heartbeats (bytes and operations
// per second).
type NodeRow struct {
	Name        string    `json:"name"`
	HTTP        string    `json:"http,omitempty"`
	XRootD      string    `json:"xrootd,omitempty"`
	State       string    `json:"state"` // online, offline
	LastBeat    time.Time `json:"lastbeat,omitzero"`
	Release     string    `json:"release,omitempty"`
	Filesystems int       `json:"filesystems"`
	Booted      int       `json:"booted"`
	ReadRate    float64   `json:"read_rate"`
	WriteRate   float64   `json:"write_rate"`
	OpRate      float64   `json:"op_rate"`
}

// NodeConfigRequest is POST node/config: key=value on every filesystem
// of node Name (fs config's keys).
type NodeConfigRequest struct {
	Name  string `json:"name"`
	Key   string `json:"key"`
	Value string `json:"value"`
}

// FromArgs reads r from a.
func (r *NodeConfigRequest) FromArgs(a Args) error {
	r.Name, r.Key, r.Value = a["name"], a["key"], a["value"]
	return nil
}

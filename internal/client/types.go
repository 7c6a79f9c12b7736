package client

import "time"

// The admin API's JSON types (namespace endpoint, /api/v1/...). They are
// the wire format: fields are only added, never renamed or removed.

// Entry is a file or directory.
type Entry struct {
	Path      string            `json:"path"`
	Name      string            `json:"name"`
	ID        uint64            `json:"id"`
	IsDir     bool              `json:"dir"`
	Mode      uint32            `json:"mode"`
	UID       uint32            `json:"uid"`
	GID       uint32            `json:"gid"`
	Size      int64             `json:"size"`
	MTime     time.Time         `json:"mtime"`
	CTime     time.Time         `json:"ctime"`
	BTime     time.Time         `json:"btime"`
	Layout    string            `json:"layout,omitempty"`
	Checksums map[string]string `json:"checksums,omitempty"`
	Locations []uint32          `json:"locations,omitempty"`
	TreeSize  int64             `json:"treesize,omitempty"`
	TreeFiles int64             `json:"files,omitempty"`
	TreeDirs  int64             `json:"dirs,omitempty"`
	TreeMTime *time.Time        `json:"treemtime,omitempty"`
	XAttrs    map[string]string `json:"xattrs,omitempty"`
	Stripes   []Stripe          `json:"stripes,omitempty"`
}

// Stripe is one physical file of a logical file.
type Stripe struct {
	Index    int    `json:"index"`
	FsID     uint32 `json:"fsid"`
	Node     string `json:"node"`
	PhysPath string `json:"physpath"`
}

// Filesystem is a row of `fs ls`.
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

// ErrorBody is the JSON error every admin API call returns on failure.
type ErrorBody struct {
	Kind    int    `json:"kind"`
	Message string `json:"message"`
}

// Quota is one limit of a quota node with its usage (`quota ls`).
type Quota struct {
	Path        string `json:"path"`
	Kind        string `json:"kind"` // user, group, project
	ID          uint32 `json:"id"`
	LimitBytes  int64  `json:"limit_bytes"` // 0: no limit
	LimitFiles  int64  `json:"limit_files"`
	UsedBytes   int64  `json:"used_bytes"`
	UsedFiles   int64  `json:"used_files"`
	BookedBytes int64  `json:"booked_bytes"` // by uploads in flight
}

// RecycleEntry is a recycled file or tree (`recycle ls`).
type RecycleEntry struct {
	Key   string    `json:"key"`
	Path  string    `json:"path"` // where it was deleted from
	Dir   bool      `json:"dir"`
	UID   uint32    `json:"uid"`
	GID   uint32    `json:"gid"`
	Size  int64     `json:"size"`
	Files int64     `json:"files"`
	Time  time.Time `json:"time"` // when it was deleted
}

// Version is a kept content of a file (`file versions`): its id names it
// in the file's version folder, Path reads it.
type Version struct {
	ID        string            `json:"id"`
	Path      string            `json:"path"`
	Fid       uint64            `json:"fid"`
	Size      int64             `json:"size"`
	MTime     time.Time         `json:"mtime"`
	Checksums map[string]string `json:"checksums,omitempty"`
}

// Whoami is who the server thinks the client is, and how it knows.
type Whoami struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	Name   string   `json:"name"`
	Method string   `json:"method"`
	Scopes []string `json:"scopes,omitempty"` // a token's: "read:/p", "create:/p", "modify:/p"
}

// Token is an issued bearer token (`kaon token issue`).
type Token struct {
	Token string `json:"token"`
}

// TokenKey is one of the instance's token signing keys.
type TokenKey struct {
	KID     string     `json:"kid"`
	Created time.Time  `json:"created,omitzero"`
	Retired *time.Time `json:"retired,omitempty"`
	Next    bool       `json:"next,omitempty"` // published, signs after the next rotation
}

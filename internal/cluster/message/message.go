// Package message is the vocabulary of the internal protocol between the
// namespace server and storage servers: the messages and the Namespace
// interface, without a transport. Package cluster carries them over HTTP;
// the storage core depends only on this package (and so not on net/http).
package message

import (
	"context"
	"time"
)

// Version of the messages below; a peer with another version is refused.
// Version 2: storage servers claim an upload before writing it.
const Version = 2

// FsReport is what a storage server says about one of its filesystems.
type FsReport struct {
	ID       uint32 `json:"id"` // 0 for a path the namespace has not numbered yet
	Path     string `json:"path"`
	Capacity uint64 `json:"capacity"`
	Used     uint64 `json:"used"`
	Files    int64  `json:"files"`
	Health   string `json:"health"` // "ok" or the reason it is not
	// Offline says why the filesystem cannot be used at all (its root or
	// identity marker is missing or not its own, its I/O hangs); "" when
	// it can.
	Offline string `json:"offline,omitempty"`
	// What the store is (backend.Info): kind (posix, cephfs, rados), the
	// backing storage it shares with other filesystems (capacity counted
	// once per backend), the write mode in effect, what was found at its
	// place, and the storage system's own health (Ceph's).
	Kind          string `json:"kind,omitempty"`
	Backend       string `json:"backend,omitempty"`
	IO            string `json:"io,omitempty"`
	FsType        string `json:"fstype,omitempty"`
	BackendHealth string `json:"backend_health,omitempty"`
	// Latency of the storage server's own I/O on it (slow-disk detection).
	Latency *Latency `json:"latency,omitempty"`
}

// Heartbeat registers a storage server and its filesystems.
type Heartbeat struct {
	Version     int        `json:"version"`
	Node        string     `json:"node"` // stable node name, host:port
	Addr        string     `json:"addr"` // HTTP base URL of the data endpoint
	XrdAddr     string     `json:"xrd,omitempty"`
	Filesystems []FsReport `json:"filesystems"`
	Done        []Deletion `json:"done,omitempty"` // deletions carried out since last beat
	// Uploads are the uploads it is writing (claimed, not yet committed or
	// aborted): the namespace keeps them pending however long they take.
	Uploads []uint64 `json:"uploads,omitempty"`
	// Release is the storage server's software version; IO its I/O on
	// all its filesystems since it started (kaon node ls: rates).
	Release string  `json:"release,omitempty"`
	IO      *NodeIO `json:"io,omitempty"`
	// Accounting is its I/O by user and application since it started.
	Accounting []IOAccount `json:"accounting,omitempty"`
}

// IOAccount counts the bytes and files a storage server served one user
// (uid, gid) through one application since it started: reads of
// committed files and committed uploads (kaon io stat).
type IOAccount struct {
	UID        uint32 `json:"uid"`
	GID        uint32 `json:"gid"`
	App        string `json:"app"`
	ReadBytes  int64  `json:"read_bytes"`
	WriteBytes int64  `json:"write_bytes"`
	Reads      int64  `json:"reads"`
	Writes     int64  `json:"writes"`
}

// NodeIO counts a storage server's I/O since it started.
type NodeIO struct {
	ReadBytes  int64 `json:"read_bytes"`
	WriteBytes int64 `json:"write_bytes"`
	Ops        int64 `json:"ops"`
}

// FsAssignment tells a storage server which filesystems to serve and how.
type FsAssignment struct {
	ID           uint32 `json:"id"`
	Path         string `json:"path"`
	UUID         string `json:"uuid"`
	ConfigStatus string `json:"configstatus"` // rw, ro, drain, off
	// Init asks the storage server to create the filesystem (its root and
	// identity marker): it is registered but was never seen initialized.
	Init bool `json:"init,omitempty"`
	// The operator's settings (backend.Settings): write mode, and the
	// CephFS data pool and object size of the filesystem's space.
	IO         string `json:"io,omitempty"`
	CephPool   string `json:"ceph_pool,omitempty"`
	ObjectSize int64  `json:"object_size,omitempty"`
	// NoBlockSums: new replicas are kept without block sums.
	NoBlockSums bool `json:"no_block_sums,omitempty"`
	// Fsck are its scan settings (fsck.go).
	Fsck *FsckSettings `json:"fsck,omitempty"`
}

// Deletion is one physical stripe to remove.
type Deletion struct {
	FsID   uint32 `json:"fsid"`
	Fid    uint64 `json:"fid"`
	Stripe int    `json:"stripe"`
}

// HeartbeatReply answers a heartbeat.
type HeartbeatReply struct {
	Filesystems []FsAssignment `json:"filesystems"`
	Deletions   []Deletion     `json:"deletions,omitempty"`
	Interval    time.Duration  `json:"interval"`
	// LogLevel is the log level the operator set for storage servers
	// (kaon debug LEVEL --role fst: debug, info, warn, error); "" leaves
	// theirs.
	LogLevel string `json:"log_level,omitempty"`
}

// Commit reports a completed upload.
type Commit struct {
	Fid       uint64            `json:"fid"`
	Size      int64             `json:"size"`
	Checksums map[string]string `json:"checksums"`
}

// Namespace is what a storage server needs from the namespace server.
type Namespace interface {
	Heartbeat(ctx context.Context, hb Heartbeat) (HeartbeatReply, error)
	// Claim is called before the first byte of an upload is stored: it
	// fails unless fid is a pending upload nobody has claimed yet, so a
	// write capability is good for exactly one upload.
	Claim(ctx context.Context, fid uint64) error
	Commit(ctx context.Context, c Commit) error
	Abort(ctx context.Context, fid uint64) error
}

// UpdateCommit reports an update of a committed file (its journals
// prepared on every stripe in Locations but the Stale ones): the file
// goes from data version Base to Base+1.
type UpdateCommit struct {
	Fid       uint64            `json:"fid"`
	Base      uint64            `json:"base"`
	Tag       uint64            `json:"tag"` // random: FileVersion tells whether this commit went through
	Size      int64             `json:"size"`
	Locations []uint32          `json:"locations"`
	Stale     []int             `json:"stale,omitempty"`
	Checksums map[string]string `json:"checksums,omitempty"` // of the new content, where known
}

// FileVersion is what a file's data is at now: its data version, size,
// filesystems and stale stripes.
type FileVersion struct {
	DataVersion uint64   `json:"data_version"`
	Tag         uint64   `json:"tag"` // of the update that made DataVersion
	Size        int64    `json:"size"`
	Locations   []uint32 `json:"locations,omitempty"`
	Stale       []int    `json:"stale,omitempty"`
}

// Updates is what a storage server running update sessions needs from
// the namespace server.
type Updates interface {
	// CommitUpdate records an update (kerr.Busy: the file changed since
	// Base or its stripes moved; prepare again from the file's version).
	CommitUpdate(ctx context.Context, u UpdateCommit) (FileVersion, error)
	// MarkStale records that stripe of fid did not take the update that
	// gave it data version version.
	MarkStale(ctx context.Context, fid, version uint64, stripe int) error
	// FileVersion is what file fid is at now (a commit refused as Busy
	// is prepared again from it; a journal a crash left rolls forward
	// when the file is at its version).
	FileVersion(ctx context.Context, fid uint64) (FileVersion, error)
}

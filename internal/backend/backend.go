// Package backend is the data seam: where a storage server keeps the
// stripes of one filesystem. A Store is one filesystem — a POSIX directory
// (backend/posix: a local disk or a CephFS mount) or a RADOS pool
// (backend/rados, built with -tags ceph) — and the storage core
// (package storage) reaches its local stripes only through it, so a new
// backend is one new package passing the shared suite (backend/backendtest);
// backend/memstore is the in-memory one for unit tests.
//
// A stripe is named by its file id alone: two stripes (or replicas) of one
// file never share a filesystem, so the stripe index is metadata, not part
// of the name. A stripe is written once, from its first byte to its last;
// afterwards it changes only through a journal (Updater, journal.go),
// each change giving it the file's next data version (Meta.Version), and
// through Rewrite, which puts back bytes of blocks repaired from a good
// copy at the same version, never changing its length.
//
// Bitrot: a store keeps the crc32c of every block of a stripe (package
// checksum's block sums; posix after the data or in a file beside it, RADOS through
// BlueStore's own per-block crc32c) unless the stripe's bytes carry their
// own (CreateOptions.Framed: erasure-coded frames), and its Readers verify
// every block they return: a block that fails is never returned, ReadAt
// stops before it with an error wrapping a *checksum.BlockError that
// names its bytes, and Rewrite of those bytes from a good copy repairs
// it. Stripes written before block sums existed read as they are
// (Reader.BlockSums is false) until AddBlockSums adds them (a scrub). A stripe found
// damaged beyond what its store can repair is marked (MarkDamaged), and
// the mark travels with it (Reader.Damaged), so that its readers can fail
// at once instead of in the middle of a transfer.
//
// A store also says what it is (Info: posix, cephfs or rados, and which
// backing storage it shares with other filesystems, so that six
// directories in one CephFS are counted once) and takes the operator's
// per-filesystem settings (Configure: direct or buffered writes, CephFS
// layout, RADOS object size).
//
// Every filesystem carries an identity (fsid and the instance's uuid),
// written once when the namespace registers it and checked on every
// heartbeat, so that what is found at its place (a mountpoint whose disk
// went away, another filesystem's disk) is never taken for it.
//
// Errors are *kerr.Error naming the filesystem and stripe; a missing stripe
// is kerr.NotFound, an existing one kerr.Exists.
package backend

import (
	"io"
	"os"
)

// Store holds the stripes of one filesystem. It is safe for concurrent use.
type Store interface {
	// Create starts a new stripe of fid for writing. It fails with
	// kerr.Exists, leaving the existing stripe untouched, when fid has a
	// stripe here (finished, being written or left by a crash): one
	// capability writes a stripe exactly once. It fails with
	// kerr.Unavailable unless the store's identity was verified (Initialize
	// or a successful CheckIdentity) and has not failed a check since.
	Create(fid uint64, o CreateOptions) (Writer, error)
	// WriteMemory is the buffer memory one Writer created with o holds (for
	// the storage server's stream memory budget).
	WriteMemory(o CreateOptions) int64
	// Open opens a finished stripe for reading.
	Open(fid uint64) (Reader, error)
	// ReadMeta reads the metadata a stripe was finished with.
	ReadMeta(fid uint64) (Meta, error)
	// Remove deletes a stripe (kerr.NotFound if there is none).
	Remove(fid uint64) error
	// Rewrite replaces bytes [off, off+len(p)) of the finished stripe of
	// fid with p and makes them durable, recomputing the block sums of
	// the blocks the range touches and of no other: a block p covers
	// whole is summed from p; one it covers in part is read and verified
	// first, and a rewrite that would keep damaged bytes of such a block
	// is refused (kerr.IO wrapping its *checksum.BlockError), so a repair
	// writes whole blocks. The range must lie within the stripe (its
	// length does not change: kerr.Invalid). It clears a damage mark.
	// Data and sums are written one after the other, not atomically: a
	// crash between leaves blocks that fail verification (and are
	// repaired as any damage is), never blocks that verify with other
	// bytes. Concurrent readers of the range may see either content or a
	// block that fails; Rewrites of one stripe are serialized.
	Rewrite(fid uint64, off int64, p []byte) error
	// AddBlockSums gives a stripe written before block sums existed its
	// sums: sums are the crc32c of every block of bs bytes of its data,
	// length bytes, which the caller read and checked against the
	// stripe's whole-file checksum. It is refused (kerr.Invalid) if the
	// stripe does not hold length bytes of data; a stripe that has sums,
	// or whose store keeps none (RADOS), is left as it is.
	AddBlockSums(fid uint64, bs int, sums []uint32, length int64) error
	// MarkDamaged records on the stripe of fid that its bytes are damaged
	// and why (Reader.Damaged says it from then on); "" removes the mark.
	MarkDamaged(fid uint64, why string) error
	// Walk calls fn for every stripe in the store, in no particular order,
	// with its metadata or the error reading it (a stripe being written has
	// none yet; neither has a damaged one). An error from fn stops the walk
	// and is returned.
	Walk(fn func(fid uint64, m Meta, err error) error) error
	// Usage reports space and stripe count. With an error saying why the
	// store is unhealthy (not writable) it may still report the figures.
	Usage() (Usage, error)

	// Identity reads the identity marker (kerr.NotFound when there is none).
	Identity() (Identity, error)
	// Initialize makes the store (creating its place if needed) and writes
	// its identity; it refuses (kerr.NotEmpty) a place that already holds
	// anything, so it never adopts existing data.
	Initialize(id Identity) error
	// CheckIdentity says why the store is not filesystem want ("" when it
	// is): its place or marker is missing, or the marker is another
	// filesystem's or another instance's. A marker written before markers
	// carried a uuid adopts want's uuid.
	CheckIdentity(want Identity) (offline string)

	// Configure applies the operator's settings for the filesystem (they
	// come with every assignment; applying the same ones again is cheap).
	// Settings that cannot be applied are named in the error; the others
	// are in effect.
	Configure(s Settings) error
	// Info says what the store is now. It may ask the storage system
	// (statfs, a Ceph health query at most every few seconds), so it can
	// block where the filesystem blocks.
	Info() Info
}

// Settings are the operator's choices for one filesystem, kept in its
// registration in the namespace and sent to its storage server.
type Settings struct {
	// IO is how stripes are written: IOAuto (the store decides from what
	// the filesystem is), IODirect or IOBuffered. "" means IOAuto.
	IO string
	// CephPool is the CephFS data pool new stripes of a filesystem inside
	// a CephFS go to (the root directory's layout); "" leaves it.
	CephPool string
	// ObjectSize is the size of the objects stripes are cut into: the
	// CephFS layout's object size, or a RADOS store's object size; 0
	// leaves the store's own.
	ObjectSize int64
	// NoBlockSums keeps new replicas without block sums (and scrubs add
	// none): each stripe file is then the file's bytes exactly, which a
	// mount on a host reaching it hands to the kernel (FUSE passthrough),
	// for a backend that checks its own bytes (CephFS: BlueStore sums
	// every block). Reads of such stripes are not verified block by block.
	NoBlockSums bool
}

// Write modes (Settings.IO, Info.IO).
const (
	IOAuto     = "auto"     // direct on local block devices, buffered on network and FUSE filesystems
	IODirect   = "direct"   // O_DIRECT through aligned staging buffers
	IOBuffered = "buffered" // through the page cache, fsync at the end
)

// Kinds of store (Info.Kind).
const (
	KindPosix  = "posix"  // a directory on a local filesystem
	KindCephFS = "cephfs" // a directory inside a CephFS mount (ceph-fuse or the kernel client)
	KindRados  = "rados"  // objects in a RADOS pool
)

// Info describes a store.
type Info struct {
	Kind string // KindPosix, KindCephFS, KindRados
	// Backend names the storage holding the bytes: filesystems with the
	// same Backend share one capacity (directories on one disk or in one
	// CephFS, namespaces of one RADOS pool), so space accounting and
	// placement count it once. "" when unknown.
	Backend string
	// IO is the write mode in effect (IODirect, IOBuffered), "" where the
	// choice does not apply.
	IO string
	// FsType is what the store found at its place (e.g. "ext4",
	// "fuse.ceph-fuse", "rados pool kaon-rados"), for operators.
	FsType string
	// Health is the storage system's own view of itself for stores on a
	// cluster ("HEALTH_OK", "HEALTH_WARN: ...", or why it could not be
	// asked); "" for a local disk.
	Health string
}

// CreateOptions tune one stripe writer.
type CreateOptions struct {
	// Overlap asks the store to write in the background while the caller
	// fills the next buffer (more memory, device and network overlap).
	// Callers that already run one goroutine per stripe (the erasure
	// writer) leave it off.
	Overlap bool
	// Framed says the stripe's bytes carry their own checksums (the
	// frames of an erasure-coded stripe): the store keeps no block sums.
	Framed bool
}

// Writer receives the bytes of a new stripe in order.
type Writer interface {
	io.Writer
	// Finish makes the stripe durable (as the store's options say) with its
	// metadata and closes it; m.Fid is the stripe's own fid whatever m says.
	Finish(m Meta) error
	// Abort closes and removes the stripe. It is a no-op after a successful
	// Finish and removes what a failed Finish left.
	Abort()
}

// CRC32CWriter is a Writer that sums the bytes written as they pass (a
// stripe with block sums): DataCRC32C is the crc32c of all of them so
// far, folded from the block sums, ok false where the stripe keeps none
// (a framed one). An upload takes the file's crc32c from it instead of
// hashing every byte twice.
type CRC32CWriter interface {
	DataCRC32C() (crc uint32, ok bool)
}

// Reader reads a finished stripe. ReadAt returns only bytes that
// verified against their block sums, where the stripe has them.
type Reader interface {
	io.ReaderAt
	Size() int64 // of the data (block sums, where kept in the stripe, excluded)
	Close() error
	// BlockSums reports whether ReadAt verifies every block it returns
	// (the stripe has block sums, or its store verifies blocks itself).
	BlockSums() bool
	// Damaged is why the stripe was marked damaged (MarkDamaged), "" if
	// it was not.
	Damaged() string
}

// OSFile is implemented by Readers of a local file whose bytes are not
// verified block by block (erasure-coded stripes, whose frames the reader
// of the file checks; stripes without block sums), so that a front end
// can hand the file to the kernel (sendfile) instead of copying it.
type OSFile interface {
	OSFile() *os.File
}

// Meta is what a stripe says about itself: enough to identify and check it
// without the namespace (fsck, repair).
type Meta struct {
	Fid       uint64
	Stripe    int               // index of this stripe in the layout
	Layout    string            // layout of the file (package layout grammar)
	Size      int64             // logical size of the file, not of the stripe
	Checksums map[string]string // of the whole file, by type
	Path      string            // path at write time, a hint for fsck only
	// Version is the file's data version the stripe holds: 0 as uploaded,
	// one more for each update committed (journal.go). A stripe at a
	// version other than the namespace's is stale and never read.
	Version uint64
}

// Usage is a store's space and contents.
type Usage struct {
	Capacity uint64 // bytes
	Used     uint64 // bytes
	Files    int64  // stripes held
}

// Identity names a filesystem: its id in the namespace and the uuid of
// the namespace instance ("" in markers written before uuids existed).
type Identity struct {
	FsID uint32
	UUID string
}

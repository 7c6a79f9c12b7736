// Package kv is the seam between the namespace and its storage engine: a
// small ordered key-value interface with atomic batches, optimistic
// transactions, consistent snapshots, conditional commits and a change feed.
// Engines: pebblekv (the embedded default, Pebble on local disk), etcdkv (an
// etcd cluster, replicated by Raft, which several namespace servers can
// share), memkv (in memory, for unit tests). Every engine passes kvtest.Run.
//
// Revisions. Every commit that writes gets a revision greater than the
// revision of every earlier commit of the engine; commits that write nothing
// get none. A snapshot's revision is that of the last commit it sees, and
// Watch delivers each change with its commit's revision, so a reader that
// loads a snapshot at revision R and then watches from R+1 sees every later
// change exactly once. etcdkv uses the cluster's MVCC revision and pebblekv
// Pebble's sequence numbers: both survive restarts and may have gaps. memkv
// counts from 1.
//
// Transactions are optimistic, as JuiceFS's tkv txn and etcd's STM: fn reads
// from a snapshot taken at its first read, sees its own writes, and buffers
// writes. The commit applies the writes only if nothing fn read has changed
// since: every key it got (present or absent) and every range it scanned (up
// to where the scan stopped), checked atomically with the commit; otherwise
// fn runs again, after a random backoff, at most TxnAttempts times. fn must
// therefore have no effect outside tx. Blind writes (keys written but never
// read) do not conflict: the last commit wins.
//
// Conditional commits (TxnIf, Batch.If) carry guards, typically a fencing
// key a leader holds: if one does not hold at commit time, nothing is applied
// and the caller gets ErrCondFailed at once, without retry. etcdkv maps a
// guard to a compare in the same etcd Txn; the local engines check it under
// their commit lock.
package kv

import (
	"context"
	"errors"
)

// TxnAttempts bounds how many times Txn runs fn when commits conflict.
const TxnAttempts = 32

var (
	// ErrNotFound is returned by Get for a missing key.
	ErrNotFound = errors.New("kv: key not found")
	// ErrConflict is wrapped (in a kerr.Busy error) by Txn when fn's reads
	// kept being changed by concurrent commits TxnAttempts times.
	ErrConflict = errors.New("kv: transaction conflicted with concurrent commits")
	// ErrCondFailed: a guard of a conditional commit did not hold; nothing
	// was applied.
	ErrCondFailed = errors.New("kv: commit condition failed")
	// ErrCompacted: the history needed (a watch from an old revision, a
	// snapshot older than the engine keeps) is gone. The reader must load a
	// fresh snapshot and watch from there.
	ErrCompacted = errors.New("kv: revision compacted")
	// ErrTooLarge is wrapped (in a kerr.Invalid error) when a batch or
	// transaction exceeds what the engine accepts in one commit (etcd: its
	// --max-txn-ops and --max-request-bytes); nothing was applied.
	ErrTooLarge = errors.New("kv: commit too large for the engine")
	// ErrClosed is returned by operations on a closed engine.
	ErrClosed = errors.New("kv: engine closed")
)

// Reader reads an ordered key space.
type Reader interface {
	// Get returns a copy of the value stored under key, or ErrNotFound.
	Get(key []byte) ([]byte, error)
	// Scan calls fn for each key in [start, end) in ascending order until fn
	// returns false. end == nil means no upper bound. Key and value are only
	// valid during the call.
	Scan(start, end []byte, fn func(key, value []byte) bool) error
}

// Engine is an ordered key-value store with atomic batches, transactions,
// snapshots and a change feed. It is safe for concurrent use.
type Engine interface {
	// Get and Scan read the latest committed state.
	Reader
	// NewBatch starts an atomic write batch (no reads, no conflict checks:
	// the writer serializes itself, as the namespace does under its lock).
	NewBatch() Batch
	// Txn runs fn in an optimistic transaction and commits its writes (see
	// the package doc). fn's error is returned as is and nothing is applied.
	// After TxnAttempts conflicts the error is kerr.Busy wrapping ErrConflict.
	// The commit is durable when Txn returns (pebblekv: unless opened with
	// NoSync).
	Txn(ctx context.Context, fn func(tx Tx) error) error
	// TxnIf is Txn whose commit also requires every cond to hold; if one
	// does not, fn is not retried, nothing is applied and the error is
	// ErrCondFailed. The conds are checked even when fn writes nothing.
	TxnIf(ctx context.Context, conds []Cond, fn func(tx Tx) error) error
	// Snapshot returns a consistent read view of the whole store at one
	// revision; Close releases it.
	Snapshot(ctx context.Context) (Snapshot, error)
	// Watch delivers the committed changes of keys under prefix with
	// revision >= from (from == 0: from the next commit on), in commit order,
	// until ctx ends; then the channel is closed. The changes of one commit
	// arrive in one response, share a revision and are in key order, one
	// per key. A delete of an absent key may or may not show (etcd: not).
	// A response with Err set
	// (ErrCompacted when from is older than the history the engine keeps or
	// the reader fell too far behind, ErrClosed, kerr.Unavailable) is the
	// last one. Events are read-only.
	Watch(ctx context.Context, prefix []byte, from uint64) <-chan WatchResponse
	Close() error
}

// Tx is the view of a transaction: reads see the store at the transaction's
// snapshot overlaid with its own writes.
type Tx interface {
	Reader
	Put(key, value []byte)
	Delete(key []byte)
}

// Snapshot is a read view of the store at one revision.
type Snapshot interface {
	Reader
	// Revision is the revision of the last commit the snapshot sees.
	Revision() uint64
	Close() error
}

// Cond is a guard a conditional commit depends on: Key must hold exactly
// Value, or must not exist when Absent is set.
type Cond struct {
	Key    []byte
	Value  []byte
	Absent bool
}

// Event is one committed change.
type Event struct {
	Rev    uint64 // revision of the commit that made it
	Key    []byte
	Value  []byte // the new value; nil for a delete
	Delete bool
}

// WatchResponse carries the events of one or more whole commits, or the
// error that ended the watch.
type WatchResponse struct {
	Events []Event
	Err    error
}

// Batch collects writes that become visible together on Commit.
type Batch interface {
	Put(key, value []byte)
	Delete(key []byte)
	// If guards the batch: Commit and Apply apply nothing and fail with
	// ErrCondFailed unless every cond holds at commit time.
	If(conds ...Cond)
	// Commit applies all writes atomically. sync asks the engine to make the
	// batch durable against power loss before returning; without it the batch
	// survives a process crash (it is in the OS page cache) but not power loss.
	// etcdkv commits are always durable on a quorum of members.
	Commit(sync bool) error
	// Apply makes the batch visible in commit order and returns a wait
	// function that blocks until it is durable (when sync). Callers that
	// serialize writes apply under their lock and wait outside it, so
	// concurrent writers share one fsync (group commit).
	Apply(sync bool) (wait func() error, err error)
	// Discard drops an uncommitted batch; a no-op after Commit or Apply.
	Discard()
}

// PrefixEnd returns the smallest key greater than every key with prefix p.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

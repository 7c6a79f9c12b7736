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
//
// Engines several servers share also implement optional interfaces:
// Elector (sessions bound to a lease, elections whose leadership is such a
// guard; kvtest.RunElection checks them, on etcdkv and memkv), Limiter (how
// much one commit may hold), Compactor (dropping old history) and Statuser
// (members and health). internal/ha builds a replicated namespace on them.
package kv

import (
	"context"
	"errors"
	"time"
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

// Store is what a single writer needs: reads of the latest state and
// atomic batches applied in order. Every Engine is a Store; so is the
// active namespace server of a replicated instance (internal/ha: its own
// writes over a local replica, committed to the shared engine in groups).
type Store interface {
	// Get and Scan read the latest committed state.
	Reader
	// NewBatch starts an atomic write batch (no reads, no conflict checks:
	// the writer serializes itself, as the namespace does under its lock).
	NewBatch() Batch
}

// Engine is an ordered key-value store with atomic batches, transactions,
// snapshots and a change feed. It is safe for concurrent use.
type Engine interface {
	Store
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
	// Rev is the revision of the batch's commit once Commit or Apply
	// succeeded; 0 before, or when it wrote nothing.
	Rev() uint64
}

// Limiter is implemented by engines that bound what one commit may hold
// (etcdkv: the cluster's --max-txn-ops and --max-request-bytes). A caller
// that groups writes into one commit keeps each group within Limits.
type Limiter interface {
	Limits() Limits
}

// Barrier is implemented by stores whose reads may show batches that are
// not durable yet: pebblekv (a batch applied without sync) and the active
// namespace server's pipeline (internal/ha: a group not yet committed to
// the shared engine, which a failover may lose). Barrier returns once
// every batch applied before the call is durable, or with the error that
// means some may never be. What a reader hands to others to act on for
// good — a stripe a storage server is to remove — must have passed one.
type Barrier interface {
	Barrier(ctx context.Context) error
}

// Limits bound one commit: at most Ops writes and guards, and at most
// Bytes, where a write counts len(key)+len(value)+PerWrite and a guard
// len(key)+len(value)+PerWrite.
type Limits struct {
	Ops, Bytes, PerWrite int
}

// Elector is implemented by engines that several servers share (etcdkv;
// memkv in-process, for tests). A session ties keys to one server's
// liveness; an election picks one session as leader, in the order the
// sessions campaigned, and hands the leader a guard (Leadership.Cond) that
// fails as soon as it is no longer leader, so a deposed leader can never
// commit again.
type Elector interface {
	// NewSession starts a session, renewed in the background while the
	// engine is reachable. The engine ends it when it is not renewed
	// within ttl (the process died, froze, or was cut off from the
	// engine's quorum); the session ends (Done) when the engine says so,
	// on Close, or when no renewal went through for ttl past HeldUntil.
	// ctx bounds only the start.
	NewSession(ctx context.Context, ttl time.Duration) (Session, error)
	// Leader returns the value the leader of election name campaigned
	// with and the revision its candidacy was created at; ErrNotFound
	// when nobody leads.
	Leader(ctx context.Context, name string) (value []byte, rev uint64, err error)
}

// Session is one server's liveness lease.
type Session interface {
	// Done is closed once the session ended (expired, closed, or its
	// renewals failed for ttl past HeldUntil).
	Done() <-chan struct{}
	// HeldUntil is when the session is sure to hold until: the time the
	// last renewal the engine acknowledged was sent, plus ttl, on this
	// process's clock. The engine may end the session after it, and
	// another may then lead: a leader serves reads from its own state
	// only before it (less a margin for the drift between clocks), as
	// Raft's lease reads do.
	HeldUntil() time.Time
	// Put writes key bound to the session: it is deleted when the session
	// ends.
	Put(ctx context.Context, key, value []byte) error
	// Campaign enters election name with value and waits until this
	// session leads it (or ctx ends: the candidacy is then withdrawn). The
	// candidacy is a key under name that lives as long as the session.
	Campaign(ctx context.Context, name string, value []byte) (Leadership, error)
	// Close ends the session: its keys are deleted, its leadership ends.
	Close() error
}

// Leadership is a won election.
type Leadership interface {
	// Cond holds exactly while this leadership lasts: guard every commit
	// of the leader with it (Batch.If, TxnIf).
	Cond() Cond
	// Rev is the revision the candidacy was created at; later leaderships
	// of the same election have larger ones.
	Rev() uint64
	// Resign ends the leadership (the next candidate leads); the session
	// goes on.
	Resign(ctx context.Context) error
}

// Compactor is implemented by engines that keep a history of revisions
// until told to forget it (etcdkv: etcd's MVCC history, which otherwise
// grows until the cluster's space quota stops every write). Compact drops
// the history before rev: snapshots and watches from older revisions fail
// with ErrCompacted afterwards.
type Compactor interface {
	Compact(ctx context.Context, rev uint64) error
}

// Statuser is implemented by engines that can report their members and
// health (etcdkv).
type Statuser interface {
	Status(ctx context.Context) (Status, error)
}

// Status describes an engine: its latest revision and its members.
type Status struct {
	Engine   string // "etcd", "pebble", ...
	Revision uint64 // revision of the latest commit (0: unknown)
	Members  []Member
}

// Member is one member of a replicated engine.
type Member struct {
	Name     string
	Endpoint string
	Healthy  bool   // answered, and has a leader
	Leader   bool   // the member leading the replication
	Version  string // server version
	DBSize   int64  // bytes of its database file
	DBInUse  int64  // bytes of it in use (the rest is freed by defragmentation)
	Err      string // why it is not healthy
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

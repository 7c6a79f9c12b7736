// Package pebblekv is the embedded on-disk kv.Engine: CockroachDB's Pebble
// LSM. Commits go through Pebble's write-ahead log; unsynced commits survive
// a process crash (kill -9) because the WAL write has reached the kernel.
//
// Every write applies under one commit lock, so the store's state changes in
// revision order (a revision is the Pebble sequence number of a commit's
// last record: persistent, increasing, with gaps). A transaction reads from
// a Pebble snapshot; its commit re-reads, under the lock, the keys and
// ranges it read and retries if any changed — skipped when nothing was
// committed since its snapshot. Fsyncs wait outside the lock (group commit).
package pebblekv

import (
	"context"
	"errors"
	"io"
	"sort"
	"sync"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/kvbase"
)

// Options tunes the engine.
type Options struct {
	CacheBytes int64 // block cache; default DefaultCacheBytes
	// NoSync makes Txn return before its commit is fsynced (it still
	// survives a process crash): only for benchmarks and throw-away data.
	NoSync bool
	// WatchHistory is how many commits are kept for watchers starting in
	// the past (default kvbase.DefaultHistory). History starts at Open.
	WatchHistory int
}

// DefaultCacheBytes holds the index, filter and data blocks of about a
// million files (`kaon bench ns`: 1M files, 64 MiB gave 19k creates/s and
// 115k stats/s with most misses re-reading filter and index blocks; 128 MiB
// gave 27k and 148k, at 180 MiB RSS).
const DefaultCacheBytes = 128 << 20

// Engine wraps a Pebble database.
type Engine struct {
	db   *pebble.DB
	opts Options

	mu     sync.Mutex // commit lock
	rev    uint64     // revision of the last commit
	feed   *kvbase.Feed
	closed bool
}

// Open opens (creating if needed) the database in dir.
func Open(dir string, o Options) (*Engine, error) {
	if o.CacheBytes <= 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	cache := pebble.NewCache(o.CacheBytes)
	defer cache.Unref()
	opts := &pebble.Options{
		Cache:        cache,
		MemTableSize: 32 << 20,
		Logger:       quietLogger{},
	}
	// Bloom filters let a point lookup (every stat) skip tables that cannot
	// hold the key instead of searching each level.
	opts.Levels = make([]pebble.LevelOptions, 7)
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, err
	}
	// A batch holding only a log record takes no sequence number: its
	// SeqNum is the next one, so the last commit's is one less.
	b := db.NewBatch()
	_ = b.LogData(nil, nil)
	if err := b.Commit(pebble.NoSync); err != nil {
		db.Close()
		return nil, err
	}
	rev := b.SeqNum() - 1
	b.Close()
	return &Engine{db: db, opts: o, rev: rev, feed: kvbase.NewFeed(o.WatchHistory, rev)}, nil
}

func (e *Engine) Get(k []byte) ([]byte, error) {
	v, _, err := reader{e.db}.Get(k)
	return v, err
}

func (e *Engine) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	return reader{e.db}.Scan(start, end, func(k, v []byte, _ uint64) bool { return fn(k, v) })
}

// reader reads the live database or a snapshot.
type reader struct {
	r interface {
		Get([]byte) ([]byte, io.Closer, error)
		NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
	}
}

func (r reader) Get(k []byte) ([]byte, uint64, error) {
	v, closer, err := r.r.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, 0, kv.ErrNotFound
	}
	if err != nil {
		return nil, 0, err
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, 0, nil
}

func (r reader) Scan(start, end []byte, fn func(k, v []byte, ver uint64) bool) error {
	it, err := r.r.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		if !fn(it.Key(), it.Value(), 0) {
			break
		}
	}
	return errors.Join(it.Error(), it.Close())
}

// snapshot is a Pebble snapshot with the revision it sees.
type snapshot struct {
	reader
	snap *pebble.Snapshot
	rev  uint64
}

func (s *snapshot) Close() error { return s.snap.Close() }

func (e *Engine) snapshot() (*snapshot, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, kv.ErrClosed
	}
	s := e.db.NewSnapshot()
	return &snapshot{reader{s}, s, e.rev}, nil
}

// kvSnapshot adapts snapshot to kv.Snapshot.
type kvSnapshot struct{ *snapshot }

func (s kvSnapshot) Get(k []byte) ([]byte, error) {
	v, _, err := s.reader.Get(k)
	return v, err
}

func (s kvSnapshot) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	return s.reader.Scan(start, end, func(k, v []byte, _ uint64) bool { return fn(k, v) })
}

func (s kvSnapshot) Revision() uint64 { return s.rev }

func (e *Engine) Snapshot(context.Context) (kv.Snapshot, error) {
	s, err := e.snapshot()
	if err != nil {
		return nil, err
	}
	return kvSnapshot{s}, nil
}

func (e *Engine) Watch(ctx context.Context, prefix []byte, from uint64) <-chan kv.WatchResponse {
	return e.feed.Watch(ctx, prefix, from)
}

func (e *Engine) Txn(ctx context.Context, fn func(kv.Tx) error) error {
	return e.TxnIf(ctx, nil, fn)
}

func (e *Engine) TxnIf(ctx context.Context, conds []kv.Cond, fn func(kv.Tx) error) error {
	return kvbase.Retry(ctx, func() error {
		tx := kvbase.NewTx(func() (kvbase.View, error) { return e.snapshot() })
		defer tx.Close()
		if err := fn(tx); err != nil {
			return err
		}
		if err := tx.Err(); err != nil {
			return err
		}
		if tx.ReadOnly() && len(conds) == 0 {
			return nil // its reads came from one snapshot
		}
		b := &batch{e: e, b: e.db.NewBatch(), conds: conds, tx: tx}
		for _, w := range tx.Writes() {
			if w.Delete {
				b.Delete(w.Key)
			} else {
				b.Put(w.Key, w.Value)
			}
		}
		return b.Commit(!e.opts.NoSync)
	})
}

func (e *Engine) NewBatch() kv.Batch { return &batch{e: e, b: e.db.NewBatch()} }

// Close ends watches and closes the database; a second Close is a no-op.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.feed.Close()
	e.mu.Unlock()
	return e.db.Close()
}

// Barrier implements kv.Barrier: a synced write to the log makes every
// batch applied before it durable (the log is synced in order). A no-op
// with NoSync.
func (e *Engine) Barrier(context.Context) error {
	if e.opts.NoSync {
		return nil
	}
	// As a synced batch: queued under the commit lock, waited for
	// outside it (commits go on meanwhile).
	b := e.db.NewBatch()
	defer b.Close()
	_ = b.LogData(nil, nil)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return kv.ErrClosed
	}
	err := e.db.ApplyNoSyncWait(b, pebble.Sync)
	e.mu.Unlock()
	if err != nil {
		return err
	}
	return b.SyncWait()
}

type batch struct {
	e     *Engine
	b     *pebble.Batch
	conds []kv.Cond
	tx    *kvbase.Tx // the transaction whose reads must still hold, if any
	done  bool
	rev   uint64
}

func (b *batch) Rev() uint64 { return b.rev }

func (b *batch) Put(k, v []byte)     { _ = b.b.Set(k, v, nil) }
func (b *batch) Delete(k []byte)     { _ = b.b.Delete(k, nil) }
func (b *batch) If(conds ...kv.Cond) { b.conds = append(b.conds, conds...) }

func (b *batch) Discard() {
	if !b.done {
		b.done = true
		_ = b.b.Close()
	}
}

func (b *batch) Commit(sync bool) error {
	wait, err := b.Apply(sync)
	if err != nil {
		return err
	}
	return wait()
}

func (b *batch) Apply(sync bool) (func() error, error) {
	if b.done {
		return nil, errors.New("pebblekv: batch already committed or discarded")
	}
	e := b.e
	e.mu.Lock()
	if err := b.check(); err != nil {
		e.mu.Unlock()
		b.Discard()
		return nil, err
	}
	if b.b.Count() == 0 {
		e.mu.Unlock()
		b.Discard()
		return func() error { return nil }, nil
	}
	var err error
	b.done = true
	if sync {
		err = e.db.ApplyNoSyncWait(b.b, pebble.Sync)
	} else {
		err = e.db.Apply(b.b, pebble.NoSync)
	}
	if err != nil {
		e.mu.Unlock()
		_ = b.b.Close()
		return nil, err
	}
	rev := b.b.SeqNum() + uint64(b.b.Count()) - 1
	e.rev, b.rev = rev, rev
	repr := append([]byte(nil), b.b.Repr()...)
	e.feed.PublishLazy(rev, len(repr)+48*int(b.b.Count()), func() []kv.Event { return events(repr, rev) })
	e.mu.Unlock()
	if !sync {
		_ = b.b.Close()
		return func() error { return nil }, nil
	}
	return func() error {
		err := b.b.SyncWait()
		_ = b.b.Close()
		return err
	}, nil
}

// check runs under the commit lock: the conds must hold and the
// transaction's reads must be unchanged unless nothing was committed since
// its snapshot.
func (b *batch) check() error {
	e := b.e
	if e.closed {
		return kv.ErrClosed
	}
	live := reader{e.db}
	if err := kvbase.CheckConds(live, b.conds); err != nil {
		return err
	}
	if b.tx == nil {
		return nil
	}
	if s, ok := b.tx.View().(*snapshot); ok && s.rev != e.rev {
		same, err := b.tx.Validate(live)
		if err != nil {
			return err
		}
		if !same {
			return kvbase.ErrRetry
		}
	}
	return nil
}

// events decodes a committed batch (a private copy of its representation)
// into its change events, one per key (the last write), in key order.
func events(repr []byte, rev uint64) []kv.Event {
	r, n := pebble.ReadBatch(repr)
	evs := make([]kv.Event, 0, n)
	for {
		kind, k, v, ok, err := r.Next()
		if !ok || err != nil {
			break
		}
		ev := kv.Event{Rev: rev, Key: k, Value: v}
		if kind != pebble.InternalKeyKindSet {
			ev.Value, ev.Delete = nil, true
		} else if ev.Value == nil {
			ev.Value = []byte{}
		}
		evs = append(evs, ev)
	}
	sort.SliceStable(evs, func(i, j int) bool { return string(evs[i].Key) < string(evs[j].Key) })
	out := evs[:0]
	for i, ev := range evs {
		if i+1 < len(evs) && string(evs[i+1].Key) == string(ev.Key) {
			continue // a later write of the same key wins
		}
		out = append(out, ev)
	}
	return out
}

// quietLogger drops Pebble's informational chatter but keeps fatal errors.
type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{})  {}
func (quietLogger) Errorf(string, ...interface{}) {}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	panic(errors.New("pebble fatal: " + format))
}

var (
	_ io.Closer  = (*Engine)(nil)
	_ kv.Engine  = (*Engine)(nil)
	_ kv.Barrier = (*Engine)(nil)
)

// DiskUsage is the bytes the engine's files take on disk (kaon ns stat).
func (e *Engine) DiskUsage() (int64, error) {
	return int64(e.db.Metrics().DiskSpaceUsage()), nil
}

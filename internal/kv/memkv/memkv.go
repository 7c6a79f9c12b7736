// Package memkv is an in-memory kv.Engine for unit tests: a copy-on-write
// B-tree (google/btree) under one lock, so a snapshot is an O(1) clone and
// transactions are validated by re-reading under the lock. Enough for
// correctness, not for scale.
package memkv

import (
	"bytes"
	"context"
	"sync"

	"github.com/google/btree"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/kvbase"
)

type entry struct{ k, v []byte } // immutable once in the tree

func less(a, b entry) bool { return bytes.Compare(a.k, b.k) < 0 }

// Engine is the in-memory engine.
type Engine struct {
	mu     sync.RWMutex
	tree   *btree.BTreeG[entry]
	rev    uint64 // revision of the last commit
	feed   *kvbase.Feed
	closed bool
	el     elections
}

// New returns an empty engine.
func New() *Engine {
	return &Engine{tree: btree.NewG(16, less), feed: kvbase.NewFeed(0, 0)}
}

// view reads one tree version; the live tree is only read under e.mu.
type view struct {
	t   *btree.BTreeG[entry]
	rev uint64
}

func (v view) Get(k []byte) ([]byte, uint64, error) {
	if en, ok := v.t.Get(entry{k: k}); ok {
		return bytes.Clone(en.v), 0, nil
	}
	return nil, 0, kv.ErrNotFound
}

func (v view) Scan(start, end []byte, fn func(k, v []byte, ver uint64) bool) error {
	v.t.AscendGreaterOrEqual(entry{k: start}, func(en entry) bool {
		if end != nil && bytes.Compare(en.k, end) >= 0 {
			return false
		}
		return fn(en.k, en.v, 0)
	})
	return nil
}

// clone returns a private version of the tree for reading without the lock.
func (e *Engine) clone() (view, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return view{}, kv.ErrClosed
	}
	return view{e.tree.Clone(), e.rev}, nil
}

func (e *Engine) Get(k []byte) ([]byte, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	v, _, err := view{t: e.tree}.Get(k)
	return v, err
}

func (e *Engine) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	v, err := e.clone()
	if err != nil {
		return err
	}
	return v.Scan(start, end, func(k, v []byte, _ uint64) bool { return fn(k, v) })
}

// commit applies writes if conds hold and, for a transaction, its reads are
// unchanged.
// It returns the commit's revision (0 when it wrote nothing).
func (e *Engine) commit(ws []kvbase.Write, conds []kv.Cond, tx *kvbase.Tx) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return 0, kv.ErrClosed
	}
	live := view{t: e.tree}
	if err := kvbase.CheckConds(live, conds); err != nil {
		return 0, err
	}
	if tx != nil {
		if v, ok := tx.View().(view); ok && v.rev != e.rev {
			if same, err := tx.Validate(live); err != nil {
				return 0, err
			} else if !same {
				return 0, kvbase.ErrRetry
			}
		}
	}
	if len(ws) == 0 {
		return 0, nil
	}
	for _, w := range ws {
		if w.Delete {
			e.tree.Delete(entry{k: w.Key})
		} else {
			e.tree.ReplaceOrInsert(entry{w.Key, w.Value})
		}
	}
	e.rev++
	e.feed.Publish(e.rev, kvbase.Events(ws, e.rev))
	return e.rev, nil
}

func (e *Engine) Txn(ctx context.Context, fn func(kv.Tx) error) error {
	return e.TxnIf(ctx, nil, fn)
}

func (e *Engine) TxnIf(ctx context.Context, conds []kv.Cond, fn func(kv.Tx) error) error {
	return kvbase.Retry(ctx, func() error {
		tx := kvbase.NewTx(func() (kvbase.View, error) { return e.clone() })
		if err := fn(tx); err != nil {
			return err
		}
		if err := tx.Err(); err != nil {
			return err
		}
		if tx.ReadOnly() && len(conds) == 0 {
			return nil // its reads came from one snapshot
		}
		_, err := e.commit(tx.Writes(), conds, tx)
		return err
	})
}

type snapshot struct{ view }

func (s snapshot) Get(k []byte) ([]byte, error) {
	v, _, err := s.view.Get(k)
	return v, err
}

func (s snapshot) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	return s.view.Scan(start, end, func(k, v []byte, _ uint64) bool { return fn(k, v) })
}

func (s snapshot) Revision() uint64 { return s.rev }
func (s snapshot) Close() error     { return nil }

func (e *Engine) Snapshot(context.Context) (kv.Snapshot, error) {
	v, err := e.clone()
	if err != nil {
		return nil, err
	}
	return snapshot{v}, nil
}

func (e *Engine) Watch(ctx context.Context, prefix []byte, from uint64) <-chan kv.WatchResponse {
	return e.feed.Watch(ctx, prefix, from)
}

func (e *Engine) NewBatch() kv.Batch { return &batch{e: e} }

// Close ends watches; later operations fail with kv.ErrClosed.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	e.feed.Close()
	return nil
}

type batch struct {
	e     *Engine
	ws    kvbase.WriteSet
	conds []kv.Cond
	rev   uint64
}

func (b *batch) Put(k, v []byte)        { b.ws.Put(k, v) }
func (b *batch) Delete(k []byte)        { b.ws.Delete(k) }
func (b *batch) If(conds ...kv.Cond)    { b.conds = append(b.conds, conds...) }
func (b *batch) Discard()               { b.ws.Reset(); b.conds = nil }
func (b *batch) Commit(sync bool) error { _, err := b.Apply(sync); return err }

func (b *batch) Rev() uint64 { return b.rev }

func (b *batch) Apply(bool) (func() error, error) {
	rev, err := b.e.commit(b.ws.All(), b.conds, nil)
	b.rev = rev
	b.Discard()
	if err != nil {
		return nil, err
	}
	return func() error { return nil }, nil
}

var _ kv.Engine = (*Engine)(nil)

// Package memkv is an in-memory kv.Engine for unit tests: a sorted slice
// under a RWMutex, enough for correctness, not for scale.
package memkv

import (
	"bytes"
	"sort"
	"sync"

	"github.com/kaon-storage/kaon/internal/kv"
)

type entry struct{ k, v []byte }

// Engine is the in-memory engine.
type Engine struct {
	mu   sync.RWMutex
	data []entry
}

// New returns an empty engine.
func New() *Engine { return &Engine{} }

func (e *Engine) find(k []byte) (int, bool) {
	i := sort.Search(len(e.data), func(i int) bool { return bytes.Compare(e.data[i].k, k) >= 0 })
	return i, i < len(e.data) && bytes.Equal(e.data[i].k, k)
}

func (e *Engine) Get(k []byte) ([]byte, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if i, ok := e.find(k); ok {
		return bytes.Clone(e.data[i].v), nil
	}
	return nil, kv.ErrNotFound
}

func (e *Engine) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	e.mu.RLock()
	i, _ := e.find(start)
	var snap []entry
	for ; i < len(e.data); i++ {
		if end != nil && bytes.Compare(e.data[i].k, end) >= 0 {
			break
		}
		snap = append(snap, e.data[i])
	}
	e.mu.RUnlock()
	for _, en := range snap {
		if !fn(en.k, en.v) {
			break
		}
	}
	return nil
}

func (e *Engine) NewBatch() kv.Batch { return &batch{e: e} }
func (e *Engine) Close() error       { return nil }

type op struct {
	k, v []byte
	del  bool
}

type batch struct {
	e   *Engine
	ops []op
}

func (b *batch) Put(k, v []byte) { b.ops = append(b.ops, op{k: bytes.Clone(k), v: bytes.Clone(v)}) }
func (b *batch) Delete(k []byte) { b.ops = append(b.ops, op{k: bytes.Clone(k), del: true}) }
func (b *batch) Discard()        { b.ops = nil }

func (b *batch) Apply(sync bool) (func() error, error) {
	return func() error { return nil }, b.Commit(sync)
}

func (b *batch) Commit(bool) error {
	e := b.e
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, o := range b.ops {
		i, ok := e.find(o.k)
		switch {
		case o.del && ok:
			e.data = append(e.data[:i], e.data[i+1:]...)
		case o.del:
		case ok:
			e.data[i].v = o.v
		default:
			e.data = append(e.data, entry{})
			copy(e.data[i+1:], e.data[i:])
			e.data[i] = entry{o.k, o.v}
		}
	}
	b.ops = nil
	return nil
}

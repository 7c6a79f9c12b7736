// Package kvbase holds what every kv engine would otherwise write again: the
// optimistic transaction (a write buffer over a read view, recording what fn
// read), the bounded retry loop, and the in-memory change feed of the local
// engines. An engine supplies a View at one revision and a commit step that
// checks, atomically with applying the writes, that the recorded reads still
// hold: etcdkv turns them into compares of one etcd Txn, the local engines
// re-read them under their commit lock (Validate).
package kvbase

import (
	"bytes"
	"errors"
	"io"

	"github.com/google/btree"
	"github.com/kaon-storage/kaon/internal/kv"
)

// View is the store at one revision, as a transaction reads it. Ver is the
// engine's version of a value (etcd: its ModRevision), or 0 for engines
// that validate by comparing values. A View may implement io.Closer.
type View interface {
	// Get returns the value (owned by the caller) and its version, or
	// kv.ErrNotFound.
	Get(key []byte) ([]byte, uint64, error)
	// Scan is kv.Reader.Scan with versions.
	Scan(start, end []byte, fn func(key, value []byte, ver uint64) bool) error
}

// Read is one key a transaction read from its view: absent, or present
// with Value at version Ver.
type Read struct {
	Key   []byte
	Found bool
	Value []byte
	Ver   uint64
}

// Range is a key range a transaction scanned from its view, [Start, End)
// (End nil: unbounded), and every key it saw there, in order.
type Range struct {
	Start, End []byte
	Seen       []Read
}

// Tx implements kv.Tx over a View opened at the first read.
type Tx struct {
	open   func() (View, error)
	view   View
	writes WriteSet
	reads  map[string]int // key -> index in Reads
	Reads  []Read
	Ranges []Range
	err    error // first read error: the transaction cannot commit
}

// NewTx starts a transaction; open is called at its first read.
func NewTx(open func() (View, error)) *Tx {
	return &Tx{open: open}
}

// View returns the view the transaction read from, nil if it read nothing.
func (tx *Tx) View() View { return tx.view }

// Err is the first error a read returned; a transaction with one must not
// commit, even if fn ignored it.
func (tx *Tx) Err() error { return tx.err }

// Writes returns the buffered writes, one per key, in key order.
func (tx *Tx) Writes() []Write { return tx.writes.All() }

// ReadOnly reports whether the transaction wrote nothing.
func (tx *Tx) ReadOnly() bool { return tx.writes.Len() == 0 }

// Close releases the view.
func (tx *Tx) Close() {
	if c, ok := tx.view.(io.Closer); ok {
		_ = c.Close()
	}
	tx.view = nil
}

func (tx *Tx) ensureView() (View, error) {
	if tx.err != nil {
		return nil, tx.err
	}
	if tx.view == nil {
		v, err := tx.open()
		if err != nil {
			tx.err = err
			return nil, err
		}
		tx.view = v
	}
	return tx.view, nil
}

func (tx *Tx) Put(key, value []byte) { tx.writes.Put(key, value) }
func (tx *Tx) Delete(key []byte)     { tx.writes.Delete(key) }

func (tx *Tx) Get(key []byte) ([]byte, error) {
	if w, ok := tx.writes.Get(key); ok {
		if w.Delete {
			return nil, kv.ErrNotFound
		}
		return bytes.Clone(w.Value), nil
	}
	if i, ok := tx.reads[string(key)]; ok {
		if r := tx.Reads[i]; r.Found {
			return bytes.Clone(r.Value), nil
		}
		return nil, kv.ErrNotFound
	}
	view, err := tx.ensureView()
	if err != nil {
		return nil, err
	}
	v, ver, err := view.Get(key)
	found := err == nil
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		tx.err = err
		return nil, err
	}
	if tx.reads == nil {
		tx.reads = map[string]int{}
	}
	tx.reads[string(key)] = len(tx.Reads)
	tx.Reads = append(tx.Reads, Read{Key: bytes.Clone(key), Found: found, Value: v, Ver: ver})
	if !found {
		return nil, kv.ErrNotFound
	}
	return bytes.Clone(v), nil
}

// Scan merges the view with the buffered writes. It records the range up
// to where fn stopped and every key of the view in it.
func (tx *Tx) Scan(start, end []byte, fn func(key, value []byte) bool) error {
	view, err := tx.ensureView()
	if err != nil {
		return err
	}
	ws := tx.writes.Range(start, end)
	rg := Range{Start: bytes.Clone(start), End: bytes.Clone(end)}
	var stopAt []byte // key where fn returned false
	wi := 0
	err = view.Scan(start, end, func(k, v []byte, ver uint64) bool {
		// Buffered writes before k come first.
		for ; wi < len(ws) && bytes.Compare(ws[wi].Key, k) < 0; wi++ {
			if w := ws[wi]; !w.Delete && !fn(w.Key, w.Value) {
				stopAt = w.Key
				return false
			}
		}
		rg.Seen = append(rg.Seen, Read{Key: bytes.Clone(k), Found: true, Value: bytes.Clone(v), Ver: ver})
		if wi < len(ws) && bytes.Equal(ws[wi].Key, k) {
			w := ws[wi]
			wi++
			if w.Delete {
				return true
			}
			k, v = w.Key, w.Value
		}
		if !fn(k, v) {
			stopAt = rg.Seen[len(rg.Seen)-1].Key
			return false
		}
		return true
	})
	if err != nil {
		tx.err = err
		return err
	}
	if stopAt != nil {
		rg.End = append(bytes.Clone(stopAt), 0) // the range seen ends just after stopAt
	} else {
		for ; wi < len(ws); wi++ {
			if w := ws[wi]; !w.Delete && !fn(w.Key, w.Value) {
				break
			}
		}
	}
	tx.Ranges = append(tx.Ranges, rg)
	return nil
}

// Validate re-reads everything the transaction read from cur, the current
// state under the engine's commit lock, and reports whether it is unchanged
// (values compared, versions ignored).
func (tx *Tx) Validate(cur View) (bool, error) {
	for _, r := range tx.Reads {
		v, _, err := cur.Get(r.Key)
		if errors.Is(err, kv.ErrNotFound) {
			if r.Found {
				return false, nil
			}
			continue
		}
		if err != nil {
			return false, err
		}
		if !r.Found || !bytes.Equal(v, r.Value) {
			return false, nil
		}
	}
	for _, rg := range tx.Ranges {
		i, same := 0, true
		err := cur.Scan(rg.Start, rg.End, func(k, v []byte, _ uint64) bool {
			if i >= len(rg.Seen) || !bytes.Equal(k, rg.Seen[i].Key) || !bytes.Equal(v, rg.Seen[i].Value) {
				same = false
				return false
			}
			i++
			return true
		})
		if err != nil {
			return false, err
		}
		if !same || i < len(rg.Seen) {
			return false, nil
		}
	}
	return true, nil
}

// CheckConds returns kv.ErrCondFailed unless every cond holds in cur.
func CheckConds(cur View, conds []kv.Cond) error {
	for _, c := range conds {
		v, _, err := cur.Get(c.Key)
		switch {
		case errors.Is(err, kv.ErrNotFound):
			if !c.Absent {
				return kv.ErrCondFailed
			}
		case err != nil:
			return err
		case c.Absent || !bytes.Equal(v, c.Value):
			return kv.ErrCondFailed
		}
	}
	return nil
}

// Write is one buffered write.
type Write struct {
	Key, Value []byte
	Delete     bool
}

// WriteSet buffers writes, the last write of a key replacing earlier ones.
// The zero value is empty.
type WriteSet struct{ t *btree.BTreeG[Write] }

func (s *WriteSet) set(w Write) {
	if s.t == nil {
		s.t = btree.NewG(8, func(a, b Write) bool { return bytes.Compare(a.Key, b.Key) < 0 })
	}
	s.t.ReplaceOrInsert(w)
}

// Put buffers a copy of key and value.
func (s *WriteSet) Put(key, value []byte) {
	s.set(Write{Key: bytes.Clone(key), Value: append(make([]byte, 0, len(value)), value...)})
}

// Delete buffers a delete of key.
func (s *WriteSet) Delete(key []byte) { s.set(Write{Key: bytes.Clone(key), Delete: true}) }

// Len is the number of keys written.
func (s *WriteSet) Len() int {
	if s.t == nil {
		return 0
	}
	return s.t.Len()
}

// Get returns the buffered write of key.
func (s *WriteSet) Get(key []byte) (Write, bool) {
	if s.t == nil {
		return Write{}, false
	}
	return s.t.Get(Write{Key: key})
}

// Range returns the writes in [start, end) (end nil: unbounded) in order.
func (s *WriteSet) Range(start, end []byte) []Write {
	if s.t == nil {
		return nil
	}
	var out []Write
	s.t.AscendGreaterOrEqual(Write{Key: start}, func(w Write) bool {
		if end != nil && bytes.Compare(w.Key, end) >= 0 {
			return false
		}
		out = append(out, w)
		return true
	})
	return out
}

// All returns every write in key order.
func (s *WriteSet) All() []Write { return s.Range(nil, nil) }

// Reset empties the set.
func (s *WriteSet) Reset() { s.t = nil }

// Events turns writes into the change events of one commit.
func Events(ws []Write, rev uint64) []kv.Event {
	evs := make([]kv.Event, len(ws))
	for i, w := range ws {
		evs[i] = kv.Event{Rev: rev, Key: w.Key, Value: w.Value, Delete: w.Delete}
		if w.Delete {
			evs[i].Value = nil
		}
	}
	return evs
}

// Package kv is the seam between the namespace and its storage engine: a
// small transactional, ordered key-value interface. The embedded default is
// Pebble on local disk (package pebblekv); memkv is an in-memory engine for
// unit tests. Every engine must pass kvtest.Run.
package kv

import "errors"

// ErrNotFound is returned by Get for a missing key.
var ErrNotFound = errors.New("kv: key not found")

// Engine is an ordered key-value store with atomic batches.
type Engine interface {
	// Get returns a copy of the value stored under key, or ErrNotFound.
	Get(key []byte) ([]byte, error)
	// Scan calls fn for each key in [start, end) in ascending order until fn
	// returns false. end == nil means no upper bound. Key and value are only
	// valid during the call.
	Scan(start, end []byte, fn func(key, value []byte) bool) error
	// NewBatch starts an atomic write batch.
	NewBatch() Batch
	Close() error
}

// Batch collects writes that become visible together on Commit.
type Batch interface {
	Put(key, value []byte)
	Delete(key []byte)
	// Commit applies all writes atomically. sync asks the engine to make the
	// batch durable against power loss before returning; without it the batch
	// survives a process crash (it is in the OS page cache) but not power loss.
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

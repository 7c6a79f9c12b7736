package kvbase

import (
	"bytes"
	"context"
	"sort"
	"sync"

	"github.com/kaon-storage/kaon/internal/kv"
)

// DefaultHistory is how many commits a Feed keeps for watchers that start
// in the past or fall behind, as long as they hold at most historyBytes.
const DefaultHistory = 4096

const historyBytes = 64 << 20

// maxResponse bounds the events of one watch response (whole commits are
// never split, so a big commit may exceed it).
const maxResponse = 1024

// Feed is the change feed of a local engine: the newest commits in a ring,
// published in revision order under the engine's commit lock. History
// starts when the engine is opened: a watch from an earlier revision, or a
// watcher that falls more than the ring (or 64 MiB of changes) behind, gets
// kv.ErrCompacted.
type Feed struct {
	mu      sync.Mutex
	ring    []commit // oldest at head
	head, n int
	bytes   int    // size of the kept commits
	horizon uint64 // lowest revision whose commits are all kept
	last    uint64 // revision of the newest commit
	notify  chan struct{}
	closed  bool
}

type commit struct {
	rev    uint64
	size   int
	events []kv.Event
	decode func() []kv.Event // when events is nil: builds them on first use
}

// NewFeed starts a feed after revision rev keeping size commits (default
// DefaultHistory).
func NewFeed(size int, rev uint64) *Feed {
	if size <= 0 {
		size = DefaultHistory
	}
	return &Feed{ring: make([]commit, size), horizon: rev + 1, last: rev, notify: make(chan struct{})}
}

// Publish records the events of the commit at rev (greater than every
// earlier one). Events must not be modified afterwards.
func (f *Feed) Publish(rev uint64, events []kv.Event) {
	size := 0
	for _, e := range events {
		size += len(e.Key) + len(e.Value) + 48
	}
	f.publish(commit{rev: rev, size: size, events: events})
}

// PublishLazy is Publish with events built by decode when a watcher first
// needs them, keeping the work out of the engine's commit lock; size is
// about the memory they hold.
func (f *Feed) PublishLazy(rev uint64, size int, decode func() []kv.Event) {
	f.publish(commit{rev: rev, size: size, decode: decode})
}

func (f *Feed) publish(c commit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.n > 0 && (f.n == len(f.ring) || f.bytes+c.size > historyBytes) {
		f.horizon = f.ring[f.head].rev + 1
		f.bytes -= f.ring[f.head].size
		f.ring[f.head] = commit{}
		f.head = (f.head + 1) % len(f.ring)
		f.n--
	}
	f.ring[(f.head+f.n)%len(f.ring)] = c
	f.n++
	f.bytes += c.size
	f.last = c.rev
	close(f.notify)
	f.notify = make(chan struct{})
}

// Close ends every watch with kv.ErrClosed once it has delivered what was
// published.
func (f *Feed) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.notify)
	}
}

// Watch implements kv.Engine.Watch.
func (f *Feed) Watch(ctx context.Context, prefix []byte, from uint64) <-chan kv.WatchResponse {
	ch := make(chan kv.WatchResponse, 1)
	f.mu.Lock()
	if from == 0 {
		from = f.last + 1
	}
	f.mu.Unlock()
	prefix = bytes.Clone(prefix)
	go func() {
		defer close(ch)
		next := from
		for {
			resp, wait, done := f.collect(prefix, &next)
			if len(resp.Events) > 0 || resp.Err != nil {
				select {
				case ch <- resp:
				case <-ctx.Done():
					return
				}
			}
			if done {
				return
			}
			if wait != nil {
				select {
				case <-wait:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch
}

// collect gathers the events under prefix of the commits from *next on
// and advances *next past them. It returns a channel to wait on when there
// was nothing new, and done when the watch ends with resp.
func (f *Feed) collect(prefix []byte, next *uint64) (resp kv.WatchResponse, wait <-chan struct{}, done bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *next < f.horizon {
		return kv.WatchResponse{Err: kv.ErrCompacted}, nil, true
	}
	at := func(i int) *commit { return &f.ring[(f.head+i)%len(f.ring)] }
	i := sort.Search(f.n, func(i int) bool { return at(i).rev >= *next })
	if i == f.n {
		if f.closed {
			return kv.WatchResponse{Err: kv.ErrClosed}, nil, true
		}
		return resp, f.notify, false
	}
	for ; i < f.n && len(resp.Events) < maxResponse; i++ {
		c := at(i)
		if c.events == nil && c.decode != nil {
			c.events, c.decode = c.decode(), nil
		}
		for _, e := range c.events {
			if bytes.HasPrefix(e.Key, prefix) {
				resp.Events = append(resp.Events, e)
			}
		}
		*next = c.rev + 1
	}
	return resp, nil, false
}

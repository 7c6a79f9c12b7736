package namespace

import (
	"context"
	"fmt"
	"sync"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// EventKind says what changed.
type EventKind uint8

const (
	Created     EventKind = iota + 1 // an upload began: a pending file (not visible yet)
	Committed                        // a file became visible (upload committed, or empty file created)
	Mkdir                            // a container was created
	Removed                          // a file or container was unlinked (also a file replaced by another)
	Renamed                          // an entry moved (From/FromName → Parent/Name)
	AttrChanged                      // mode, owner, extended attributes or checksums changed
	Modified                         // a file's bytes changed in place (an update or a truncation committed)
)

func (k EventKind) String() string {
	switch k {
	case Created:
		return "created"
	case Committed:
		return "committed"
	case Mkdir:
		return "mkdir"
	case Removed:
		return "removed"
	case Renamed:
		return "renamed"
	case AttrChanged:
		return "attr"
	case Modified:
		return "modified"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one change of the namespace, in commit order. Rev numbers
// events from 1 since the namespace was opened: the feed is for caches
// and watchers that live with this process (leases, invalidations), which
// start from a fresh read when it restarts. A replicated engine's own
// change stream (etcd's watch) can carry the same events across
// processes.
type Event struct {
	Rev      uint64
	Kind     EventKind
	Ino      uint64 // the inode concerned
	Parent   uint64 // its container (the destination of a rename)
	Name     string
	IsDir    bool
	From     uint64 // a rename's source container
	FromName string // and name
	// Size and MTime (unix ns) of a file whose content became visible
	// (Committed): what a cache of its attributes needs.
	Size  int64
	MTime int64
	// DataVersion of a file whose content changed in place (Modified).
	DataVersion uint64
}

// feed keeps the newest events in a ring for readers that poll.
type feed struct {
	mu     sync.Mutex
	ring   []Event
	next   uint64        // Rev of the next event
	notify chan struct{} // closed when events arrive
}

func newFeed(size int) *feed {
	if size <= 0 {
		size = 1 << 16
	}
	return &feed{ring: make([]Event, size), next: 1, notify: make(chan struct{})}
}

// publish numbers and stores events (called in commit order).
func (f *feed) publish(evs []Event) {
	if len(evs) == 0 {
		return
	}
	f.mu.Lock()
	for _, e := range evs {
		e.Rev = f.next
		f.ring[f.next%uint64(len(f.ring))] = e
		f.next++
	}
	close(f.notify)
	f.notify = make(chan struct{})
	f.mu.Unlock()
}

// Revision is the Rev of the newest event (0 before any).
func (ns *Namespace) Revision() uint64 {
	ns.feed.mu.Lock()
	defer ns.feed.mu.Unlock()
	return ns.feed.next - 1
}

// Changes returns up to max events after revision after, in order,
// waiting until there is at least one or ctx ends. If events after
// `after` were already dropped from the ring (the reader fell too far
// behind) it fails with a Busy error saying so: the reader must re-read
// what it caches and continue from Revision().
func (ns *Namespace) Changes(ctx context.Context, after uint64, max int) ([]Event, error) {
	f := ns.feed
	for {
		f.mu.Lock()
		oldest := uint64(1)
		if f.next > uint64(len(f.ring)) {
			oldest = f.next - uint64(len(f.ring))
		}
		if after+1 < oldest {
			f.mu.Unlock()
			return nil, kerr.New(kerr.Busy, "changes", fmt.Sprint(after), fmt.Sprintf("events after revision %d were dropped (oldest kept: %d)", after, oldest))
		}
		if after+1 < f.next {
			var out []Event
			for r := after + 1; r < f.next && len(out) < max; r++ {
				out = append(out, f.ring[r%uint64(len(f.ring))])
			}
			f.mu.Unlock()
			return out, nil
		}
		wait := f.notify
		f.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

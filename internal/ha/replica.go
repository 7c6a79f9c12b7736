package ha

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/kv"
)

// Replica is a namespace server's local copy of the namespace: every key
// under NSPrefix of the shared engine, without the prefix, in a local
// engine (Pebble on the data disk, so memory stays bounded), loaded once
// and then fed by the shared engine's watch. It watches the whole
// instance, so its revision follows the shared engine's even when only
// other keys (server status, elections) change, and other keys are handed
// to OnOther. While its server is active the watch is paused and the
// server's own commits feed it (Pause, Apply, Resume): nobody else writes
// the namespace then, and the shared engine need not send each commit
// back.
type Replica struct {
	remote kv.Engine
	local  kv.Engine
	log    *slog.Logger

	mu      sync.Mutex
	applied uint64        // revision the local copy is at
	loaded  bool          // the initial load finished
	notify  chan struct{} // closed and replaced whenever applied moves
	err     error         // why the copy is not following the shared engine now

	// onOther receives changes of keys outside NSPrefix.
	onOther func(kv.Event)
	hookMu  sync.Mutex

	// applyMu orders what changes the local copy: the watch's batches,
	// and the active server's own while paused.
	applyMu sync.Mutex
	paused  bool
	stop    context.CancelFunc // ends the current watch
	resume  chan struct{}      // closed by Resume
}

// loadPage is how many keys a load reads and compares per step.
const loadPage = 1000

// NewReplica copies the namespace of remote into local.
func NewReplica(remote, local kv.Engine, log *slog.Logger) *Replica {
	if log == nil {
		log = slog.Default()
	}
	return &Replica{remote: remote, local: local, log: log, notify: make(chan struct{})}
}

// SetOnOther sets the callback for keys outside the namespace.
func (r *Replica) SetOnOther(fn func(kv.Event)) {
	r.hookMu.Lock()
	defer r.hookMu.Unlock()
	r.onOther = fn
}

func (r *Replica) other() func(kv.Event) {
	r.hookMu.Lock()
	defer r.hookMu.Unlock()
	return r.onOther
}

// Pause stops following the watch; once it returns nothing of the watch
// is applied any more, and Apply feeds the copy.
func (r *Replica) Pause() {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	if r.paused {
		return
	}
	r.paused, r.resume = true, make(chan struct{})
	if r.stop != nil {
		r.stop()
	}
}

// Resume follows the watch again, from the copy's revision on.
func (r *Replica) Resume() {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	if r.paused {
		r.paused = false
		close(r.resume)
	}
}

// Apply writes the namespace keys committed at rev by this server into
// the copy, while paused; once resumed it does nothing (the watch brings
// them, in order with what others committed since).
func (r *Replica) Apply(rev uint64, ws []write) error {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	if !r.paused {
		return nil
	}
	b := r.local.NewBatch()
	for _, w := range ws {
		if w.del {
			b.Delete(w.key)
		} else {
			b.Put(w.key, w.val)
		}
	}
	if err := b.Commit(false); err != nil {
		return err
	}
	r.advance(rev)
	return nil
}

// Applied is the revision the local copy is at.
func (r *Replica) Applied() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied
}

// Err says why the copy does not follow the shared engine now (nil while
// it does).
func (r *Replica) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *Replica) setErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

func (r *Replica) advance(rev uint64) {
	r.mu.Lock()
	if rev > r.applied {
		r.applied = rev
		close(r.notify)
		r.notify = make(chan struct{})
	}
	r.mu.Unlock()
}

// WaitApplied waits until the local copy reached rev.
func (r *Replica) WaitApplied(ctx context.Context, rev uint64) error {
	for {
		r.mu.Lock()
		applied, ch := r.applied, r.notify
		r.mu.Unlock()
		if applied >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Get and Scan read the local copy.
func (r *Replica) Get(k []byte) ([]byte, error) { return r.local.Get(k) }
func (r *Replica) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	return r.local.Scan(start, end, fn)
}

// Run loads the copy and follows the shared engine until ctx ends. When
// the watch fails it resumes from where it was (reloading if the shared
// engine compacted that history away); Err says meanwhile why it is
// behind.
func (r *Replica) Run(ctx context.Context) {
	backoff := newBackoff()
	for ctx.Err() == nil {
		r.applyMu.Lock()
		paused, resume := r.paused, r.resume
		r.applyMu.Unlock()
		if paused {
			select {
			case <-resume:
			case <-ctx.Done():
			}
			continue
		}
		if !r.isLoaded() {
			if err := r.load(ctx); err != nil {
				r.setErr(err)
				if ctx.Err() == nil {
					r.log.Warn("namespace replica: load failed", "err", err)
				}
				backoff.wait(ctx)
				continue
			}
		}
		err := r.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errPaused) {
			continue
		}
		r.setErr(err)
		if errors.Is(err, kv.ErrCompacted) {
			r.log.Warn("namespace replica: history compacted past the copy's revision, reloading", "applied", r.Applied())
			r.mu.Lock()
			r.loaded = false
			r.mu.Unlock()
			continue
		}
		r.log.Warn("namespace replica: watch ended", "applied", r.Applied(), "err", err)
		backoff.wait(ctx)
	}
}

func (r *Replica) isLoaded() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loaded
}

// WaitLoaded waits until the first load finished.
func (r *Replica) WaitLoaded(ctx context.Context) error {
	for {
		r.mu.Lock()
		loaded, ch := r.loaded, r.notify
		r.mu.Unlock()
		if loaded {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// load makes the local copy equal to the shared engine at one revision,
// page by page, writing only differences (a restarted server's copy is
// mostly current already).
func (r *Replica) load(ctx context.Context) error {
	start := time.Now()
	snap, err := r.remote.Snapshot(ctx)
	if err != nil {
		return err
	}
	defer snap.Close()
	rev := snap.Revision()
	from := NSPrefix
	end := kv.PrefixEnd(NSPrefix)
	var keys, changed int
	for {
		type pair struct{ k, v []byte }
		var page []pair
		if err := snap.Scan(from, end, func(k, v []byte) bool {
			page = append(page, pair{bytes.Clone(k[len(NSPrefix):]), bytes.Clone(v)})
			return len(page) < loadPage
		}); err != nil {
			return err
		}
		// The local keys of this page's range: from the page's first key
		// (or where the last page ended) to past its last one.
		lo := from[len(NSPrefix):]
		var hi []byte
		if len(page) == loadPage {
			hi = append(bytes.Clone(page[len(page)-1].k), 0)
		}
		b := r.local.NewBatch()
		i, n := 0, 0
		err := r.local.Scan(lo, hi, func(k, v []byte) bool {
			for i < len(page) && bytes.Compare(page[i].k, k) < 0 {
				b.Put(page[i].k, page[i].v) // missing here
				i, n = i+1, n+1
			}
			if i < len(page) && bytes.Equal(page[i].k, k) {
				if !bytes.Equal(page[i].v, v) {
					b.Put(page[i].k, page[i].v)
					n++
				}
				i++
				return true
			}
			b.Delete(bytes.Clone(k)) // gone from the shared engine
			n++
			return true
		})
		if err != nil {
			b.Discard()
			return err
		}
		for ; i < len(page); i++ {
			b.Put(page[i].k, page[i].v)
			n++
		}
		if err := b.Commit(false); err != nil {
			return err
		}
		keys, changed = keys+len(page), changed+n
		if hi == nil {
			break
		}
		from = append(bytes.Clone(NSPrefix), hi...)
	}
	r.mu.Lock()
	r.loaded = true
	r.err = nil
	r.mu.Unlock()
	r.setApplied(rev)
	r.log.Info("namespace replica loaded", "revision", rev, "keys", keys, "changed", changed, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// setApplied moves the revision (a load may move it backwards: the watch
// resumes from there).
func (r *Replica) setApplied(rev uint64) {
	r.mu.Lock()
	r.applied = rev
	close(r.notify)
	r.notify = make(chan struct{})
	r.mu.Unlock()
}

var errPaused = errors.New("replica paused")

// follow applies the watch from the copy's revision on, until it fails or
// is paused.
func (r *Replica) follow(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.applyMu.Lock()
	if r.paused {
		r.applyMu.Unlock()
		return errPaused
	}
	r.stop = cancel
	r.applyMu.Unlock()
	w := r.remote.Watch(wctx, nil, r.Applied()+1)
	first := true
	for resp := range w {
		r.applyMu.Lock()
		if r.paused {
			r.applyMu.Unlock()
			return errPaused
		}
		err := r.applyWatch(resp, first)
		r.applyMu.Unlock()
		if err != nil {
			return err
		}
		first = false
	}
	r.applyMu.Lock()
	paused := r.paused
	r.applyMu.Unlock()
	switch {
	case paused:
		return errPaused
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return kv.ErrClosed
}

// applyWatch applies one watch response. Caller holds applyMu.
func (r *Replica) applyWatch(resp kv.WatchResponse, first bool) error {
	if resp.Err != nil {
		return resp.Err
	}
	if first {
		r.setErr(nil)
	}
	onOther := r.other()
	b := r.local.NewBatch()
	var rev uint64
	for _, ev := range resp.Events {
		rev = ev.Rev
		if !bytes.HasPrefix(ev.Key, NSPrefix) {
			if onOther != nil {
				onOther(ev)
			}
			continue
		}
		k := ev.Key[len(NSPrefix):]
		if ev.Delete {
			b.Delete(k)
		} else {
			b.Put(k, ev.Value)
		}
	}
	if err := b.Commit(false); err != nil {
		return err
	}
	r.advance(rev)
	return nil
}

// backoff spaces retries: 100ms doubling to 2s.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{d: 100 * time.Millisecond} }

func (b *backoff) wait(ctx context.Context) {
	select {
	case <-time.After(b.d):
	case <-ctx.Done():
	}
	b.d = min(2*b.d, 2*time.Second)
}

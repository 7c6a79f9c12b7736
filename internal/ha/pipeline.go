package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/btree"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
)

// Pipeline is the kv.Store of the active namespace server: the namespace
// applies its batches here in order, under its own lock, as it does on
// Pebble; they become visible at once to the server's own reads (an
// overlay over the replica) and are committed to the shared engine in
// groups, each group one guarded commit (the leadership's Cond), so a
// deposed server commits nothing. A batch's wait returns when its group
// committed. A committed group is written to the replica (paused while
// the server is active) and its writes leave the overlay.
//
// Groups are committed one at a time, in order: a group is everything
// applied while the previous one was in flight (bounded by the engine's
// Limits), so the rate follows the offered load. A key written by several
// batches of a group is written once. When a commit fails for a reason
// that may pass (a member lost, an election in etcd) it is sent again
// until Retry has passed: a group is idempotent (same keys, same values,
// nothing committed after it) as long as the guard holds. Any other
// failure, or a refused guard, ends the pipeline: every waiting and later
// batch fails, and the server must give up the active role (its memory is
// ahead of the shared engine).
type Pipeline struct {
	remote  kv.Engine
	replica *Replica
	guard   kv.Cond
	limits  kv.Limits
	retry   time.Duration

	mu       sync.Mutex
	overlay  *btree.BTreeG[*ovEntry]
	queue    []*pbatch     // applied, not yet in a group
	seq      uint64        // sequence of the last applied batch
	inflight bool          // a group is being committed
	flying   []*pbatch     // its batches (whoever takes them out releases them)
	last     uint64        // revision of the last committed group
	through  uint64        // sequence of the last batch committed
	progress chan struct{} // closed and replaced when a group committed
	groups   uint64        // groups committed
	batches  uint64        // batches committed
	refuse   error         // set: Apply refuses new batches with it (handover)
	failed   error         // set: the pipeline ended
	kick     chan struct{}
	idle     chan struct{} // closed and replaced when the queue drained
	done     chan struct{} // closed when the pipeline ended
}

type ovEntry struct {
	key, val []byte
	del      bool
	seq      uint64 // batch that wrote it last
}

func ovLess(a, b *ovEntry) bool { return bytes.Compare(a.key, b.key) < 0 }

// pbatch is one applied batch waiting for its group.
type pbatch struct {
	seq    uint64
	writes []write
	done   chan struct{}
	err    error
}

type write struct {
	key, val []byte
	del      bool
}

// ErrHandover is what batches get while the active role is handed over.
var ErrHandover = errors.New("the active namespace server is handing over to another")

// newPipeline starts committing to remote under guard. Retry bounds how
// long a group is sent again after failures that may pass (twice the
// lease: a session whose renewals fail that long gives up anyway).
func newPipeline(remote kv.Engine, replica *Replica, guard kv.Cond, retry time.Duration) *Pipeline {
	lim := kv.Limits{Ops: 128, Bytes: 3 << 19, PerWrite: 64}
	if l, ok := remote.(kv.Limiter); ok {
		lim = l.Limits()
	}
	p := &Pipeline{remote: remote, replica: replica, guard: guard, limits: lim, retry: retry,
		overlay: btree.NewG(16, ovLess), kick: make(chan struct{}, 1), idle: make(chan struct{}), progress: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p
}

// budget is what one group may hold: the engine's limits less the guard,
// and a tenth of the bytes kept as a margin for the request's framing.
func (p *Pipeline) budget() (ops, size int) {
	return p.limits.Ops - 1, p.limits.Bytes - p.limits.Bytes/10 - len(p.guard.Key) - len(p.guard.Value) - p.limits.PerWrite
}

func (p *Pipeline) cost(w write) int {
	return len(NSPrefix) + len(w.key) + len(w.val) + p.limits.PerWrite
}

// Get reads the server's own latest state.
func (p *Pipeline) Get(k []byte) ([]byte, error) {
	p.mu.Lock()
	e, ok := p.overlay.Get(&ovEntry{key: k})
	var v []byte
	if ok && !e.del {
		v = bytes.Clone(e.val)
	}
	p.mu.Unlock()
	switch {
	case !ok:
		return p.replica.Get(k)
	case e.del:
		return nil, kv.ErrNotFound
	}
	return v, nil
}

// Scan merges the overlay over the replica. The overlay's range is copied
// first: an entry leaves the overlay only after the replica has it, so the
// replica read after the copy misses nothing.
func (p *Pipeline) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	var ov []*ovEntry
	p.mu.Lock()
	p.overlay.AscendGreaterOrEqual(&ovEntry{key: start}, func(e *ovEntry) bool {
		if end != nil && bytes.Compare(e.key, end) >= 0 {
			return false
		}
		ov = append(ov, e) // entries are replaced, never changed in place
		return true
	})
	p.mu.Unlock()
	stopped := false
	// emit sends overlay entries before key (all when key is nil).
	emit := func(key []byte) bool {
		for len(ov) > 0 && (key == nil || bytes.Compare(ov[0].key, key) < 0) {
			e := ov[0]
			ov = ov[1:]
			if !e.del && !fn(e.key, e.val) {
				return false
			}
		}
		return true
	}
	err := p.replica.Scan(start, end, func(k, v []byte) bool {
		if !emit(k) {
			stopped = true
			return false
		}
		if len(ov) > 0 && bytes.Equal(ov[0].key, k) {
			e := ov[0]
			ov = ov[1:]
			if e.del {
				return true
			}
			if !fn(e.key, e.val) {
				stopped = true
				return false
			}
			return true
		}
		if !fn(k, v) {
			stopped = true
			return false
		}
		return true
	})
	if err != nil || stopped {
		return err
	}
	emit(nil)
	return nil
}

// NewBatch starts a batch of the namespace.
func (p *Pipeline) NewBatch() kv.Batch { return &batch{p: p, index: map[string]int{}} }

type batch struct {
	p      *Pipeline
	writes []write
	index  map[string]int
	conds  []kv.Cond
	rev    uint64
}

func (b *batch) set(w write) {
	if i, ok := b.index[string(w.key)]; ok {
		b.writes[i] = w
		return
	}
	b.index[string(w.key)] = len(b.writes)
	b.writes = append(b.writes, w)
}

func (b *batch) Put(k, v []byte) {
	b.set(write{key: bytes.Clone(k), val: append(make([]byte, 0, len(v)), v...)})
}
func (b *batch) Delete(k []byte)     { b.set(write{key: bytes.Clone(k), del: true}) }
func (b *batch) If(conds ...kv.Cond) { b.conds = append(b.conds, conds...) }
func (b *batch) Discard()            { b.writes, b.index = nil, map[string]int{} }
func (b *batch) Rev() uint64         { return b.rev }

func (b *batch) Commit(sync bool) error {
	wait, err := b.Apply(true)
	if err != nil {
		return err
	}
	return wait()
}

// Apply makes the batch visible to the server's reads at once and queues
// it for the next group; wait returns when that group committed (at once
// without sync: benchmarks only). Guards of the namespace's own batches are
// not supported: the pipeline's one guard is the leadership.
func (b *batch) Apply(sync bool) (func() error, error) {
	p := b.p
	defer b.Discard()
	if len(b.conds) > 0 {
		return nil, kerr.New(kerr.Unsupported, "commit", "", "guarded batches through the active server's pipeline")
	}
	if len(b.writes) == 0 {
		return func() error { return nil }, nil
	}
	size := 0
	for _, w := range b.writes {
		size += p.cost(w)
	}
	ops, maxSize := p.budget()
	if len(b.writes) > ops || size > maxSize {
		return nil, &kerr.Error{Kind: kerr.Invalid, Op: "commit", Err: kv.ErrTooLarge,
			Msg: fmt.Sprintf("%d writes, about %d bytes: over what one commit of the shared engine may hold (%d writes, %d bytes)", len(b.writes), size, ops, maxSize)}
	}
	p.mu.Lock()
	if err := p.failed; err != nil {
		p.mu.Unlock()
		return nil, err
	}
	if err := p.refuse; err != nil {
		p.mu.Unlock()
		return nil, err
	}
	p.seq++
	pb := &pbatch{seq: p.seq, writes: b.writes, done: make(chan struct{})}
	for _, w := range b.writes {
		p.overlay.ReplaceOrInsert(&ovEntry{key: w.key, val: w.val, del: w.del, seq: pb.seq})
	}
	p.queue = append(p.queue, pb)
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
	if !sync {
		return func() error { return nil }, nil
	}
	return func() error {
		<-pb.done
		return pb.err
	}, nil
}

// run commits groups until the pipeline ends.
func (p *Pipeline) run() {
	for {
		select {
		case <-p.kick:
		case <-p.done:
			return
		}
		for {
			group, ws := p.take()
			if group == nil {
				break
			}
			rev, err := p.commit(ws)
			if err != nil {
				p.fail(err)
				return
			}
			p.committed(rev, group, ws)
			if p.Err() != nil {
				return
			}
		}
	}
}

// take removes the next group from the queue: batches in order while they
// fit, merged into one write per key.
func (p *Pipeline) take() ([]*pbatch, []write) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 || p.failed != nil {
		p.inflight = false
		close(p.idle)
		p.idle = make(chan struct{})
		return nil, nil
	}
	maxOps, maxSize := p.budget()
	index := map[string]int{}
	var ws []write
	size, n := 0, 0
	for n < len(p.queue) {
		pb := p.queue[n]
		// What the group would hold with this batch (keys written again
		// cost nothing more).
		add, addSize := 0, 0
		for _, w := range pb.writes {
			if _, ok := index[string(w.key)]; !ok {
				add++
				addSize += p.cost(w)
			}
		}
		if n > 0 && (len(ws)+add > maxOps || size+addSize > maxSize) {
			break
		}
		for _, w := range pb.writes {
			if i, ok := index[string(w.key)]; ok {
				size += p.cost(w) - p.cost(ws[i])
				ws[i] = w
				continue
			}
			index[string(w.key)] = len(ws)
			ws = append(ws, w)
			size += p.cost(w)
		}
		n++
	}
	group := p.queue[:n:n]
	p.queue = p.queue[n:]
	p.inflight = true
	p.flying = group
	return group, ws
}

// commit sends one group, again while it fails for reasons that may pass.
func (p *Pipeline) commit(ws []write) (uint64, error) {
	deadline := time.Now().Add(p.retry)
	bo := newBackoff()
	for {
		b := p.remote.NewBatch()
		b.If(p.guard)
		for _, w := range ws {
			k := append(append(make([]byte, 0, len(NSPrefix)+len(w.key)), NSPrefix...), w.key...)
			if w.del {
				b.Delete(k)
			} else {
				b.Put(k, w.val)
			}
		}
		err := b.Commit(true)
		if err == nil {
			return b.Rev(), nil
		}
		if errors.Is(err, kv.ErrCondFailed) {
			return 0, errFenced
		}
		if !transient(err) || time.Now().After(deadline) {
			return 0, err
		}
		select {
		case <-p.done:
			return 0, err
		default:
		}
		bo.wait(context.Background())
	}
}

// errFenced: the shared engine refused a commit because its guard, the
// leadership, no longer holds.
var errFenced = errors.New("commit refused by the shared engine: this server is no longer the active namespace server (fenced)")

// transient reports errors a commit sent again may get past: the engine
// unreachable or electing (an etcd member lost).
func transient(err error) bool {
	return kerr.Is(err, kerr.Unavailable) || kerr.Is(err, kerr.Busy)
}

// committed writes a group into the replica, drops its writes from the
// overlay (an entry only if no later batch rewrote it) and releases its
// batches. A replica that cannot be written ends the pipeline: reads
// would lose the group.
func (p *Pipeline) committed(rev uint64, group []*pbatch, ws []write) {
	if err := p.replica.Apply(rev, ws); err != nil {
		p.fail(fmt.Errorf("writing the local replica: %w", err))
		return
	}
	seq := group[len(group)-1].seq
	p.mu.Lock()
	for _, w := range ws {
		if e, ok := p.overlay.Get(&ovEntry{key: w.key}); ok && e.seq <= seq {
			p.overlay.Delete(e)
		}
	}
	p.last, p.through = rev, seq
	close(p.progress)
	p.progress = make(chan struct{})
	p.groups++
	p.batches += uint64(len(group))
	release := p.flying // nil when Close released them meanwhile
	p.flying = nil
	p.mu.Unlock()
	for _, pb := range release {
		close(pb.done)
	}
}

// fail ends the pipeline with err: the group in flight, the queued batches
// and every later one fail.
func (p *Pipeline) fail(err error) {
	p.mu.Lock()
	if p.failed != nil {
		p.mu.Unlock()
		return
	}
	p.failed = failure(err)
	all := append(p.flying, p.queue...)
	p.queue, p.flying = nil, nil
	p.inflight = false
	close(p.done)
	close(p.idle)
	p.idle = make(chan struct{})
	p.mu.Unlock()
	for _, pb := range all {
		pb.err = p.failed
		close(pb.done)
	}
}

// failure is the error batches of an ended pipeline get: busy (retry, to
// be redirected to the new active server) when this one was deposed;
// namespace unavailable when the shared engine could not be reached.
func failure(err error) error {
	switch {
	case errors.Is(err, errFenced):
		return &kerr.Error{Kind: kerr.Busy, Msg: "no longer the active namespace server; retry", Err: err}
	case errors.Is(err, errClosed):
		return &kerr.Error{Kind: kerr.Busy, Msg: "this server gave up the active role; retry", Err: err}
	case kerr.Is(err, kerr.Unavailable) || kerr.Is(err, kerr.Busy):
		return &kerr.Error{Kind: kerr.Down, Msg: "namespace unavailable", Err: err}
	}
	return &kerr.Error{Kind: kerr.Internal, Msg: "namespace commit failed", Err: err}
}

var errClosed = errors.New("pipeline closed")

// Close ends the pipeline: batches not committed yet fail.
func (p *Pipeline) Close() { p.fail(errClosed) }

// Done is closed when the pipeline ended; Err says why.
func (p *Pipeline) Done() <-chan struct{} { return p.done }

// Err is why the pipeline ended (nil while it runs).
func (p *Pipeline) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

// Refuse makes Apply fail with err (nil: accept again), for a handover.
func (p *Pipeline) Refuse(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = err
}

// Drain waits until every applied batch committed (or the pipeline ended).
func (p *Pipeline) Drain(ctx context.Context) error {
	for {
		p.mu.Lock()
		empty, ch, failed := len(p.queue) == 0 && !p.inflight, p.idle, p.failed
		p.mu.Unlock()
		if failed != nil {
			return failed
		}
		if empty {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Barrier implements kv.Barrier: it returns once every batch applied
// before the call is committed to the shared engine, or with the error
// that ended the pipeline before (a failover may then lose them: the
// next active server starts from what was committed).
func (p *Pipeline) Barrier(ctx context.Context) error {
	p.mu.Lock()
	want := p.seq
	p.mu.Unlock()
	for {
		p.mu.Lock()
		through, failed, progress := p.through, p.failed, p.progress
		p.mu.Unlock()
		switch {
		case through >= want:
			return nil
		case failed != nil:
			return failed
		}
		select {
		case <-progress:
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Stats are the pipeline's counters.
type Stats struct {
	Committed uint64 // revision of the last committed group
	Groups    uint64
	Batches   uint64
	Overlay   int // keys applied and not committed yet
}

func (p *Pipeline) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Committed: p.last, Groups: p.groups, Batches: p.batches, Overlay: p.overlay.Len()}
}

// Limits are the shared engine's: what the namespace may put in one
// batch (it empties large trees in steps within them).
func (p *Pipeline) Limits() kv.Limits { return p.limits }

var (
	_ kv.Store   = (*Pipeline)(nil)
	_ kv.Limiter = (*Pipeline)(nil)
	_ kv.Barrier = (*Pipeline)(nil)
)

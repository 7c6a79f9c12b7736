package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/namespace"
)

var testLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// within fails the test with step if cond does not hold within 60s.
func within(t *testing.T, step string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 60s", step)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// server is one namespace server of a test instance.
type server struct {
	node   *Node
	cancel context.CancelFunc
	done   chan struct{}
}

// start runs a node over remote; its service is the namespace itself.
func start(t *testing.T, remote kv.Engine, id string, local kv.Engine) *server {
	t.Helper()
	if local == nil {
		local = memkv.New()
	}
	n, err := New(Config{Remote: remote, Local: local, Lease: time.Second, Logger: testLog,
		Self: Member{ID: id, HTTP: "http://" + id, XRootD: id + ":1094"},
		Serve: func(ctx context.Context, s kv.Store, _ uint64, _ []byte) (any, error) {
			return namespace.Open(s, namespace.Options{Sync: true})
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{node: n, cancel: cancel, done: make(chan struct{})}
	go func() { n.Run(ctx); close(s.done) }()
	t.Cleanup(s.stop)
	return s
}

func (s *server) stop() {
	s.cancel()
	<-s.done
}

func (s *server) ns() *namespace.Namespace {
	ns, _ := s.node.View().Service.(*namespace.Namespace)
	return ns
}

func waitActive(t *testing.T, s *server, step string) *namespace.Namespace {
	t.Helper()
	within(t, step, func() bool { return s.ns() != nil })
	return s.ns()
}

// The active server's writes are visible to its reads at once, reach the
// shared engine under the namespace prefix, and leave the overlay once the
// replica has them; concurrent mutations share commits.
func TestPipelineCommitsInGroups(t *testing.T) {
	remote := memkv.New()
	a := start(t, remote, "a", nil)
	ns := waitActive(t, a, "a becomes active")
	if err := ns.Mkdir(namespace.Root, "/d", 0o755, false); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				p := fmt.Sprintf("/d/f%02d-%03d", w, i)
				if _, err := ns.CreateEmpty(namespace.Root, p, namespace.CreateOptions{Exclusive: true}); err != nil {
					errs <- err
					return
				}
				if _, err := ns.Stat(namespace.Root, p); err != nil {
					errs <- fmt.Errorf("own write not visible: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	d, err := ns.Stat(namespace.Root, "/d")
	if err != nil || d.TreeFiles != 800 {
		t.Fatalf("/d: %d files (%v), want 800", d.TreeFiles, err)
	}
	n := 0
	p := append(bytes.Clone(NSPrefix), 'D')
	_ = remote.Scan(p, kv.PrefixEnd(p), func(k, v []byte) bool { n++; return true })
	if n != 801 { // the files and /d itself
		t.Fatalf("shared engine holds %d entries, want 801", n)
	}
	pipe := a.node.pipe
	within(t, "overlay drains once the replica applied every group", func() bool { return pipe.Stats().Overlay == 0 })
	st := pipe.Stats()
	if st.Groups >= st.Batches {
		t.Fatalf("%d batches in %d groups: concurrent mutations did not share commits", st.Batches, st.Groups)
	}
	t.Logf("%d batches in %d groups", st.Batches, st.Groups)
}

// The standby redirects to the active server; when the active one's
// session expires the standby takes over with every committed change, and
// the deposed server's next write is refused (fenced) and it redirects.
func TestFailoverFencesTheDeposed(t *testing.T) {
	remote := memkv.New()
	a := start(t, remote, "a", nil)
	nsA := waitActive(t, a, "a becomes active")
	b := start(t, remote, "b", nil)
	within(t, "b is a standby sending clients to a", func() bool {
		v := b.node.View()
		return v.Role == Standby && v.Active.ID == "a" && v.Active.XRootD == "a:1094"
	})
	for i := 0; i < 20; i++ {
		if _, err := nsA.CreateEmpty(namespace.Root, fmt.Sprintf("/f%02d", i), namespace.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// a's lease lapses on the engine's side (a froze) before a notices:
	// its candidacy is gone.
	pipeA := a.node.pipe
	del := remote.NewBatch()
	del.Delete(pipeA.guard.Key)
	if err := del.Commit(true); err != nil {
		t.Fatal(err)
	}
	nsB := waitActive(t, b, "b takes over")
	for i := 0; i < 20; i++ {
		if _, err := nsB.Stat(namespace.Root, fmt.Sprintf("/f%02d", i)); err != nil {
			t.Fatalf("b lost a's committed file: %v", err)
		}
	}
	if _, err := nsB.CreateEmpty(namespace.Root, "/by-b", namespace.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := nsA.CreateEmpty(namespace.Root, "/by-deposed-a", namespace.CreateOptions{})
	if !kerr.Is(err, kerr.Busy) || !errors.Is(err, errFenced) {
		t.Fatalf("deposed server's write: %v, want busy, fenced", err)
	}
	if pipeA.Err() == nil {
		t.Fatal("the deposed pipeline still runs")
	}
	within(t, "a becomes a standby sending clients to b", func() bool {
		v := a.node.View()
		return v.Role == Standby && v.Active.ID == "b"
	})
	if _, err := nsB.Stat(namespace.Root, "/by-deposed-a"); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("the deposed server's write is visible: %v", err)
	}
}

// Step-down hands the role over with everything applied committed; the
// old active server becomes a standby.
func TestStepDown(t *testing.T) {
	remote := memkv.New()
	a := start(t, remote, "a", nil)
	nsA := waitActive(t, a, "a becomes active")
	b := start(t, remote, "b", nil)
	within(t, "b is a standby", func() bool { return b.node.View().Active.ID == "a" })
	if err := nsA.Mkdir(namespace.Root, "/before", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if err := b.node.StepDown(context.Background()); !kerr.Is(err, kerr.Invalid) {
		t.Fatalf("step-down on the standby: %v, want invalid", err)
	}
	if err := a.node.StepDown(context.Background()); err != nil {
		t.Fatal(err)
	}
	nsB := waitActive(t, b, "b takes over after the step-down")
	if _, err := nsB.Stat(namespace.Root, "/before"); err != nil {
		t.Fatal(err)
	}
	within(t, "a is a standby sending clients to b", func() bool {
		v := a.node.View()
		return v.Role == Standby && v.Active.ID == "b"
	})
	// a's replica follows the watch again: when the role comes back to
	// it, it has what b wrote.
	if err := nsB.Mkdir(namespace.Root, "/by-b", 0o755, false); err != nil {
		t.Fatal(err)
	}
	if err := b.node.StepDown(context.Background()); err != nil {
		t.Fatal(err)
	}
	nsA2 := waitActive(t, a, "a takes over again")
	if _, err := nsA2.Stat(namespace.Root, "/by-b"); err != nil {
		t.Fatalf("a's replica missed b's write: %v", err)
	}
	within(t, "status shows a active, b standby", func() bool {
		st := a.node.Status(context.Background())
		return st.Active.ID == "a" && len(st.Servers) == 2 && st.Servers[0].ID == "a" && st.Servers[1].Role == Standby
	})
	if err := a.node.StepDown(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitActive(t, b, "b takes over a third time")
	within(t, "status shows b active, a standby", func() bool {
		st := b.node.Status(context.Background())
		return st.Active.ID == "b" && len(st.Servers) == 2 && st.Servers[0].ID == "b" && st.Servers[0].Role == Active &&
			st.Servers[1].ID == "a" && st.Servers[1].Role == Standby && st.Err == ""
	})
}

// A restarted server's replica keeps what it had and is made equal to the
// shared engine: keys changed or removed meanwhile are corrected.
func TestReplicaLoadCorrectsAStaleCopy(t *testing.T) {
	remote, local := memkv.New(), memkv.New()
	put := func(e kv.Engine, kvs ...string) {
		b := e.NewBatch()
		for i := 0; i+1 < len(kvs); i += 2 {
			if kvs[i+1] == "" {
				b.Delete([]byte(kvs[i]))
			} else {
				b.Put([]byte(kvs[i]), []byte(kvs[i+1]))
			}
		}
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2500; i++ { // several pages
		put(remote, fmt.Sprintf("n/k%05d", i), "v")
	}
	put(remote, "ha/other", "x")
	put(local, "k00001", "old", "k01500", "v", "k01500x", "gone", "zzz", "gone")
	r := NewReplica(remote, local, testLog)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	if err := r.WaitLoaded(ctx); err != nil {
		t.Fatal(err)
	}
	put(remote, "n/k00002", "new", "n/k00003", "")
	rev := remote.NewBatch()
	rev.Put([]byte("n/last"), []byte("1"))
	if err := rev.Commit(true); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitApplied(ctx, rev.Rev()); err != nil {
		t.Fatal(err)
	}
	var want, got []string
	_ = remote.Scan(NSPrefix, kv.PrefixEnd(NSPrefix), func(k, v []byte) bool {
		want = append(want, string(k[len(NSPrefix):])+"="+string(v))
		return true
	})
	_ = local.Scan(nil, nil, func(k, v []byte) bool { got = append(got, string(k)+"="+string(v)); return true })
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("replica differs from the shared engine: %d keys, want %d", len(got), len(want))
	}
}

// blockingEngine holds every batch commit until release is closed.
type blockingEngine struct {
	kv.Engine
	started chan struct{}
	release chan struct{}
}

type blockingBatch struct {
	kv.Batch
	e *blockingEngine
}

func (e *blockingEngine) NewBatch() kv.Batch { return &blockingBatch{e.Engine.NewBatch(), e} }
func (b *blockingBatch) Commit(sync bool) error {
	select {
	case b.e.started <- struct{}{}:
	default:
	}
	<-b.e.release
	return b.Batch.Commit(sync)
}

// Giving up the active role while a group is being committed releases
// the mutations waiting for it: they fail (busy), they do not hang.
func TestCloseReleasesTheGroupInFlight(t *testing.T) {
	remote := &blockingEngine{Engine: memkv.New(), started: make(chan struct{}, 1), release: make(chan struct{})}
	defer close(remote.release)
	r := NewReplica(remote, memkv.New(), testLog)
	p := newPipeline(remote, r, kv.Cond{Key: []byte("lead"), Absent: true}, time.Second)
	b := p.NewBatch()
	b.Put([]byte("k"), []byte("v"))
	wait, err := b.Apply(true)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-remote.started:
	case <-time.After(60 * time.Second):
		t.Fatal("the group's commit did not start within 60s")
	}
	p.Close()
	done := make(chan error, 1)
	go func() { done <- wait() }()
	select {
	case err := <-done:
		if !kerr.Is(err, kerr.Busy) {
			t.Fatalf("waiter of the group in flight: %v, want busy", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the waiter of the group in flight hangs after Close")
	}
	if _, err := p.NewBatch().Apply(true); err != nil {
		t.Fatalf("an empty batch after Close: %v", err)
	}
	b = p.NewBatch()
	b.Put([]byte("k2"), []byte("v"))
	if _, err := b.Apply(true); !kerr.Is(err, kerr.Busy) {
		t.Fatalf("a batch after Close: %v, want busy", err)
	}
}

// compactingEngine records the revisions it is asked to compact to.
type compactingEngine struct {
	*memkv.Engine
	mu   sync.Mutex
	revs []uint64
}

func (e *compactingEngine) Compact(_ context.Context, rev uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.revs = append(e.revs, rev)
	return nil
}

// The active server compacts the shared engine's history, keeping one
// period of it: each compaction goes to the revision seen a period before.
func TestActiveServerCompactsHistory(t *testing.T) {
	remote := &compactingEngine{Engine: memkv.New()}
	n, err := New(Config{Remote: remote, Local: memkv.New(), Lease: time.Second, KeepHistory: 20 * time.Millisecond, Logger: testLog,
		Self:  Member{ID: "a", HTTP: "http://a"},
		Serve: func(context.Context, kv.Store, uint64, []byte) (any, error) { return "svc", nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.Run(ctx)
	within(t, "three compactions", func() bool {
		remote.mu.Lock()
		defer remote.mu.Unlock()
		return len(remote.revs) >= 3
	})
	remote.mu.Lock()
	defer remote.mu.Unlock()
	for i, r := range remote.revs {
		if r == 0 || r > n.replica.Applied() || (i > 0 && r < remote.revs[i-1]) {
			t.Fatalf("compactions %v (replica at %d): not increasing, or past what the replica has", remote.revs, n.replica.Applied())
		}
	}
}

// gatedLeader is a shared engine whose Leader reads wait while the gate
// is shut (an etcd slow to answer).
type gatedLeader struct {
	*memkv.Engine
	mu   sync.Mutex
	gate chan struct{} // nil: open
}

func (e *gatedLeader) Leader(ctx context.Context, name string) ([]byte, uint64, error) {
	e.mu.Lock()
	g := e.gate
	e.mu.Unlock()
	if g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	return e.Engine.Leader(ctx, name)
}

func (e *gatedLeader) shut() {
	e.mu.Lock()
	e.gate = make(chan struct{})
	e.mu.Unlock()
}

func (e *gatedLeader) open() {
	e.mu.Lock()
	if e.gate != nil {
		close(e.gate)
		e.gate = nil
	}
	e.mu.Unlock()
}

// Right after a step-down, the server that stepped down never names
// itself the active one (it read itself as the leader a moment before,
// and has not read the leader since): it names its successor, or none
// yet.
func TestStatusAfterStepDownNamesNotItself(t *testing.T) {
	remote := &gatedLeader{Engine: memkv.New()}
	a := start(t, remote, "a", nil)
	waitActive(t, a, "a becomes active")
	b := start(t, remote, "b", nil)
	within(t, "b is a standby", func() bool { return b.node.View().Active.ID == "a" })
	within(t, "a has read itself as the leader", func() bool {
		a.node.mu.Lock()
		defer a.node.mu.Unlock()
		return a.node.leader.ID == "a"
	})
	remote.shut()
	defer remote.open()
	if err := a.node.StepDown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := a.node.Status(context.Background()); st.Active.ID == "a" {
		t.Fatalf("a, just stepped down, names itself active: %+v", st.Active)
	}
	remote.open()
	waitActive(t, b, "b takes over")
	within(t, "a names b active", func() bool { return a.node.Status(context.Background()).Active.ID == "b" })
}

// An active server whose lease renewals stop going through (cut off from
// the shared engine) stops serving once it can no longer prove its lease
// holds, before the lease can have expired in the engine and another
// server taken over; when a renewal goes through again before that, it
// serves again in the same term.
func TestActiveServesOnlyWhileItsLeaseIsProved(t *testing.T) {
	remote := memkv.New()
	a := start(t, remote, "a", nil)
	waitActive(t, a, "a becomes active")
	a.node.mu.Lock()
	s := a.node.session.(*memkv.Session)
	a.node.mu.Unlock()
	term := a.node.pipe.guard

	// The last renewal went through a lease ago (minus a hair): the lease
	// may expire in the engine at any moment.
	s.Stall(time.Now().Add(-a.node.cfg.Lease + time.Millisecond))
	v := a.node.View()
	if v.Service != nil || v.Role != Active || !kerr.Is(v.Err, kerr.Down) || v.Active.ID != "" {
		t.Fatalf("a, its lease unproved, still serves: %+v", v)
	}
	if st := a.node.Status(context.Background()); st.Active.ID != "a" {
		t.Fatalf("a no longer reports itself active while it holds the role: %+v", st.Active)
	}

	s.Stall(time.Time{}) // renewed again
	waitActive(t, a, "a serves again once its lease is renewed")
	if a.node.pipe.guard.Key == nil || string(a.node.pipe.guard.Key) != string(term.Key) {
		t.Fatal("a's term changed")
	}
}

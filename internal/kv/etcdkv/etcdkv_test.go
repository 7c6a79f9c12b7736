package etcdkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/etcdtest"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/kvtest"
)

func open(t testing.TB, c *etcdtest.Cluster, prefix string, mod func(*Options)) *Engine {
	t.Helper()
	o := Options{Endpoints: c.Endpoints(), Prefix: prefix, RequestTimeout: 10 * time.Second,
		MaxTxnOps: etcdtest.MaxTxnOps, MaxRequestBytes: etcdtest.MaxRequestBytes}
	if mod != nil {
		mod(&o)
	}
	e, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestEngine runs the shared suite and the etcd-specific checks against one
// real 3-member cluster; each engine gets its own key prefix in it.
func TestEngine(t *testing.T) {
	c := etcdtest.Start(t, 3)
	n := 0
	prefix := func() string { n++; return fmt.Sprintf("kvtest/%d/", n) }
	t.Run("Suite", func(t *testing.T) {
		kvtest.Run(t, func(t *testing.T) kv.Engine { return open(t, c, prefix(), nil) },
			func(t *testing.T, e kv.Engine) kv.Engine {
				e.Close()
				return open(t, c, e.(*Engine).prefix, nil)
			})
	})

	t.Run("Election", func(t *testing.T) {
		kvtest.RunElection(t, func(t *testing.T) kv.Engine { return open(t, c, prefix(), nil) })
	})

	// A session whose lease ends elsewhere (as when it expires while its
	// holder is frozen) ends: Done closes and its leadership fences.
	t.Run("LeaseEndedElsewhere", func(t *testing.T) {
		e := open(t, c, prefix(), nil)
		s, err := e.NewSession(context.Background(), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		l, err := s.Campaign(context.Background(), "el", []byte("me"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.cli.Revoke(context.Background(), s.(*session).current()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.Done():
		case <-time.After(60 * time.Second):
			t.Fatal("session not ended within 60s of its lease's revocation")
		}
		b := e.NewBatch()
		b.If(l.Cond())
		b.Put([]byte("k"), []byte("v"))
		if err := b.Commit(true); !errors.Is(err, kv.ErrCondFailed) {
			t.Fatalf("commit guarded by the ended leadership: %v, want ErrCondFailed", err)
		}
	})

	t.Run("Status", func(t *testing.T) {
		e := open(t, c, prefix(), nil)
		st, err := e.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		leaders := 0
		for i, m := range st.Members {
			if !m.Healthy || m.Endpoint != c.Endpoint(i) || m.Name == "" || m.Version == "" || m.DBSize <= 0 {
				t.Fatalf("member %d: %+v", i, m)
			}
			if m.Leader {
				leaders++
			}
		}
		if leaders != 1 || st.Revision == 0 || st.Engine != "etcd" {
			t.Fatalf("status %+v: want one leader and a revision", st)
		}
		if l := e.Limits(); l.Ops != etcdtest.MaxTxnOps || l.Bytes != etcdtest.MaxRequestBytes {
			t.Fatalf("limits %+v", l)
		}
	})

	t.Run("Compact", func(t *testing.T) {
		e := open(t, c, prefix(), nil)
		var revs []uint64
		for i := 0; i < 3; i++ {
			b := e.NewBatch()
			b.Put([]byte("k"), []byte{byte('0' + i)})
			if err := b.Commit(true); err != nil {
				t.Fatal(err)
			}
			revs = append(revs, b.Rev())
		}
		if err := e.Compact(context.Background(), revs[2]); err != nil {
			t.Fatal(err)
		}
		if err := e.Compact(context.Background(), revs[1]); err != nil {
			t.Fatalf("compacting an already compacted revision: %v", err)
		}
		r := <-e.Watch(context.Background(), nil, revs[0])
		if !errors.Is(r.Err, kv.ErrCompacted) {
			t.Fatalf("watch from a compacted revision: %+v, want ErrCompacted", r)
		}
		if v, err := e.Get([]byte("k")); err != nil || string(v) != "2" {
			t.Fatalf("latest value after compaction: %q %v", v, err)
		}
	})

	t.Run("PrefixIsolation", func(t *testing.T) {
		a, b := open(t, c, "iso/a/", nil), open(t, c, "iso/ab/", nil) // b's prefix extends a's
		ctx := context.Background()
		wa := a.Watch(ctx, nil, 0)
		for _, e := range []*Engine{b, a} {
			bt := e.NewBatch()
			bt.Put([]byte("k"), []byte(e.prefix))
			if err := bt.Commit(true); err != nil {
				t.Fatal(err)
			}
		}
		var keys []string
		if err := a.Scan(nil, nil, func(k, v []byte) bool { keys = append(keys, string(k)+"="+string(v)); return true }); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(keys) != "[k=iso/a/]" {
			t.Fatalf("engine a scans %v: another instance's keys leak in", keys)
		}
		select {
		case r := <-wa:
			if r.Err != nil || len(r.Events) != 1 || string(r.Events[0].Value) != "iso/a/" {
				t.Fatalf("engine a's watch: %+v", r)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("engine a's watch got nothing in 30s")
		}
	})

	t.Run("TooLargeRefusedWhole", func(t *testing.T) {
		ctx := context.Background()
		checkNothing := func(e *Engine, what string) {
			t.Helper()
			n := 0
			if err := e.Scan(nil, nil, func(k, v []byte) bool { n++; return true }); err != nil || n != 0 {
				t.Fatalf("%s: %d keys applied (%v), want none", what, n, err)
			}
		}
		tooLarge := func(err error, what string) {
			t.Helper()
			if !errors.Is(err, kv.ErrTooLarge) || !kerr.Is(err, kerr.Invalid) {
				t.Fatalf("%s: %v, want kerr.Invalid wrapping kv.ErrTooLarge", what, err)
			}
			t.Logf("%s: %v", what, err)
		}
		// Refused by the engine from its configured limit.
		e := open(t, c, "big/1/", func(o *Options) { o.MaxTxnOps = 100 })
		bt := e.NewBatch()
		for i := 0; i < 101; i++ {
			bt.Put([]byte(fmt.Sprintf("k%03d", i)), []byte("v"))
		}
		tooLarge(bt.Commit(true), "101 writes, limit 100")
		checkNothing(e, "101 writes")
		err := e.Txn(ctx, func(tx kv.Tx) error {
			for i := 0; i < 101; i++ {
				_, _ = tx.Get([]byte(fmt.Sprintf("r%03d", i)))
			}
			tx.Put([]byte("k"), []byte("v"))
			return nil
		})
		tooLarge(err, "txn reading 101 keys, limit 100")
		checkNothing(e, "txn reading 101 keys")
		// Refused by etcd when the engine is configured above the cluster.
		e = open(t, c, "big/2/", func(o *Options) { o.MaxTxnOps, o.MaxRequestBytes = 1<<20, 64<<20 })
		bt = e.NewBatch()
		for i := 0; i < etcdtest.MaxTxnOps+1; i++ {
			bt.Put([]byte(fmt.Sprintf("k%05d", i)), []byte("v"))
		}
		tooLarge(bt.Commit(true), "ops over the cluster's --max-txn-ops")
		checkNothing(e, "ops over the cluster's limit")
		bt = e.NewBatch()
		big := bytes.Repeat([]byte("x"), 1<<20)
		for i := 0; i < etcdtest.MaxRequestBytes>>20+2; i++ {
			bt.Put([]byte(fmt.Sprintf("b%02d", i)), big)
		}
		tooLarge(bt.Commit(true), "bytes over the cluster's --max-request-bytes")
		checkNothing(e, "bytes over the cluster's limit")
	})
}

// TestQuorumLoss: with one member of three killed (the leader) commits go
// on; with two down they fail within the request timeout with
// kerr.Unavailable (HTTP 503), watches end with it too; once the members
// are back, commits succeed again.
func TestQuorumLoss(t *testing.T) {
	c := etcdtest.Start(t, 3)
	e := open(t, c, "quorum/", func(o *Options) { o.RequestTimeout = 2 * time.Second })
	ctx := context.Background()
	seq := 0
	commit := func() error {
		seq++
		b := e.NewBatch()
		b.Put([]byte(fmt.Sprintf("k%04d", seq)), []byte("v"))
		return b.Commit(true)
	}
	// eventually retries op until it succeeds, failing with step after 60s.
	eventually := func(step string, op func() error) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			err := op()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still failing after 60s: %v", step, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	leader := leaderIndex(t, e, c)
	c.KillMember(leader)
	eventually("first commit after killing the leader", commit) // an election runs first
	if st, err := e.Status(ctx); err != nil {
		t.Fatal(err)
	} else {
		for i, m := range st.Members {
			if m.Healthy != (i != leader) || (m.Err == "") != m.Healthy {
				t.Fatalf("status with member %d killed: member %d is %+v", leader, i, m)
			}
		}
	}
	for i := 0; i < 20; i++ {
		if err := commit(); err != nil {
			t.Fatalf("commit %d with 2 of 3 members: %v", i, err)
		}
	}
	if err := e.Txn(ctx, func(tx kv.Tx) error {
		_, err := tx.Get([]byte("k0001"))
		tx.Put([]byte("txn"), []byte("2of3"))
		return err
	}); err != nil {
		t.Fatalf("transaction with 2 of 3 members: %v", err)
	}

	w := e.Watch(ctx, nil, 0)
	other := (leader + 1) % 3
	c.StopMember(other) // graceful this time
	unavailable := func(what string, op func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- op() }()
		select {
		case err := <-done:
			if !kerr.Is(err, kerr.Unavailable) || kerr.HTTPStatus(kerr.KindOf(err)) != http.StatusServiceUnavailable {
				t.Fatalf("%s without quorum: %v, want kerr.Unavailable (503)", what, err)
			}
			t.Logf("%s without quorum: %v", what, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("%s without quorum hung for 60s (request timeout 2s)", what)
		}
	}
	unavailable("batch commit", commit)
	unavailable("get", func() error { _, err := e.Get([]byte("k0001")); return err })
	unavailable("transaction", func() error {
		return e.Txn(ctx, func(tx kv.Tx) error { tx.Put([]byte("x"), []byte("y")); return nil })
	})
	select {
	case r := <-w:
		for r.Err == nil { // events committed before the loss may come first
			select {
			case r = <-w:
			case <-time.After(60 * time.Second):
				t.Fatal("watch did not end within 60s of losing quorum")
			}
		}
		if !kerr.Is(r.Err, kerr.Unavailable) {
			t.Fatalf("watch ended with %v, want kerr.Unavailable", r.Err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("watch did not end within 60s of losing quorum")
	}

	c.StartMember(leader, false)
	c.StartMember(other, true)
	eventually("commit after restarting both members", commit)
	if v, err := e.Get([]byte("txn")); err != nil || string(v) != "2of3" {
		t.Fatalf("data committed with 2 of 3 members: %q %v", v, err)
	}

	// Open against nothing fails within its timeout, saying so.
	c2 := etcdtest.Start(t, 1)
	c2.KillMember(0)
	done := make(chan error, 1)
	go func() {
		_, err := Open(Options{Endpoints: c2.Endpoints(), Prefix: "x/", RequestTimeout: time.Second, DialTimeout: time.Second})
		done <- err
	}()
	select {
	case err := <-done:
		if !kerr.Is(err, kerr.Unavailable) {
			t.Fatalf("Open with no member up: %v, want kerr.Unavailable", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Open with no member up hung for 60s")
	}
}

func leaderIndex(t *testing.T, e *Engine, c *etcdtest.Cluster) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < c.Size(); i++ {
		st, err := e.cli.Status(ctx, c.Endpoint(i))
		if err != nil {
			t.Fatalf("status of member %d: %v", i, err)
		}
		if st.Leader == st.Header.MemberId {
			return i
		}
	}
	t.Fatal("no member says it is the leader")
	return -1
}

func BenchmarkEngine(b *testing.B) {
	c := etcdtest.Start(b, 3)
	n := 0
	kvtest.Bench(b, func(b *testing.B) kv.Engine {
		n++
		return open(b, c, fmt.Sprintf("bench/%d/", n), nil)
	}, true)
}

// A session outlives the loss of etcd's leader, three times in a row.
// With the leader frozen (SIGSTOP: its connections stay open and nothing
// answers, as on a host too loaded to run it) the other members elect a
// leader within their election timeout (set here); the session's renewals
// reach it, so the session does not end and what it is sure to hold moves
// on past where the freeze would have cut the lease. The frozen member,
// resumed, does not end it either (etcd 3.4.23 has it revoke the leases
// that expired by its clock while it was frozen); its key is there.
func TestSessionSurvivesFrozenLeader(t *testing.T) {
	const ttl = 3 * time.Second
	c := etcdtest.Start(t, 3, "--heartbeat-interval", "100", "--election-timeout", "1000")
	e := open(t, c, "frozen/", func(o *Options) { o.RequestTimeout = 2 * time.Second })
	ctx := context.Background()
	s, err := e.NewSession(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(ctx, []byte("alive"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	// holds waits until the session is sure to hold past until, failing
	// if it ends meanwhile.
	holds := func(until time.Time, step string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !s.HeldUntil().After(until) {
			select {
			case <-s.Done():
				t.Fatalf("%s: the session ended", step)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 60s (held until %v)", step, s.HeldUntil())
			}
		}
	}
	for round := 1; round <= 3; round++ {
		frozen := leaderIndex(t, e, c)
		c.SignalMember(frozen, syscall.SIGSTOP)
		resume := sync.OnceFunc(func() { c.SignalMember(frozen, syscall.SIGCONT) })
		t.Cleanup(resume)
		stopped := time.Now()
		holds(stopped.Add(2*ttl), fmt.Sprintf("round %d: renewals go through for two leases with the leader (m%d) frozen", round, frozen))
		resume()
		resumed := time.Now()
		holds(resumed.Add(2*ttl), fmt.Sprintf("round %d: renewals go on with the old leader back", round))
		if v, err := e.Get([]byte("alive")); err != nil || string(v) != "1" {
			t.Fatalf("round %d: the session's key: %q %v", round, v, err)
		}
	}
	select {
	case <-s.Done():
		t.Fatal("the session ended")
	default:
	}
}

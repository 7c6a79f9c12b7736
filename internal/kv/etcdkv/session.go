package etcdkv

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/kv"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
)

// A session is an etcd lease its keys are bound to, kept alive by the
// session itself rather than by the client's keep-alive stream, so that
// it outlives the loss of etcd's leader:
//
//   - The client's stream is bound to one member, which answers renewals
//     one after the other, and a follower forwards each to the leader.
//     When the leader freezes (its host overloaded) or is cut off, the
//     stream waits on it for seconds without an error, past the lease,
//     although the other members elect a leader within their election
//     timeout (and the new leader extends every lease by that timeout).
//     Instead each renewal goes to every member at once, through a client
//     of its own (Engine.renewers), and the first answer counts.
//   - HeldUntil, what the session is sure to hold until, counts the TTL
//     from when the acknowledged renewal was sent, not from when the
//     answer came: etcd's leader counts it from when it took the renewal,
//     which is in between.
//   - etcd before 3.4.28 and 3.5.11 has a leader that was stuck (frozen,
//     starved of CPU, its disk stalled) revoke, once it runs again, every
//     lease that expired by its own clock while it was stuck, although
//     the new leader kept them alive (etcd-io/etcd#15247, fixed by #16822;
//     Debian ships 3.4.23). So once an answer comes from a newer Raft
//     term than the one the lease was granted in (another leader was
//     elected), the session moves its keys to a lease the new leader
//     grants (move); the old one expires by itself. A member's answer
//     from an older term than one already seen (a deposed leader not yet
//     aware of it) is not believed.

// renewalsPerTTL is how often a session's lease is renewed: six times per
// TTL, so that renewals lost while etcd elects a leader (a second with
// etcd's default timings) leave most of the lease.
const renewalsPerTTL = 6

type session struct {
	e        *Engine
	ttl      time.Duration      // as granted
	stop     context.CancelFunc // ends keep
	done     chan struct{}      // closed when keep returned
	gone     chan struct{}      // closed when etcd said the lease is gone
	goneOnce sync.Once
	moving   chan struct{} // held while a move runs

	mu        sync.Mutex
	lease     clientv3.LeaseID
	cs        *concurrency.Session // for lease, orphaned: elections only
	granted   uint64               // Raft term lease was granted in
	held      time.Time            // HeldUntil
	term      uint64               // highest Raft term of an answer
	answered  int                  // member (renewers index) that answered in term last
	next      *grant               // the lease a move binds the keys to, until it is lease
	inTransit bool                 // a move runs: renewals of the old lease prove nothing of the keys

	closeOnce sync.Once
	closeErr  error
}

// NewSession grants a lease of ttl (rounded up to whole seconds; etcd
// raises it to its minimum, about 2s with default timings) and keeps it.
func (e *Engine) NewSession(ctx context.Context, ttl time.Duration) (kv.Session, error) {
	if e.isClosed() {
		return nil, kv.ErrClosed
	}
	secs := int64(math.Ceil(ttl.Seconds()))
	if secs < 1 {
		secs = 1
	}
	if _, err := e.renewers(); err != nil {
		return nil, err
	}
	rctx, cancel := e.reqCtx(ctx)
	defer cancel()
	sent := time.Now()
	g, err := e.cli.Grant(rctx, secs)
	if err != nil {
		return nil, e.fail(ctx, "session", err)
	}
	kctx, stop := context.WithCancel(context.Background())
	s := &session{e: e, ttl: time.Duration(g.TTL) * time.Second, stop: stop,
		done: make(chan struct{}), gone: make(chan struct{}), moving: make(chan struct{}, 1)}
	s.use(g, sent)
	go s.keep(kctx)
	return s, nil
}

// use makes g, granted by a request sent at sent, the session's lease.
func (s *session) use(g *clientv3.LeaseGrantResponse, sent time.Time) {
	// The client's session, for elections only (they take its lease and
	// client; with a lease given it makes no request): its own renewals
	// stop at once.
	cs, _ := concurrency.NewSession(s.e.cli, concurrency.WithLease(g.ID), concurrency.WithTTL(int(g.TTL)))
	cs.Orphan()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lease, s.cs, s.granted = g.ID, cs, g.ResponseHeader.GetRaftTerm()
	s.held = sent.Add(time.Duration(g.TTL) * time.Second)
	s.term = max(s.term, s.granted)
	s.next, s.inTransit = nil, false
}

// elections is the client's session for the current lease.
func (s *session) elections() *concurrency.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cs
}

func (s *session) current() clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease
}

// keep renews the lease until it is gone, the session is closed, or no
// renewal was acknowledged for a TTL past HeldUntil. Each round sends a
// renewal to every member at once, each waiting at most a TTL (an answer
// later than that proves nothing), and starts a move when one is due.
func (s *session) keep(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(s.ttl / renewalsPerTTL)
	defer tick.Stop()
	renewers, _ := s.e.renewers()
	for {
		sent := time.Now()
		s.mu.Lock()
		leases := []clientv3.LeaseID{s.lease}
		if s.next != nil {
			leases = append(leases, s.next.ID)
		}
		s.mu.Unlock()
		for _, lease := range leases {
			for i, lc := range renewers {
				go s.renew(ctx, i, lc, lease, sent)
			}
		}
		if s.moveDue() {
			select {
			case s.moving <- struct{}{}:
				go func() {
					s.move(ctx)
					<-s.moving
				}()
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-s.gone:
			return
		case <-tick.C:
		}
		if time.Now().After(s.HeldUntil().Add(s.ttl)) {
			return
		}
	}
}

// renew sends one renewal of lease through lc (member i) and notes the
// answer: one attempt on one stream (the client's KeepAliveOnce tries
// again at once while a member answers "unavailable").
func (s *session) renew(ctx context.Context, i int, lc pb.LeaseClient, lease clientv3.LeaseID, sent time.Time) {
	rctx, cancel := context.WithTimeout(ctx, s.ttl)
	defer cancel()
	stream, err := lc.LeaseKeepAlive(rctx, grpc.WaitForReady(true))
	if err != nil {
		return
	}
	if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(lease)}); err != nil {
		return
	}
	resp, err := stream.Recv()
	if err != nil {
		return
	}
	_ = stream.CloseSend()
	s.answer(i, lease, sent, resp.Header.GetRaftTerm(), resp.TTL)
}

// answer notes member i's answer about lease to a renewal sent at sent:
// the lease's TTL, 0 when it is gone, in Raft term term.
func (s *session) answer(i int, lease clientv3.LeaseID, sent time.Time, term uint64, ttl int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if term < s.term || lease != s.lease {
		return // a deposed leader's word, or about a lease moved from
	}
	s.term, s.answered = term, i
	switch {
	case ttl <= 0:
		s.goneOnce.Do(func() { close(s.gone) })
	case s.inTransit:
	default:
		s.held = later(s.held, sent.Add(time.Duration(ttl)*time.Second))
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// moveDue reports an answer from a newer Raft term than the lease's.
func (s *session) moveDue() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.term > s.granted
}

// move binds the session's keys to a lease the current leader grants
// (through the member that answered in the newest term) in one
// transaction, and makes it the session's. From its start until then the
// new lease is renewed too and renewals of the old one do not move
// HeldUntil (the keys may be bound to either). A move that fails, or
// whose outcome is unknown, is tried again at the next round with the
// same new lease: it reads where the keys are again.
func (s *session) move(ctx context.Context) {
	s.mu.Lock()
	old, next, cli := s.lease, s.next, s.e.member(s.answered)
	s.inTransit = true
	s.mu.Unlock()
	rctx, cancel := s.e.reqCtx(ctx)
	defer cancel()
	if next == nil {
		sent := time.Now()
		g, err := cli.Grant(rctx, int64(s.ttl/time.Second))
		if err != nil {
			s.mu.Lock()
			s.inTransit = false
			s.mu.Unlock()
			return
		}
		next = &grant{g, sent}
		s.mu.Lock()
		s.next = next
		s.mu.Unlock()
	}
	tl, err := cli.TimeToLive(rctx, old, clientv3.WithAttachedKeys())
	if err != nil {
		return
	}
	if tl.TTL <= 0 { // gone: its keys with it, unless a try before moved them
		tn, err := cli.TimeToLive(rctx, next.ID, clientv3.WithAttachedKeys())
		if err != nil {
			return
		}
		if len(tn.Keys) == 0 {
			s.goneOnce.Do(func() { close(s.gone) })
			_, _ = cli.Revoke(rctx, next.ID)
			return
		}
	} else {
		var cmps []clientv3.Cmp
		var puts []clientv3.Op
		for _, k := range tl.Keys {
			cmps = append(cmps, clientv3.Compare(clientv3.LeaseValue(string(k)), "=", old))
			puts = append(puts, clientv3.OpPut(string(k), "", clientv3.WithIgnoreValue(), clientv3.WithLease(next.ID)))
		}
		if r, err := cli.Txn(rctx).If(cmps...).Then(puts...).Commit(); err != nil || !r.Succeeded {
			return // a key changed meanwhile, or the outcome is unknown
		}
	}
	s.use(next.LeaseGrantResponse, next.sent)
}

// grant is a lease granted, and when it was asked for.
type grant struct {
	*clientv3.LeaseGrantResponse
	sent time.Time
}

// HeldUntil is when the last acknowledged renewal was sent plus the
// lease's TTL: etcd expires the lease no earlier (its leader counts the
// TTL from when it took the renewal, later; a new leader extends it).
func (s *session) HeldUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

func (s *session) Done() <-chan struct{} { return s.done }

func (s *session) Put(ctx context.Context, key, value []byte) error {
	rctx, cancel := s.e.reqCtx(ctx)
	defer cancel()
	_, err := s.e.cli.Put(rctx, s.e.key(key), string(value), clientv3.WithLease(s.current()))
	return s.e.fail(ctx, "session put", err)
}

// Close stops the renewals and revokes the lease, waiting at most the
// request timeout (if the cluster is unreachable the lease expires by
// itself).
func (s *session) Close() error {
	s.closeOnce.Do(func() {
		s.stop()
		<-s.done
		ctx, cancel := s.e.reqCtx(context.Background())
		defer cancel()
		s.mu.Lock()
		lease, next := s.lease, s.next
		s.mu.Unlock()
		if next != nil { // a move's outcome unknown: the keys may be bound to it
			_, _ = s.e.cli.Revoke(ctx, next.ID)
		}
		_, err := s.e.cli.Revoke(ctx, lease)
		s.closeErr = s.e.fail(context.Background(), "session close", err)
	})
	return s.closeErr
}

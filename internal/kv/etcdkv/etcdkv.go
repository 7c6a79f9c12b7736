// Package etcdkv is the replicated kv.Engine: an etcd cluster (Raft,
// linearizable transactions, MVCC revisions, watches) reached with the
// official client (go.etcd.io/etcd/client/v3, pinned in go.mod; wire
// compatible with the etcd 3.4 servers Debian ships). Every key lives under
// Options.Prefix, so several Kaon instances can share one cluster.
//
// Mapping: a Batch is one etcd Txn (atomic; etcd refuses a request above
// its --max-txn-ops operations or --max-request-bytes, and so does the
// engine before sending, from Options: nothing is applied and the error is
// kerr.Invalid wrapping kv.ErrTooLarge). A transaction reads at the
// revision of its first read (later reads at that revision, served by any
// member that has it), then commits one etcd Txn comparing the ModRevision
// of every key it read and, for every range it scanned, that no key in the
// range changed after that revision; a guard (kv.Cond) is an outer compare,
// the transaction an inner Txn, so a failed guard and a conflict are told
// apart. Every key a transaction read or saw in a scan is one compare, so
// under --max-txn-ops a transaction reads at most that many keys: scan for
// decisions (is the directory empty?) with an early stop, not whole
// listings. A snapshot is a read at a fixed revision; Watch is etcd's watch.
// Revisions are the cluster's: history lasts until etcd compacts it, which
// is the operator's setting (--auto-compaction-*).
//
// Failures: every request carries Options.RequestTimeout and requires a
// leader, so without a quorum a call fails within the timeout with
// kerr.Unavailable (HTTP 503) instead of hanging. A commit that timed out
// may or may not have been applied (etcd cannot say); transactions re-read
// before deciding, so running one again is safe.
package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/kvbase"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Options configures the engine.
type Options struct {
	Endpoints []string // client URLs of the members, e.g. http://127.0.0.1:2379
	// Prefix is prepended to every key; required, e.g. "kaon/<instance>/".
	Prefix string
	// RequestTimeout bounds every request (default 5s): past it, with no
	// quorum, calls fail with kerr.Unavailable.
	RequestTimeout time.Duration
	DialTimeout    time.Duration // default 5s
	// MaxTxnOps and MaxRequestBytes must not exceed the cluster's
	// --max-txn-ops and --max-request-bytes (etcd's defaults: 128 and
	// 1.5 MiB, used when zero). Larger commits are refused before sending.
	MaxTxnOps       int
	MaxRequestBytes int
	PageSize        int // keys per range request when scanning; default 1000
}

// Engine is an etcd-backed kv.Engine.
type Engine struct {
	cli    *clientv3.Client
	opts   Options
	prefix string

	mu        sync.Mutex
	closed    bool
	perMember []*clientv3.Client // renewers
}

// Open connects to the cluster and checks that it answers.
func Open(o Options) (*Engine, error) {
	if o.Prefix == "" {
		return nil, kerr.New(kerr.Invalid, "etcdkv open", "", "a key prefix is required (the keys of this instance live under it)")
	}
	if len(o.Endpoints) == 0 {
		return nil, kerr.New(kerr.Invalid, "etcdkv open", "", "no etcd endpoints given")
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 5 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.MaxTxnOps <= 0 {
		o.MaxTxnOps = 128
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = 3 << 19 // 1.5 MiB
	}
	if o.PageSize <= 0 {
		o.PageSize = 1000
	}
	cli, err := clientv3.New(clientConfig(o, o.Endpoints))
	if err != nil {
		return nil, kerr.Wrap(kerr.Unavailable, "etcdkv open", strings.Join(o.Endpoints, ","), err)
	}
	e := &Engine{cli: cli, opts: o, prefix: o.Prefix}
	ctx, cancel := e.reqCtx(context.Background())
	defer cancel()
	if _, err := cli.Get(ctx, e.prefix, clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, e.fail(context.Background(), "open", err)
	}
	return e, nil
}

func clientConfig(o Options, endpoints []string) clientv3.Config {
	return clientv3.Config{
		Endpoints:          endpoints,
		DialTimeout:        o.DialTimeout,
		Logger:             zap.NewNop(), // failures reach callers as errors
		MaxCallSendMsgSize: o.MaxRequestBytes + 1<<20,
		// A member that stops answering with its connection open (frozen,
		// or its host overloaded) is given up within seconds, so that
		// the streams bound to it (watches) move to another: gRPC's
		// shortest interval (10 s; etcd accepts pings every 5 s).
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			// Reconnect within seconds of a member's return, not gRPC's
			// default of up to two minutes.
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: o.DialTimeout,
		})},
	}
}

// renewers are the lease clients sessions renew through: one per member
// (a client of its own each), so that a renewal is sent to each member
// and a member that hangs holds up only its own (session.go).
func (e *Engine) renewers() ([]pb.LeaseClient, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, kv.ErrClosed
	}
	if e.perMember == nil {
		for _, ep := range e.opts.Endpoints {
			cli, err := clientv3.New(clientConfig(e.opts, []string{ep}))
			if err != nil {
				for _, c := range e.perMember {
					c.Close()
				}
				e.perMember = nil
				return nil, kerr.Wrap(kerr.Unavailable, "etcdkv session", ep, err)
			}
			e.perMember = append(e.perMember, cli)
		}
	}
	var out []pb.LeaseClient
	for _, c := range e.perMember {
		out = append(out, pb.NewLeaseClient(c.ActiveConnection()))
	}
	return out, nil
}

// member is the client of member i alone (renewers' order).
func (e *Engine) member(i int) *clientv3.Client {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.perMember[i]
}

// Close closes the clients, ending watches and sessions' renewals; a
// second Close is a no-op.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	for _, c := range e.perMember {
		c.Close()
	}
	return e.cli.Close()
}

func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

func (e *Engine) reqCtx(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, e.opts.RequestTimeout)
	return clientv3.WithRequireLeader(ctx), cancel
}

func (e *Engine) key(k []byte) string { return e.prefix + string(k) }

// end maps a range end (nil: unbounded) into the prefix.
func (e *Engine) end(k []byte) string {
	if k == nil {
		if pe := kv.PrefixEnd([]byte(e.prefix)); pe != nil {
			return string(pe)
		}
		return "\x00" // etcd: every key from the start on
	}
	return e.key(k)
}

// fail maps a client error to the kv vocabulary.
func (e *Engine) fail(parent context.Context, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrCompacted):
		return kv.ErrCompacted
	case errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrRequestTooLarge), status.Code(err) == codes.ResourceExhausted:
		return &kerr.Error{Kind: kerr.Invalid, Op: "kv " + op, Path: e.where(),
			Msg: "refused as too large (--max-txn-ops, --max-request-bytes): " + err.Error(), Err: kv.ErrTooLarge}
	case errors.Is(err, rpctypes.ErrNoSpace):
		return kerr.Wrap(kerr.NoSpace, "kv "+op, e.where(), err)
	case parent.Err() != nil:
		return parent.Err() // the caller gave up
	case e.isClosed():
		return kv.ErrClosed
	case unavailable(err):
		return &kerr.Error{Kind: kerr.Unavailable, Op: "kv " + op, Path: e.where(),
			Msg: fmt.Sprintf("unreachable or without quorum (request timeout %v)", e.opts.RequestTimeout), Err: err}
	}
	return kerr.Wrap(kerr.Internal, "kv "+op, e.where(), err)
}

// where names the cluster in errors.
func (e *Engine) where() string { return "etcd " + strings.Join(e.opts.Endpoints, ",") }

func unavailable(err error) bool {
	for _, u := range []error{context.DeadlineExceeded, rpctypes.ErrNoLeader, rpctypes.ErrNotLeader, rpctypes.ErrLeaderChanged,
		rpctypes.ErrNotCapable, rpctypes.ErrStopped, rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail,
		rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrTimeoutWaitAppliedIndex, rpctypes.ErrUnhealthy, clientv3.ErrNoAvailableEndpoints} {
		if errors.Is(err, u) {
			return true
		}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// view reads the store at one revision: rev, or, while rev is 0, at the
// revision of its first read, which it then keeps.
type view struct {
	e   *Engine
	ctx context.Context
	rev int64
}

func (v *view) get(key, end string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := v.e.reqCtx(v.ctx)
	defer cancel()
	if end != "" {
		opts = append(opts, clientv3.WithRange(end))
	}
	if v.rev == 0 {
		resp, err := v.e.cli.Get(ctx, key, opts...)
		if err != nil {
			return nil, v.e.fail(v.ctx, "read", err)
		}
		v.rev = resp.Header.Revision
		return resp, nil
	}
	opts = append(opts, clientv3.WithRev(v.rev))
	// Any member that has applied rev can serve it; one that lags says so
	// and the read goes through the leader.
	resp, err := v.e.cli.Get(ctx, key, append(opts, clientv3.WithSerializable())...)
	if errors.Is(err, rpctypes.ErrFutureRev) {
		resp, err = v.e.cli.Get(ctx, key, opts...)
	}
	return resp, v.e.fail(v.ctx, "read", err)
}

func (v *view) Get(k []byte) ([]byte, uint64, error) {
	resp, err := v.get(v.e.key(k), "")
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, kv.ErrNotFound
	}
	return resp.Kvs[0].Value, uint64(resp.Kvs[0].ModRevision), nil
}

// Scan pages through [start, end) at the view's revision.
func (v *view) Scan(start, end []byte, fn func(k, val []byte, ver uint64) bool) error {
	from, to := v.e.key(start), v.e.end(end)
	for {
		resp, err := v.get(from, to, clientv3.WithLimit(int64(v.e.opts.PageSize)))
		if err != nil {
			return err
		}
		for _, p := range resp.Kvs {
			if !fn(p.Key[len(v.e.prefix):], p.Value, uint64(p.ModRevision)) {
				return nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func (e *Engine) Get(k []byte) ([]byte, error) {
	if e.isClosed() {
		return nil, kv.ErrClosed
	}
	v, _, err := (&view{e: e, ctx: context.Background()}).Get(k)
	return v, err
}

func (e *Engine) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	if e.isClosed() {
		return kv.ErrClosed
	}
	return (&view{e: e, ctx: context.Background()}).Scan(start, end, func(k, v []byte, _ uint64) bool { return fn(k, v) })
}

type snapshot struct{ v *view }

func (s snapshot) Get(k []byte) ([]byte, error) {
	v, _, err := s.v.Get(k)
	return v, err
}

func (s snapshot) Scan(start, end []byte, fn func(k, v []byte) bool) error {
	return s.v.Scan(start, end, func(k, v []byte, _ uint64) bool { return fn(k, v) })
}

func (s snapshot) Revision() uint64 { return uint64(s.v.rev) }
func (s snapshot) Close() error     { return nil }

// Snapshot pins the cluster's current revision; reads fail with
// kv.ErrCompacted once etcd has compacted past it.
func (e *Engine) Snapshot(ctx context.Context) (kv.Snapshot, error) {
	if e.isClosed() {
		return nil, kv.ErrClosed
	}
	v := &view{e: e, ctx: context.Background()}
	rctx, cancel := e.reqCtx(ctx)
	defer cancel()
	resp, err := e.cli.Get(rctx, e.prefix, clientv3.WithCountOnly())
	if err != nil {
		return nil, e.fail(ctx, "snapshot", err)
	}
	v.rev = resp.Header.Revision
	return snapshot{v}, nil
}

func (e *Engine) Txn(ctx context.Context, fn func(kv.Tx) error) error {
	return e.TxnIf(ctx, nil, fn)
}

func (e *Engine) TxnIf(ctx context.Context, conds []kv.Cond, fn func(kv.Tx) error) error {
	if e.isClosed() {
		return kv.ErrClosed
	}
	return kvbase.Retry(ctx, func() error {
		tx := kvbase.NewTx(func() (kvbase.View, error) { return &view{e: e, ctx: ctx}, nil })
		if err := fn(tx); err != nil {
			return err
		}
		if err := tx.Err(); errors.Is(err, kv.ErrCompacted) {
			return kvbase.ErrRetry // its revision is gone: read again at a newer one
		} else if err != nil {
			return err
		}
		if tx.ReadOnly() && len(conds) == 0 {
			return nil // its reads came from one revision
		}
		var cmps []clientv3.Cmp
		if v, ok := tx.View().(*view); ok && v.rev != 0 {
			for _, r := range tx.Reads {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(e.key(r.Key)), "=", int64(r.Ver)))
			}
			for _, rg := range tx.Ranges {
				// No key in the range written since: catches inserts and
				// changes; the keys seen, compared one by one, catch deletes.
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(e.key(rg.Start)), "<", v.rev+1).WithRange(e.end(rg.End)))
				for _, s := range rg.Seen {
					cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(e.key(s.Key)), "=", int64(s.Ver)))
				}
			}
		}
		_, err := e.commit(ctx, "transaction", tx.Writes(), conds, cmps)
		if errors.Is(err, errConflict) {
			return kvbase.ErrRetry
		}
		return err
	})
}

var errConflict = errors.New("etcdkv: read set changed")

// commit applies writes in one etcd Txn if conds hold (else
// kv.ErrCondFailed) and every compare of cmps holds (else errConflict),
// and returns its revision (0 when it wrote nothing).
func (e *Engine) commit(ctx context.Context, op string, ws []kvbase.Write, conds []kv.Cond, cmps []clientv3.Cmp) (uint64, error) {
	if len(ws) == 0 && len(conds) == 0 {
		return 0, nil
	}
	ops := make([]clientv3.Op, 0, len(ws))
	size := 0
	for _, w := range ws {
		k := e.key(w.Key)
		size += len(k) + len(w.Value) + 16
		if w.Delete {
			ops = append(ops, clientv3.OpDelete(k))
		} else {
			ops = append(ops, clientv3.OpPut(k, string(w.Value)))
		}
	}
	var guards []clientv3.Cmp
	for _, c := range conds {
		k := e.key(c.Key)
		size += len(k) + len(c.Value) + 16
		if c.Absent {
			guards = append(guards, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		} else {
			guards = append(guards, clientv3.Compare(clientv3.Value(k), "=", string(c.Value)))
		}
	}
	for _, c := range cmps {
		size += len(c.Key) + len(c.RangeEnd) + 16
	}
	// etcd counts the larger of compares and operations per level, a nested
	// Txn against what its parent left.
	n := max(len(ops), len(cmps))
	if len(guards) > 0 {
		n += len(guards)
	}
	if n > e.opts.MaxTxnOps || size > e.opts.MaxRequestBytes {
		return 0, &kerr.Error{Kind: kerr.Invalid, Op: "kv " + op, Path: e.where(), Err: kv.ErrTooLarge,
			Msg: fmt.Sprintf("%d writes, %d read checks, %d guards, about %d bytes: over the limits of %d operations (--max-txn-ops) or %d bytes (--max-request-bytes)",
				len(ops), len(cmps), len(guards), size, e.opts.MaxTxnOps, e.opts.MaxRequestBytes)}
	}
	rctx, cancel := e.reqCtx(ctx)
	defer cancel()
	rev := func(resp *clientv3.TxnResponse) uint64 {
		if len(ops) == 0 {
			return 0
		}
		return uint64(resp.Header.Revision)
	}
	if len(guards) == 0 {
		resp, err := e.cli.Txn(rctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return 0, e.fail(ctx, op, err)
		}
		if !resp.Succeeded {
			return 0, errConflict
		}
		return rev(resp), nil
	}
	resp, err := e.cli.Txn(rctx).If(guards...).Then(clientv3.OpTxn(cmps, ops, nil)).Commit()
	if err != nil {
		return 0, e.fail(ctx, op, err)
	}
	if !resp.Succeeded {
		return 0, kv.ErrCondFailed
	}
	if inner := resp.Responses[0].GetResponseTxn(); inner == nil || !inner.Succeeded {
		return 0, errConflict
	}
	return rev(resp), nil
}

// Watch is etcd's watch under prefix. from == 0 is resolved to the
// revision after the current one before Watch returns, so no commit made
// after the call is missed.
func (e *Engine) Watch(ctx context.Context, prefix []byte, from uint64) <-chan kv.WatchResponse {
	out := make(chan kv.WatchResponse, 1)
	if e.isClosed() {
		out <- kv.WatchResponse{Err: kv.ErrClosed}
		close(out)
		return out
	}
	if from == 0 {
		s, err := e.Snapshot(ctx)
		if err != nil {
			out <- kv.WatchResponse{Err: err}
			close(out)
			return out
		}
		from = s.Revision() + 1
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := e.cli.Watch(wctx, e.key(prefix), clientv3.WithPrefix(), clientv3.WithRev(int64(from)))
	go func() {
		defer close(out)
		defer cancel()
		send := func(r kv.WatchResponse) bool {
			select {
			case out <- r:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for wr := range wch {
			if err := wr.Err(); err != nil {
				if wr.CompactRevision != 0 {
					err = kv.ErrCompacted
				} else {
					err = e.fail(ctx, "watch", err)
				}
				if ctx.Err() == nil {
					send(kv.WatchResponse{Err: err})
				}
				return
			}
			if len(wr.Events) == 0 {
				continue // progress notification
			}
			evs := make([]kv.Event, len(wr.Events))
			for i, ev := range wr.Events {
				evs[i] = kv.Event{Rev: uint64(ev.Kv.ModRevision), Key: ev.Kv.Key[len(e.prefix):], Value: ev.Kv.Value}
				if ev.Type == mvccpb.DELETE {
					evs[i].Value, evs[i].Delete = nil, true
				} else if evs[i].Value == nil {
					evs[i].Value = []byte{}
				}
			}
			if !send(kv.WatchResponse{Events: evs}) {
				return
			}
		}
		if ctx.Err() == nil { // the client was closed
			send(kv.WatchResponse{Err: kv.ErrClosed})
		}
	}()
	return out
}

func (e *Engine) NewBatch() kv.Batch { return &batch{e: e} }

type batch struct {
	e     *Engine
	ws    kvbase.WriteSet
	conds []kv.Cond
	rev   uint64
}

func (b *batch) Rev() uint64 { return b.rev }

func (b *batch) Put(k, v []byte)        { b.ws.Put(k, v) }
func (b *batch) Delete(k []byte)        { b.ws.Delete(k) }
func (b *batch) If(conds ...kv.Cond)    { b.conds = append(b.conds, conds...) }
func (b *batch) Discard()               { b.ws.Reset(); b.conds = nil }
func (b *batch) Commit(sync bool) error { _, err := b.Apply(sync); return err }

// Apply commits (etcd commits are durable on a quorum when acknowledged),
// so the returned wait has nothing left to do.
func (b *batch) Apply(bool) (func() error, error) {
	defer b.Discard()
	if b.e.isClosed() {
		return nil, kv.ErrClosed
	}
	rev, err := b.e.commit(context.Background(), "batch", b.ws.All(), b.conds, nil)
	if err != nil {
		return nil, err
	}
	b.rev = rev
	return func() error { return nil }, nil
}

var _ kv.Engine = (*Engine)(nil)

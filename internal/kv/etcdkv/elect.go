package etcdkv

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Sessions are etcd leases (session.go); elections are etcd's
// (concurrency.Election: candidates are keys under the election's prefix
// bound to their session's lease, the lowest creation revision leads). A
// leadership's guard compares the value of the leader's own candidacy
// key, which exists only while its session does: once the lease expired
// or the leader resigned, every commit guarded by it fails.

var (
	_ kv.Elector   = (*Engine)(nil)
	_ kv.Statuser  = (*Engine)(nil)
	_ kv.Limiter   = (*Engine)(nil)
	_ kv.Compactor = (*Engine)(nil)
)

// Compact compacts the cluster's history (every key, not only this
// engine's prefix: etcd has one history) before rev. A revision already
// compacted is not an error. It returns once the history is gone from
// the members' databases (their space is free for reuse).
func (e *Engine) Compact(ctx context.Context, rev uint64) error {
	if e.isClosed() {
		return kv.ErrClosed
	}
	// Not bounded by the request timeout: compacting a long history takes
	// a while; ctx bounds it.
	_, err := e.cli.Compact(clientv3.WithRequireLeader(ctx), int64(rev), clientv3.WithCompactPhysical())
	if errors.Is(err, rpctypes.ErrCompacted) {
		return nil
	}
	return e.fail(ctx, "compact", err)
}

// Limits are the engine's Options: a write costs its key with the prefix,
// its value, and a few bytes of framing.
func (e *Engine) Limits() kv.Limits {
	return kv.Limits{Ops: e.opts.MaxTxnOps, Bytes: e.opts.MaxRequestBytes, PerWrite: len(e.prefix) + 16}
}

func (s *session) Campaign(ctx context.Context, name string, value []byte) (kv.Leadership, error) {
	// The wait ends with the session too: etcd's Campaign does not notice
	// that its own candidacy expired.
	cctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-cctx.Done():
		}
	}()
	el := concurrency.NewElection(s.elections(), s.e.prefix+name)
	if err := el.Campaign(cctx, string(value)); err != nil {
		select {
		case <-s.done:
			return nil, kerr.New(kerr.Unavailable, "campaign", name, "session ended (its lease expired or was revoked)")
		default:
		}
		return nil, s.e.fail(ctx, "campaign", err)
	}
	return &leadership{e: s.e, el: el, cond: kv.Cond{Key: []byte(strings.TrimPrefix(el.Key(), s.e.prefix)), Value: value}}, nil
}

type leadership struct {
	e    *Engine
	el   *concurrency.Election
	cond kv.Cond
}

func (l *leadership) Cond() kv.Cond { return l.cond }
func (l *leadership) Rev() uint64   { return uint64(l.el.Rev()) }

func (l *leadership) Resign(ctx context.Context) error {
	rctx, cancel := l.e.reqCtx(ctx)
	defer cancel()
	return l.e.fail(ctx, "resign", l.el.Resign(rctx))
}

// Leader reads the candidacy with the lowest creation revision.
func (e *Engine) Leader(ctx context.Context, name string) ([]byte, uint64, error) {
	if e.isClosed() {
		return nil, 0, kv.ErrClosed
	}
	rctx, cancel := e.reqCtx(ctx)
	defer cancel()
	resp, err := e.cli.Get(rctx, e.prefix+name+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return nil, 0, e.fail(ctx, "leader", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, kv.ErrNotFound
	}
	return resp.Kvs[0].Value, uint64(resp.Kvs[0].CreateRevision), nil
}

// statusTimeout bounds the question to each member: a member that is
// down must not hold up the report of the others.
const statusTimeout = 2 * time.Second

// Status asks every endpoint for its status, in parallel, and names the
// members from the member list (when a quorum answers it). Revision is the
// highest revision a member with a leader reported.
func (e *Engine) Status(ctx context.Context) (kv.Status, error) {
	st := kv.Status{Engine: "etcd", Members: make([]kv.Member, len(e.opts.Endpoints))}
	if e.isClosed() {
		return st, kv.ErrClosed
	}
	names := map[uint64]string{}
	byURL := map[string]string{} // a member that does not answer is named by its URL
	lctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), statusTimeout)
	if ml, err := e.cli.MemberList(lctx); err == nil {
		for _, m := range ml.Members {
			names[m.ID] = m.Name
			for _, u := range m.ClientURLs {
				byURL[u] = m.Name
			}
		}
	}
	cancel()
	revs := make([]uint64, len(e.opts.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range e.opts.Endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := kv.Member{Endpoint: ep, Name: byURL[ep]}
			sctx, cancel := context.WithTimeout(ctx, statusTimeout)
			defer cancel()
			resp, err := e.cli.Status(sctx, ep)
			switch {
			case sctx.Err() != nil:
				m.Err = "no answer within " + statusTimeout.String()
			case err != nil:
				m.Err = err.Error()
			default:
				m.Name, m.Version = names[resp.Header.MemberId], resp.Version
				m.DBSize, m.DBInUse = resp.DbSize, resp.DbSizeInUse
				m.Leader = resp.Leader != 0 && resp.Leader == resp.Header.MemberId
				m.Healthy = resp.Leader != 0 && len(resp.Errors) == 0
				switch {
				case resp.Leader == 0:
					m.Err = "no leader (no quorum)"
				case len(resp.Errors) > 0:
					m.Err = strings.Join(resp.Errors, "; ")
				default:
					revs[i] = uint64(resp.Header.Revision)
				}
			}
			st.Members[i] = m
		}()
	}
	wg.Wait()
	for _, r := range revs {
		st.Revision = max(st.Revision, r)
	}
	return st, nil
}

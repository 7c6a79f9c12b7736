package memkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
)

// Sessions and elections in one process, for tests of code that runs
// several servers over one shared engine. A session lives until Close or
// Expire (the ttl is not enforced: tests end sessions explicitly, as a
// lease would expire); it counts as renewed at every moment until Stall.
// Candidacies are keys NAME/<counter>, so key order is campaign order and
// the first key under NAME/ leads.

var _ kv.Elector = (*Engine)(nil)

type elections struct {
	mu      sync.Mutex
	next    uint64            // candidacy counter
	created map[string]uint64 // candidacy key -> revision it was created at
}

// NewSession starts a session; ttl only counts for HeldUntil.
func (e *Engine) NewSession(_ context.Context, ttl time.Duration) (kv.Session, error) {
	if e.isClosed() {
		return nil, kv.ErrClosed
	}
	return &Session{e: e, ttl: ttl, keys: map[string]bool{}, done: make(chan struct{})}, nil
}

func (e *Engine) isClosed() bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.closed
}

// Leader returns the first candidacy under name.
func (e *Engine) Leader(_ context.Context, name string) ([]byte, uint64, error) {
	k, v, err := e.first(name)
	if err != nil {
		return nil, 0, err
	}
	if k == nil {
		return nil, 0, kv.ErrNotFound
	}
	e.el.mu.Lock()
	defer e.el.mu.Unlock()
	return v, e.el.created[string(k)], nil
}

func (e *Engine) first(name string) (k, v []byte, err error) {
	p := []byte(name + "/")
	err = e.Scan(p, kv.PrefixEnd(p), func(key, val []byte) bool {
		k, v = bytes.Clone(key), bytes.Clone(val)
		return false
	})
	return k, v, err
}

// Session is an in-process session.
type Session struct {
	e       *Engine
	ttl     time.Duration
	mu      sync.Mutex
	keys    map[string]bool
	done    chan struct{}
	once    sync.Once
	stalled time.Time // Stall's last renewal (zero: renewed now)
}

func (s *Session) Done() <-chan struct{} { return s.done }

// HeldUntil is ttl from the last renewal: now, until Stall.
func (s *Session) HeldUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stalled.IsZero() {
		return s.stalled.Add(s.ttl)
	}
	return time.Now().Add(s.ttl)
}

// Stall stops the renewals as if the last one had gone through at last
// (a server cut off from the engine): the session goes on until Expire,
// but HeldUntil stays at last + ttl.
func (s *Session) Stall(last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = last
}

func (s *Session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *Session) Put(_ context.Context, key, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended() {
		return kerr.New(kerr.Unavailable, "session put", string(key), "session ended")
	}
	b := s.e.NewBatch()
	b.Put(key, value)
	if err := b.Commit(true); err != nil {
		return err
	}
	s.keys[string(key)] = true
	return nil
}

// Close ends the session, deleting its keys.
func (s *Session) Close() error {
	s.Expire()
	return nil
}

// Expire ends the session as if its lease had expired: its keys are
// deleted (its leadership with them) and Done is closed.
func (s *Session) Expire() {
	s.once.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		b := s.e.NewBatch()
		for k := range s.keys {
			b.Delete([]byte(k))
		}
		_ = b.Commit(true)
		close(s.done)
	})
}

func (s *Session) Campaign(ctx context.Context, name string, value []byte) (kv.Leadership, error) {
	s.mu.Lock()
	if s.ended() {
		s.mu.Unlock()
		return nil, kerr.New(kerr.Unavailable, "campaign", name, "session ended")
	}
	el := &s.e.el
	el.mu.Lock()
	el.next++
	key := fmt.Sprintf("%s/%016x", name, el.next)
	el.mu.Unlock()
	b := s.e.NewBatch()
	b.Put([]byte(key), value)
	if err := b.Commit(true); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	el.mu.Lock()
	if el.created == nil {
		el.created = map[string]uint64{}
	}
	el.created[key] = b.Rev()
	el.mu.Unlock()
	s.keys[key] = true
	s.mu.Unlock()

	l := &leadership{s: s, cond: kv.Cond{Key: []byte(key), Value: value}, rev: b.Rev()}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := []byte(name + "/")
	w := s.e.Watch(wctx, p, b.Rev()+1)
	for {
		k, _, err := s.e.first(name)
		if err != nil {
			return nil, err
		}
		switch {
		case k == nil || !s.owns(key):
			return nil, kerr.New(kerr.Unavailable, "campaign", name, "session ended")
		case string(k) == key:
			return l, nil
		}
		select {
		case r, ok := <-w:
			if !ok || r.Err != nil {
				if ctx.Err() != nil {
					_ = l.Resign(context.Background())
					return nil, ctx.Err()
				}
				return nil, errors.Join(kv.ErrClosed, r.Err)
			}
		case <-s.done:
			return nil, kerr.New(kerr.Unavailable, "campaign", name, "session ended")
		case <-ctx.Done():
			_ = l.Resign(context.Background())
			return nil, ctx.Err()
		}
	}
}

func (s *Session) owns(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[key] && !s.ended()
}

type leadership struct {
	s    *Session
	cond kv.Cond
	rev  uint64
}

func (l *leadership) Cond() kv.Cond { return l.cond }
func (l *leadership) Rev() uint64   { return l.rev }

func (l *leadership) Resign(context.Context) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	k := string(l.cond.Key)
	if !l.s.keys[k] {
		return nil
	}
	b := l.s.e.NewBatch()
	b.If(l.cond)
	b.Delete(l.cond.Key)
	if err := b.Commit(true); err != nil && !errors.Is(err, kv.ErrCondFailed) {
		return err
	}
	delete(l.s.keys, k)
	return nil
}

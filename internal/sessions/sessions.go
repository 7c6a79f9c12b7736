// Package sessions is the namespace service's policy for client sessions
// (EOS: the FuseServer's Clients and Caps): sessions that heartbeat,
// leases (subscriptions) on the directories and files a client caches,
// the invalidations pushed to them when the namespace's change feed says
// something they cover changed, and the lock table (locks.go).
//
// A session is online while it heartbeats, volatile once a heartbeat is
// overdue (1.5 heartbeats), offline after Offline and evicted after
// Evict: its locks are released and the waiters woken. A lease lasts
// Lease unless renewed. A session whose stream ends loses its leases (a
// client that reconnects treats everything it held as invalid) but keeps
// its locks until it is evicted or resumes.
//
// Every message pushed to a session has the next sequence number; one
// its stream could not take is lost, which the client sees as a gap, and
// the session is sent a full invalidation as soon as its stream takes one.
//
// Across incarnations (a takeover of a replicated namespace, whose new
// active server has a new term) nothing is kept: sessions reconnect to
// the new active server, drop what they cache and reclaim their locks
// during the grace window (Grace) that follows the takeover, as NFSv4 and
// CephFS clients do; meanwhile new lock requests wait.
//
// The service has no transport and no authorization: nsserver authorizes
// and resolves paths, a front end carries the messages (Sink).
package sessions

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Defaults are EOS's: heartbeat 10 s, lease 300 s, offline after 30 s,
// evicted after 120 s; lock reclaims for 30 s after a takeover; size and
// mtime updates pushed to at most 256 subscribers of a directory.
func Defaults() nsapi.SessionConfig {
	return nsapi.SessionConfig{Heartbeat: 10 * time.Second, Lease: 300 * time.Second, Offline: 30 * time.Second,
		Evict: 120 * time.Second, Grace: 30 * time.Second, MaxAudience: 256}
}

// Sink carries the messages of one session to its client.
type Sink interface {
	// Push queues m without blocking; false when the stream cannot take
	// it (m is lost).
	Push(m nsapi.SessionMessage) bool
}

// Identity is who opened a session.
type Identity struct {
	User string
	UID  uint32
}

// Config configures a Service.
type Config struct {
	nsapi.SessionConfig // zero fields: Defaults (MaxAudience < 0: no suppression)
	// Term is the incarnation (the HA term; 0 for an embedded engine).
	Term uint64
	// Takeover starts the grace window: this incarnation follows another
	// whose sessions may hold locks.
	Takeover bool
	Now      func() time.Time
	Log      *slog.Logger
}

// Service keeps the sessions of one incarnation of the namespace service.
type Service struct {
	locks *Table
	term  uint64
	now   func() time.Time
	log   *slog.Logger

	mu        sync.Mutex
	cfg       nsapi.SessionConfig
	graceEnd  time.Time
	graceDone chan struct{} // closed when the grace window ends
	sessions  map[string]*Session
	audience  map[uint64]map[*Session]struct{} // inode → sessions holding a lease on it
	lastSweep time.Time
}

// Session is one client session.
type Session struct {
	ID  string
	key string
	who Identity

	host, version string
	since         time.Time

	// guarded by Service.mu
	heartbeat time.Time
	openFiles int
	leases    map[uint64]lease
	// leasesTil: no lease of the session expires before it (the sweep
	// looks at its leases only then; renewals only move expiries later)
	leasesTil time.Time
	sink      Sink
	s         uint32 // its index on its stream
	seq       uint64
	lost      bool // a message was lost: a full invalidation is owed
	ended     bool
	sent      uint64
	dropped   uint64
	requests  uint64
	rates     rates
}

type lease struct {
	path    string
	expires time.Time
}

// rates are per-second rates over about a minute (EWMA).
type rates struct {
	at               time.Time
	sent, requests   uint64
	events, requestR float64
}

// New returns a Service.
func New(c Config) *Service {
	d := Defaults()
	cfg := c.SessionConfig
	for _, f := range []struct{ v, d *time.Duration }{{&cfg.Heartbeat, &d.Heartbeat}, {&cfg.Lease, &d.Lease},
		{&cfg.Offline, &d.Offline}, {&cfg.Evict, &d.Evict}, {&cfg.Grace, &d.Grace}} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	if cfg.MaxAudience < 0 {
		cfg.MaxAudience = 0
	} else if cfg.MaxAudience == 0 {
		cfg.MaxAudience = d.MaxAudience
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	s := &Service{locks: NewTable(), term: c.Term, now: c.Now, log: c.Log, cfg: cfg, graceDone: make(chan struct{}),
		sessions: map[string]*Session{}, audience: map[uint64]map[*Session]struct{}{}}
	if c.Takeover {
		s.graceEnd = c.Now().Add(cfg.Grace)
	} else {
		close(s.graceDone)
	}
	return s
}

// Term is the incarnation the service belongs to.
func (s *Service) Term() uint64 { return s.term }

// Config returns the current settings.
func (s *Service) Config() nsapi.SessionConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Open opens a session for who, whose messages go to sink as session s
// of its stream, or resumes the one hello names (same incarnation, same
// user, its key). A resumed session keeps its locks and loses its leases.
// Locks to reclaim (hello.Locks, from another incarnation) are granted
// while the grace window lasts, unless another reclaim took them; reclaim
// says whether the caller may (nsserver checks access to each file).
func (s *Service) Open(who Identity, hello nsapi.SessionHello, sink Sink, idx uint32, reclaim func(nsapi.Lock) bool) (*Session, nsapi.SessionInfo, error) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	info := nsapi.SessionInfo{Term: s.term, Heartbeat: s.cfg.Heartbeat, Lease: s.cfg.Lease}
	if hello.Resume != "" && hello.Term == s.term {
		if old := s.sessions[hello.Resume]; old != nil && !old.ended && old.who.UID == who.UID &&
			subtle.ConstantTimeCompare([]byte(old.key), []byte(hello.Key)) == 1 {
			s.detachLocked(old)
			old.sink, old.s, old.heartbeat, old.lost, old.seq = sink, idx, now, false, 0
			info.ID, info.Key, info.Resumed = old.ID, old.key, true
			return old, info, nil
		}
	}
	ss := &Session{ID: randomHex(8), key: randomHex(16), who: who, host: hello.Host, version: hello.Version, since: now,
		heartbeat: now, leases: map[uint64]lease{}, sink: sink, s: idx, rates: rates{at: now}}
	s.sessions[ss.ID] = ss
	info.ID, info.Key = ss.ID, ss.key
	if len(hello.Locks) > 0 {
		inGrace := now.Before(s.graceEnd) && hello.Term != s.term
		for _, l := range hello.Locks {
			if inGrace && reclaim(l) && s.reclaimLocked(ss, l) {
				info.Reclaimed = append(info.Reclaimed, l)
			} else {
				info.Lost = append(info.Lost, l)
			}
		}
	}
	return ss, info, nil
}

func (s *Service) reclaimLocked(ss *Session, l nsapi.Lock) bool {
	q, err := requestOf(ss.ID, nsapi.LockRequest{Kind: l.Kind, Type: l.Type, Owner: l.Owner, Start: l.Start, Len: l.Len, Pid: l.Pid})
	if err != nil || q.typ == unlock {
		return false
	}
	return s.locks.Reclaim(l.Ino, q)
}

// Heartbeat notes that the session is alive, with the files its client
// has open.
func (s *Service) Heartbeat(ss *Session, openFiles int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss.ended {
		return s.endedErr(ss)
	}
	ss.heartbeat = s.now()
	ss.requests++
	ss.openFiles = openFiles
	s.owedFullLocked(ss)
	return nil
}

func (s *Service) endedErr(ss *Session) error {
	return kerr.New(kerr.Expired, "session", ss.ID, "the session was closed or evicted")
}

// Subscribe gives ss a lease on inode ino (at path, for fusex caps), or
// renews it.
func (s *Service) Subscribe(ss *Session, ino uint64, path string) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss.ended {
		return time.Time{}, s.endedErr(ss)
	}
	now := s.now()
	ss.heartbeat = now
	ss.requests++
	exp := now.Add(s.cfg.Lease)
	ss.leases[ino] = lease{path: path, expires: exp}
	if len(ss.leases) == 1 || exp.Before(ss.leasesTil) {
		ss.leasesTil = exp
	}
	a := s.audience[ino]
	if a == nil {
		a = map[*Session]struct{}{}
		s.audience[ino] = a
	}
	a[ss] = struct{}{}
	return exp, nil
}

// Renew renews the leases ss holds on inos; those it no longer holds
// (expired, dropped) come back with an error.
func (s *Service) Renew(ss *Session, inos []uint64) ([]nsapi.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss.ended {
		return nil, s.endedErr(ss)
	}
	now := s.now()
	ss.heartbeat = now
	ss.requests++
	out := make([]nsapi.Lease, len(inos))
	for i, ino := range inos {
		l, ok := ss.leases[ino]
		if !ok || now.After(l.expires) {
			out[i] = nsapi.Lease{Ino: ino, Kind: kerr.Expired, Error: "no lease held on this inode (expired or dropped): subscribe again"}
			continue
		}
		l.expires = now.Add(s.cfg.Lease)
		ss.leases[ino] = l
		out[i] = nsapi.Lease{Path: l.path, Ino: ino, Expires: l.expires}
	}
	return out, nil
}

// Unsubscribe drops the leases ss holds on inos.
func (s *Service) Unsubscribe(ss *Session, inos []uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss.ended {
		return s.endedErr(ss)
	}
	ss.requests++
	for _, ino := range inos {
		s.dropLeaseLocked(ss, ino)
	}
	return nil
}

func (s *Service) dropLeaseLocked(ss *Session, ino uint64) {
	delete(ss.leases, ino)
	if a := s.audience[ino]; a != nil {
		delete(a, ss)
		if len(a) == 0 {
			delete(s.audience, ino)
		}
	}
}

func (s *Service) dropLeasesLocked(ss *Session) int {
	n := len(ss.leases)
	for ino := range ss.leases {
		s.dropLeaseLocked(ss, ino)
	}
	return n
}

// Detach notes that the stream carrying ss through sink ended: its leases
// are gone (the client drops what it caches), its locks stay until it
// resumes or is evicted.
func (s *Service) Detach(ss *Session, sink Sink) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss.sink == sink {
		s.detachLocked(ss)
	}
}

func (s *Service) detachLocked(ss *Session) {
	s.dropLeasesLocked(ss)
	ss.sink = nil
}

// Close ends ss at its client's request: its leases and locks are
// released.
func (s *Service) Close(ss *Session) {
	s.end(ss, nil, "closed by its client")
}

// end removes ss, releases its locks (failing its waiters), and sends
// tell to its client (nil: nothing).
func (s *Service) end(ss *Session, tell *nsapi.SessionMessage, why string) int {
	s.mu.Lock()
	if ss.ended {
		s.mu.Unlock()
		return 0
	}
	ss.ended = true
	s.dropLeasesLocked(ss)
	delete(s.sessions, ss.ID)
	if tell != nil && ss.sink != nil {
		ss.seq++
		tell.S, tell.Seq, tell.Term = ss.s, ss.seq, s.term
		ss.sink.Push(*tell)
	}
	ss.sink = nil
	s.mu.Unlock()
	n := s.locks.ReleaseSession(ss.ID, kerr.New(kerr.Aborted, "lock", "", "session "+ss.ID+" "+why))
	s.log.Info("session ended", "session", ss.ID, "host", ss.host, "user", ss.who.User, "why", why, "locks", n)
	return n
}

// Evict ends session id (fusex evict): its locks are released; its
// client, if connected, is told.
func (s *Service) Evict(id, why string) (int, error) {
	s.mu.Lock()
	ss := s.sessions[id]
	s.mu.Unlock()
	if ss == nil {
		return 0, kerr.New(kerr.NotFound, "fusex evict", id, "no such session")
	}
	return s.end(ss, &nsapi.SessionMessage{Kind: nsapi.SessionEvict, Error: &nsapi.ErrorBody{Kind: kerr.Expired, Message: "session " + id + " evicted: " + why}}, "evicted: "+why), nil
}

// Lock sets or releases a lock of ss on file ino (at path, for errors),
// waiting when req.Wait until it is granted, ctx ends or ss ends. While
// the grace window after a takeover lasts, it first waits for it to end.
// It returns the locks the owner holds on the file then.
func (s *Service) Lock(ctx context.Context, ss *Session, ino uint64, req nsapi.LockRequest) ([]nsapi.Lock, error) {
	q, err := requestOf(ss.ID, req)
	if err != nil {
		return nil, err
	}
	if err := s.touch(ss); err != nil {
		return nil, err
	}
	if q.typ != unlock {
		if err := s.waitGrace(ctx, req.Path); err != nil {
			return nil, err
		}
	}
	if err := s.locks.Set(ctx, ino, q, req.Wait, req.Path); err != nil {
		return nil, err
	}
	s.mu.Lock()
	ended := ss.ended
	s.mu.Unlock()
	if ended { // evicted while it waited: nothing may outlive it
		s.locks.ReleaseSession(ss.ID, nil)
		return nil, s.endedErr(ss)
	}
	return s.locks.OwnerLocks(ino, q.owner, q.flock), nil
}

// GetLk returns the lock of another owner in the way of req on file ino
// (F_GETLK), nil when none is.
func (s *Service) GetLk(ctx context.Context, ss *Session, ino uint64, req nsapi.LockRequest) (*nsapi.Lock, error) {
	q, err := requestOf(ss.ID, req)
	if err != nil {
		return nil, err
	}
	if q.typ == unlock {
		return nil, kerr.New(kerr.Invalid, "getlk", req.Path, "F_GETLK needs a read or write lock to test")
	}
	if err := s.touch(ss); err != nil {
		return nil, err
	}
	if err := s.waitGrace(ctx, req.Path); err != nil {
		return nil, err
	}
	l, busy := s.locks.Get(ino, q)
	if !busy {
		return nil, nil
	}
	l.Path = req.Path
	return &l, nil
}

func (s *Service) touch(ss *Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss.ended {
		return s.endedErr(ss)
	}
	ss.heartbeat = s.now()
	ss.requests++
	return nil
}

// waitGrace waits for the end of the grace window, if one runs.
func (s *Service) waitGrace(ctx context.Context, what string) error {
	select {
	case <-s.graceDone:
		return nil
	default:
	}
	select {
	case <-s.graceDone:
		return nil
	case <-ctx.Done():
		return kerr.Wrap(kerr.Aborted, "lock", what, ctx.Err())
	}
}

// Locks returns the locks ss holds (to reclaim them after a takeover).
func (s *Service) Locks(ss *Session) []nsapi.Lock { return s.locks.Held(ss.ID) }

// Deliver pushes the invalidations events call for to the sessions
// holding a lease on the entry, its directory, or a rename's source
// directory; each session gets each event once. Size and mtime updates
// are not pushed to an audience larger than MaxAudience.
func (s *Service) Deliver(events []nsapi.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	seen := map[*Session]struct{}{}
	for i := range events {
		e := events[i]
		if !e.Kind.Pushed() {
			continue
		}
		e.Term = s.term
		clear(seen)
		for _, ino := range [3]uint64{e.Ino, e.Parent, e.From} {
			a := s.audience[ino]
			if ino == 0 || len(a) == 0 {
				continue
			}
			if e.Kind.Suppressible() && s.cfg.MaxAudience > 0 && len(a) > s.cfg.MaxAudience {
				continue
			}
			inv := &nsapi.Invalidation{Event: e, Lease: ino}
			for ss := range a {
				if _, dup := seen[ss]; dup {
					continue
				}
				if l, ok := ss.leases[ino]; !ok || now.After(l.expires) {
					s.dropLeaseLocked(ss, ino)
					continue
				}
				seen[ss] = struct{}{}
				s.pushLocked(ss, nsapi.SessionMessage{Kind: nsapi.SessionEvent, Event: inv})
			}
		}
	}
}

// pushLocked numbers m and queues it on ss's stream; if the stream cannot
// take it, the session owes its client a full invalidation.
func (s *Service) pushLocked(ss *Session, m nsapi.SessionMessage) {
	if ss.sink == nil {
		return
	}
	ss.seq++
	m.S, m.Seq, m.Term = ss.s, ss.seq, s.term
	if ss.sink.Push(m) {
		if m.Kind == nsapi.SessionEvent {
			ss.sent++
		}
		return
	}
	if !ss.lost {
		ss.dropped++
	}
	ss.lost = true
}

// owedFullLocked sends ss the full invalidation it owes, if its stream
// takes it now.
func (s *Service) owedFullLocked(ss *Session) {
	if !ss.lost || ss.sink == nil {
		return
	}
	ss.lost = false
	s.pushLocked(ss, nsapi.SessionMessage{Kind: nsapi.SessionFull})
}

// Lost tells every session that events were lost before reaching the
// service (the change feed dropped them): each gets a full invalidation.
func (s *Service) Lost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range s.sessions {
		ss.lost = true
		s.owedFullLocked(ss)
	}
}

// Tick does the service's timed work at the current time: the grace
// window's end; at most once a second, leases that expired, sessions
// evicted, full invalidations owed, rates.
func (s *Service) Tick() {
	now := s.now()
	s.mu.Lock()
	if !s.graceEnd.IsZero() && !now.Before(s.graceEnd) {
		s.graceEnd = time.Time{}
		close(s.graceDone)
		s.log.Info("lock reclaim window over")
	}
	if now.Sub(s.lastSweep) < time.Second && !s.lastSweep.IsZero() {
		s.mu.Unlock()
		return
	}
	s.lastSweep = now
	all := make([]*Session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	// The sweep takes the service a chunk of sessions at a time: in one
	// go it held it for 0.1-0.5 s at 100 000 sessions, and every change
	// waited behind it.
	var evict []*Session
	for i := 0; i < len(all); i += sweepChunk {
		s.mu.Lock()
		for _, ss := range all[i:min(i+sweepChunk, len(all))] {
			if ss.ended {
				continue
			}
			if len(ss.leases) > 0 && now.After(ss.leasesTil) {
				// Only when one may have expired: visiting every lease
				// of every session each second doubled the sweep.
				ss.leasesTil = time.Time{}
				for ino, l := range ss.leases {
					if now.After(l.expires) {
						s.dropLeaseLocked(ss, ino)
					} else if ss.leasesTil.IsZero() || l.expires.Before(ss.leasesTil) {
						ss.leasesTil = l.expires
					}
				}
			}
			if now.Sub(ss.heartbeat) > s.cfg.Evict {
				evict = append(evict, ss)
				continue
			}
			s.owedFullLocked(ss)
			ss.rates.update(now, ss.sent, ss.requests)
		}
		s.mu.Unlock()
	}
	for _, ss := range evict {
		s.end(ss, &nsapi.SessionMessage{Kind: nsapi.SessionEvict, Error: &nsapi.ErrorBody{Kind: kerr.Expired,
			Message: "session " + ss.ID + " evicted: no heartbeat for " + s.cfg.Evict.String()}}, "no heartbeat for "+s.cfg.Evict.String())
	}
}

func (r *rates) update(now time.Time, sent, requests uint64) {
	dt := now.Sub(r.at).Seconds()
	if dt <= 0 {
		return
	}
	w := min(dt/60, 1) // about a minute's memory
	r.events += w * (float64(sent-r.sent)/dt - r.events)
	r.requestR += w * (float64(requests-r.requests)/dt - r.requestR)
	r.at, r.sent, r.requests = now, sent, requests
}

// sweepChunk is how many sessions the sweep looks at per hold of the
// service's lock.
const sweepChunk = 1000

// Run ticks until ctx ends.
func (s *Service) Run(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Tick()
		}
	}
}

// state is what `fusex ls` calls ss at now.
func (s *Service) stateLocked(ss *Session, now time.Time) string {
	age := now.Sub(ss.heartbeat)
	switch {
	case age > s.cfg.Offline:
		return nsapi.SessionOffline
	case age > s.cfg.Heartbeat*3/2:
		return nsapi.SessionVolatile
	}
	return nsapi.SessionOnline
}

// List is `fusex ls`.
func (s *Service) List() nsapi.FusexList {
	locks := s.locks.Count()
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := nsapi.FusexList{Config: s.cfg, Term: s.term, Grace: s.graceEnd, Sessions: []nsapi.SessionStatus{}}
	for _, ss := range s.sessions {
		out.Sessions = append(out.Sessions, nsapi.SessionStatus{ID: ss.ID, Host: ss.host, User: ss.who.User, Version: ss.version,
			State: s.stateLocked(ss, now), Connected: ss.sink != nil, Since: ss.since, Heartbeat: ss.heartbeat,
			Leases: len(ss.leases), OpenFiles: ss.openFiles, Locks: locks[ss.ID], Sent: ss.sent, Dropped: ss.dropped,
			Requests: ss.requests, EventRate: ss.rates.events, RequestRate: ss.rates.requestR})
	}
	sort.Slice(out.Sessions, func(i, j int) bool { return out.Sessions[i].Since.Before(out.Sessions[j].Since) })
	return out
}

// Caps is `fusex caps`: the leases of session id, or of every session
// ("").
func (s *Service) Caps(id string) ([]nsapi.SessionCap, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []nsapi.SessionCap{}
	add := func(ss *Session) {
		for ino, l := range ss.leases {
			out = append(out, nsapi.SessionCap{Session: ss.ID, Ino: ino, Path: l.path, Expires: l.expires})
		}
	}
	if id != "" {
		ss := s.sessions[id]
		if ss == nil {
			return nil, kerr.New(kerr.NotFound, "fusex caps", id, "no such session")
		}
		add(ss)
	} else {
		for _, ss := range s.sessions {
			add(ss)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Session != out[j].Session {
			return out[i].Session < out[j].Session
		}
		return out[i].Ino < out[j].Ino
	})
	return out, nil
}

// DropCaps drops every lease of session id (fusex dropcaps): its client
// is sent a full invalidation.
func (s *Service) DropCaps(id string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[id]
	if ss == nil {
		return 0, kerr.New(kerr.NotFound, "fusex dropcaps", id, "no such session")
	}
	n := s.dropLeasesLocked(ss)
	s.pushLocked(ss, nsapi.SessionMessage{Kind: nsapi.SessionFull})
	return n, nil
}

// DropLocks releases every lock on file ino (fusex droplocks).
func (s *Service) DropLocks(ino uint64) int { return s.locks.ReleaseFile(ino) }

// Locked reports whether any session holds a lock on file ino.
func (s *Service) Locked(ino uint64) bool { return s.locks.Locked(ino) }

// Configure applies KEY=VALUE settings (fusex conf): heartbeat, lease,
// offline, evict, grace (durations), broadcast.max-audience (a count, 0:
// no suppression). All are checked before any is applied.
func (s *Service) Configure(set []string) (nsapi.SessionConfig, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cfg
	for _, kv := range set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return s.cfg, kerr.New(kerr.Invalid, "fusex conf", kv, "want KEY=VALUE")
		}
		var d *time.Duration
		switch k {
		case "heartbeat":
			d = &c.Heartbeat
		case "lease":
			d = &c.Lease
		case "offline":
			d = &c.Offline
		case "evict":
			d = &c.Evict
		case "grace":
			d = &c.Grace
		case "broadcast.max-audience":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return s.cfg, kerr.New(kerr.Invalid, "fusex conf", kv, "want a count (0: no suppression)")
			}
			c.MaxAudience = n
			continue
		default:
			return s.cfg, kerr.New(kerr.Invalid, "fusex conf", kv, "unknown key (heartbeat, lease, offline, evict, grace, broadcast.max-audience)")
		}
		v2, err := time.ParseDuration(v)
		if err != nil || v2 <= 0 {
			return s.cfg, kerr.New(kerr.Invalid, "fusex conf", kv, "want a positive duration such as 10s")
		}
		*d = v2
	}
	if c.Offline < c.Heartbeat || c.Evict < c.Offline {
		return s.cfg, kerr.New(kerr.Invalid, "fusex conf", strings.Join(set, " "),
			fmt.Sprintf("want heartbeat <= offline <= evict (heartbeat %s, offline %s, evict %s)", c.Heartbeat, c.Offline, c.Evict))
	}
	s.cfg = c
	return c, nil
}

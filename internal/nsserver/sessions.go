package nsserver

import (
	"context"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/sessions"
)

// Client sessions (package sessions keeps them): the service authorizes
// what a session asks for and resolves paths; the sessions' policy
// (leases, invalidations, locks, eviction) is the sessions package's, fed
// here by the namespace's change feed.

// Session is a client session.
type Session = sessions.Session

// SessionSink carries a session's messages to its client.
type SessionSink = sessions.Sink

// OpenSession opens a session for p (or resumes the one hello names),
// whose messages go to sink as session idx of its stream. Locks hello
// reclaims are granted only on files p may read.
func (s *Server) OpenSession(ctx context.Context, p auth.Principal, hello nsapi.SessionHello, sink SessionSink, idx uint32) (*Session, nsapi.SessionInfo, error) {
	reclaim := func(l nsapi.Lock) bool { _, err := s.lockable(p, l.Ino, "", "reclaim"); return err == nil }
	ss, info, err := s.sess.Open(sessions.Identity{User: p.Name, UID: p.UID}, hello, sink, idx, reclaim)
	if len(info.Lost) > 0 {
		s.log.Warn("locks a session held before the takeover could not be reclaimed", "session", info.ID, "user", p.Name, "lost", len(info.Lost))
	}
	return ss, info, err
}

// SessionHeartbeat notes that ss is alive, with the files its client has
// open.
func (s *Server) SessionHeartbeat(ss *Session, openFiles int) error {
	return s.sess.Heartbeat(ss, openFiles)
}

// Subscribe gives ss leases on paths (directories: their entries and
// their attributes; files: their attributes and data), each for what p
// may stat; a path it may not is answered with the reason in its Lease.
// With list, a directory of at most nsapi.MaxLeaseListing entries is
// listed after its lease is granted (a directory p may not list is
// leased without).
func (s *Server) Subscribe(ctx context.Context, p auth.Principal, ss *Session, paths []string, list bool) []nsapi.Lease {
	out := make([]nsapi.Lease, len(paths))
	for i, path := range paths {
		out[i].Path = path
		e, err := s.Stat(ctx, p, path)
		if err == nil {
			out[i].Ino = e.ID
			out[i].Path = e.Path
			out[i].Expires, err = s.sess.Subscribe(ss, e.ID, e.Path)
		}
		if err == nil && list && e.IsDir && e.TreeFiles+e.TreeDirs <= nsapi.MaxLeaseListing {
			if es, lerr := s.List(ctx, p, e.Path); lerr == nil {
				out[i].Listed, out[i].Entries = true, es
			}
		}
		if err != nil {
			out[i].Kind, out[i].Error = kerr.KindOf(err), err.Error()
		}
	}
	return out
}

// RenewLeases renews the leases ss holds on inos.
func (s *Server) RenewLeases(ss *Session, inos []uint64) ([]nsapi.Lease, error) {
	return s.sess.Renew(ss, inos)
}

// Unsubscribe drops the leases ss holds on inos.
func (s *Server) Unsubscribe(ss *Session, inos []uint64) error { return s.sess.Unsubscribe(ss, inos) }

// lockable is the file p may lock (what names it: path, or else ino): it
// must be able to read it, as an open file is needed to lock one.
func (s *Server) lockable(p auth.Principal, ino uint64, path, op string) (*namespace.Inode, error) {
	var n *namespace.Inode
	var err error
	if path != "" {
		if err = scope(p, auth.ScopeRead, path, op); err != nil {
			return nil, err
		}
		n, err = s.ns.Stat(caller(p), path)
	} else {
		if err = s.scopeIno(p, auth.ScopeRead, ino, "", op); err != nil {
			return nil, err
		}
		n, err = s.ns.GetAttr(caller(p), ino)
	}
	if err != nil {
		return nil, err
	}
	if !n.IsDir && !s.canRead(p, n) {
		return nil, kerr.New(kerr.Permission, op, path, "read permission denied (a lock needs the file open)")
	}
	return n, nil
}

// SessionLock sets or releases a lock of ss on the file at req.Path,
// waiting when req.Wait (until granted, ctx ends, or ss ends); it
// returns the locks the owner holds on the file then.
func (s *Server) SessionLock(ctx context.Context, p auth.Principal, ss *Session, req nsapi.LockRequest) ([]nsapi.Lock, error) {
	n, err := s.lockable(p, 0, req.Path, "lock")
	if err != nil {
		return nil, s.refused(ctx, p, "lock", req.Path, err)
	}
	return s.sess.Lock(ctx, ss, n.ID, req)
}

// SessionGetLk returns the lock in the way of req (F_GETLK), nil when
// none is.
func (s *Server) SessionGetLk(ctx context.Context, p auth.Principal, ss *Session, req nsapi.LockRequest) (*nsapi.Lock, error) {
	n, err := s.lockable(p, 0, req.Path, "getlk")
	if err != nil {
		return nil, s.refused(ctx, p, "getlk", req.Path, err)
	}
	return s.sess.GetLk(ctx, ss, n.ID, req)
}

// SessionLocks returns the locks ss holds.
func (s *Server) SessionLocks(ss *Session) []nsapi.Lock { return s.sess.Locks(ss) }

// DetachSession notes that the stream carrying ss through sink ended.
func (s *Server) DetachSession(ss *Session, sink SessionSink) { s.sess.Detach(ss, sink) }

// CloseSession ends ss at its client's request.
func (s *Server) CloseSession(ss *Session) { s.sess.Close(ss) }

// feedSessions pushes the namespace's changes to the sessions until ctx
// ends; when the feed dropped events before they were read, every
// session is sent a full invalidation.
func (s *Server) feedSessions(ctx context.Context) {
	after := s.ns.Revision()
	for {
		evs, err := s.ns.Changes(ctx, after, 4096)
		switch {
		case ctx.Err() != nil:
			return
		case kerr.Is(err, kerr.Busy):
			s.log.Warn("sessions fell behind the change feed: every session drops what it caches", "err", err)
			s.sess.Lost()
			after = s.ns.Revision()
			continue
		case err != nil:
			s.log.Error("reading the change feed for sessions", "err", err)
			s.sess.Lost()
			time.Sleep(time.Second)
			after = s.ns.Revision()
			continue
		}
		after = evs[len(evs)-1].Rev
		s.sess.Deliver(eventsOf(evs))
	}
}

// Administration of sessions (kaon fusex), for the admin role.

// FusexList lists the sessions (fusex ls).
func (s *Server) FusexList(_ context.Context, p auth.Principal) (nsapi.FusexList, error) {
	if err := requireRoot(p, "fusex ls"); err != nil {
		return nsapi.FusexList{}, err
	}
	return s.sess.List(), nil
}

// FusexCaps lists the leases of session id, or of all ("").
func (s *Server) FusexCaps(_ context.Context, p auth.Principal, id string) ([]nsapi.SessionCap, error) {
	if err := requireRoot(p, "fusex caps"); err != nil {
		return nil, err
	}
	return s.sess.Caps(id)
}

// FusexEvict ends session id, releasing its locks.
func (s *Server) FusexEvict(ctx context.Context, p auth.Principal, id string) (nsapi.FusexDropped, error) {
	if err := requireRoot(p, "fusex evict"); err != nil {
		return nsapi.FusexDropped{}, s.audit(ctx, p, "fusex evict", id, "", err)
	}
	n, err := s.sess.Evict(id, "by the administrator")
	return nsapi.FusexDropped{Locks: n}, s.audit(ctx, p, "fusex evict", id, "", err)
}

// FusexDropCaps drops the leases of session id (its client drops what it
// caches).
func (s *Server) FusexDropCaps(ctx context.Context, p auth.Principal, id string) (nsapi.FusexDropped, error) {
	if err := requireRoot(p, "fusex dropcaps"); err != nil {
		return nsapi.FusexDropped{}, s.audit(ctx, p, "fusex dropcaps", id, "", err)
	}
	n, err := s.sess.DropCaps(id)
	return nsapi.FusexDropped{Leases: n}, s.audit(ctx, p, "fusex dropcaps", id, "", err)
}

// FusexDropLocks releases every lock on the file at path.
func (s *Server) FusexDropLocks(ctx context.Context, p auth.Principal, path string) (nsapi.FusexDropped, error) {
	if err := requireRoot(p, "fusex droplocks"); err != nil {
		return nsapi.FusexDropped{}, s.audit(ctx, p, "fusex droplocks", path, "", err)
	}
	n, err := s.ns.Stat(caller(p), path)
	if err != nil {
		return nsapi.FusexDropped{}, s.audit(ctx, p, "fusex droplocks", path, "", err)
	}
	return nsapi.FusexDropped{Locks: s.sess.DropLocks(n.ID)}, s.audit(ctx, p, "fusex droplocks", path, "", nil)
}

// FusexConf changes the session settings (none given: reads them).
func (s *Server) FusexConf(ctx context.Context, p auth.Principal, set []string) (nsapi.SessionConfig, error) {
	if err := requireRoot(p, "fusex conf"); err != nil {
		return nsapi.SessionConfig{}, s.audit(ctx, p, "fusex conf", "", "", err)
	}
	if len(set) == 0 {
		return s.sess.Config(), nil
	}
	c, err := s.sess.Configure(set)
	return c, s.audit(ctx, p, "fusex conf", "", "", err)
}

package nsserver

import (
	"context"
	"sync"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// keptRefusals is how many of the latest refusals the service keeps for
// the admin's status page (whether or not an audit log is written).
const keptRefusals = 50

// refusals is a ring of the latest refused requests.
type refusals struct {
	mu   sync.Mutex
	ring []nsapi.Refusal
	next int
}

// add keeps r if err is a refusal (permission, expiry, quota).
func (rs *refusals) add(r AuditRecord, err error) {
	switch kerr.KindOf(err) {
	case kerr.Permission, kerr.Expired, kerr.Quota:
	default:
		return
	}
	f := nsapi.Refusal{Time: r.Time, User: r.User, Method: r.Method, Protocol: r.Protocol, Op: r.Op, Path: r.Path, Reason: r.Error}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.ring) < keptRefusals {
		rs.ring = append(rs.ring, f)
		return
	}
	rs.ring[rs.next] = f
	rs.next = (rs.next + 1) % keptRefusals
}

// RecentRefusals are the latest requests the service refused, newest
// first (admin only: they name other users' paths).
func (s *Server) RecentRefusals(_ context.Context, p auth.Principal) ([]nsapi.Refusal, error) {
	if err := auth.RequireAdmin(p, "recent refusals"); err != nil {
		return nil, err
	}
	rs := &s.refusals
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make([]nsapi.Refusal, 0, len(rs.ring))
	for i := range rs.ring {
		out = append(out, rs.ring[(rs.next+len(rs.ring)-1-i)%len(rs.ring)])
	}
	return out, nil
}

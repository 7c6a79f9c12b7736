package nsserver

import (
	"context"
	"maps"
	"slices"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// SetQuota sets a limit on the directory at path (root only).
func (s *Server) SetQuota(ctx context.Context, p auth.Principal, path string, key namespace.QuotaKey, limit namespace.Amount) error {
	if err := requireRoot(p, "quota set"); err != nil {
		return s.audit(ctx, p, "quota set", path, "", err)
	}
	return s.audit(ctx, p, "quota set", path, "", s.ns.SetQuota(caller(p), path, key, limit))
}

// RemoveQuota removes a limit from the directory at path (root only).
func (s *Server) RemoveQuota(ctx context.Context, p auth.Principal, path string, key namespace.QuotaKey) error {
	if err := requireRoot(p, "quota rm"); err != nil {
		return s.audit(ctx, p, "quota rm", path, "", err)
	}
	return s.audit(ctx, p, "quota rm", path, "", s.ns.RemoveQuota(caller(p), path, key))
}

// Quotas reports the quota nodes at or below path: to the admin every
// limit, to others those that apply to them (their user, their groups,
// the project's).
func (s *Server) Quotas(_ context.Context, p auth.Principal, path string) ([]namespace.QuotaReport, error) {
	if err := scope(p, auth.ScopeRead, path, "quota ls"); err != nil {
		return nil, err
	}
	qs, err := s.ns.Quotas(caller(p), path)
	if err != nil || requireRoot(p, "quota ls") == nil {
		return qs, err
	}
	mine := func(k namespace.QuotaKey) bool {
		switch k.Kind {
		case namespace.QuotaUser:
			return k.ID == p.UID
		case namespace.QuotaGroup:
			return k.ID == p.GID || slices.Contains(p.Groups, k.ID)
		}
		return true
	}
	for _, q := range qs {
		for _, m := range []map[namespace.QuotaKey]namespace.Amount{q.Limits, q.Used, q.Booked} {
			maps.DeleteFunc(m, func(k namespace.QuotaKey, _ namespace.Amount) bool { return !mine(k) })
		}
	}
	return qs, nil
}

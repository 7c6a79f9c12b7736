package nsserver

import (
	"cmp"
	"context"
	"slices"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// SetQuota sets a limit on the directory at path (root only).
func (s *Server) SetQuota(ctx context.Context, p auth.Principal, path string, key nsapi.QuotaKey, limit nsapi.Amount) error {
	if err := requireRoot(p, "quota set"); err != nil {
		return s.audit(ctx, p, "quota set", path, "", err)
	}
	err := s.ns.SetQuota(caller(p), path, quotaKeyOf(key), namespace.Amount{Bytes: limit.Bytes, Files: limit.Files})
	return s.audit(ctx, p, "quota set", path, "", err)
}

// RemoveQuota removes a limit from the directory at path (root only).
func (s *Server) RemoveQuota(ctx context.Context, p auth.Principal, path string, key nsapi.QuotaKey) error {
	if err := requireRoot(p, "quota rm"); err != nil {
		return s.audit(ctx, p, "quota rm", path, "", err)
	}
	return s.audit(ctx, p, "quota rm", path, "", s.ns.RemoveQuota(caller(p), path, quotaKeyOf(key)))
}

// Quotas reports the limits of the quota nodes at or below path, sorted
// by path, kind and id: to the admin every limit, to others those that
// apply to them (their user, their groups, the project's).
func (s *Server) Quotas(_ context.Context, p auth.Principal, path string) ([]nsapi.Quota, error) {
	if err := scope(p, auth.ScopeRead, path, "quota ls"); err != nil {
		return nil, err
	}
	qs, err := s.ns.Quotas(caller(p), path)
	if err != nil {
		return nil, err
	}
	admin := requireRoot(p, "quota ls") == nil
	mine := func(k namespace.QuotaKey) bool {
		switch {
		case admin:
			return true
		case k.Kind == namespace.QuotaUser:
			return k.ID == p.UID
		case k.Kind == namespace.QuotaGroup:
			return k.ID == p.GID || slices.Contains(p.Groups, k.ID)
		}
		return true
	}
	out := []nsapi.Quota{}
	for _, q := range qs {
		for k, limit := range q.Limits {
			if mine(k) {
				out = append(out, nsapi.Quota{Path: q.Path, Kind: quotaKinds[k.Kind], ID: k.ID, LimitBytes: limit.Bytes,
					LimitFiles: limit.Files, UsedBytes: q.Used[k].Bytes, UsedFiles: q.Used[k].Files, BookedBytes: q.Booked[k].Bytes})
			}
		}
	}
	slices.SortFunc(out, func(a, b nsapi.Quota) int {
		return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

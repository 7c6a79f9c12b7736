package nsserver

import (
	"context"

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

// Quotas reports the quota nodes at or below path.
func (s *Server) Quotas(_ context.Context, p auth.Principal, path string) ([]namespace.QuotaReport, error) {
	return s.ns.Quotas(caller(p), path)
}

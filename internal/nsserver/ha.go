package nsserver

import (
	"context"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// StepDown hands the active role of a replicated namespace to a standby
// (`kaon ns step-down`, root only): Config.StepDown does it.
func (s *Server) StepDown(ctx context.Context, p auth.Principal) (err error) {
	defer func() { err = s.audit(ctx, p, "ns step-down", "", "", err) }()
	if err := requireRoot(p, "ns step-down"); err != nil {
		return err
	}
	if s.cfg.StepDown == nil {
		return kerr.New(kerr.Unsupported, "ns step-down", "", "this namespace is not replicated (kaon mgm --meta etcd://...)")
	}
	return s.cfg.StepDown(ctx)
}

// HandOver is what this server hands its successor when it steps down
// from the active role of a replicated namespace (internal/ha), once its
// store takes no more writes: its uploads in flight (Config.Inherit of the
// successor). Claims are refused from then on.
func (s *Server) HandOver() namespace.InFlight { return s.ns.HandOver() }

package nsserver

import (
	"context"
	"encoding/json"

	"github.com/kaon-storage/kaon/internal/access"
	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Access rules (kaon access) and who is connected (kaon who), decided by
// package access. Every front end calls Admit once per request, after
// authenticating its client: the rules apply to every protocol, and an
// open connection meets a new rule at its next request. They live in the
// namespace's engine (setting "access"), so they survive restarts and
// every server of a replicated instance applies them.

// accessSetting is the namespace setting that holds the rules.
const accessSetting = "access"

// loadAccess reads the rules from the namespace.
func (s *Server) loadAccess() error {
	var r nsapi.AccessRules
	b, err := s.ns.Setting(accessSetting)
	if err != nil {
		return err
	}
	if b != nil {
		if err := json.Unmarshal(b, &r); err != nil {
			return kerr.Wrap(kerr.Internal, "access rules", accessSetting, err)
		}
	}
	s.access = access.New(r)
	return nil
}

// Admit decides whether the namespace serves a request of p now
// (access.Service.Admit: nil, or why not).
func (s *Server) Admit(ctx context.Context, p auth.Principal) error {
	return s.access.Admit(auth.Protocol(ctx), p, s.now())
}

// AccessRules returns the access rules (admin only).
func (s *Server) AccessRules(_ context.Context, p auth.Principal) (nsapi.AccessRules, error) {
	if err := requireRoot(p, "access ls"); err != nil {
		return nsapi.AccessRules{}, err
	}
	return s.access.Rules(), nil
}

// SetAccess changes the access rules (admin only): verb is ban, unban,
// allow, unallow, stall, redirect or limit (nsapi.AccessRequest).
func (s *Server) SetAccess(ctx context.Context, p auth.Principal, verb string, r nsapi.AccessRequest) (err error) {
	op := "access " + verb
	defer func() { err = s.audit(ctx, p, op, r.Kind+" "+r.Value, r.Arg, err) }()
	if err := requireRoot(p, op); err != nil {
		return err
	}
	sub, err := r.SubjectOf(op)
	if err != nil {
		return err
	}
	if sub != nil {
		if sub.Value, err = access.Resolve(op, *sub); err != nil {
			return err
		}
	}
	s.accessMu.Lock()
	defer s.accessMu.Unlock()
	next, err := access.Changed(s.access.Rules(), op, verb, sub, r.Arg)
	if err != nil {
		return err
	}
	return s.storeAccess(next)
}

// storeAccess saves rules r and puts them in force (s.accessMu held).
func (s *Server) storeAccess(r nsapi.AccessRules) error {
	b, err := json.Marshal(r)
	if err != nil {
		return kerr.Wrap(kerr.Internal, "access", accessSetting, err)
	}
	if err := s.ns.SaveSetting(accessSetting, b); err != nil {
		return err
	}
	s.access.Set(r)
	return nil
}

// Clients lists the clients served lately (admin only: kaon who).
func (s *Server) Clients(_ context.Context, p auth.Principal) ([]nsapi.Client, error) {
	if err := requireRoot(p, "who"); err != nil {
		return nil, err
	}
	return s.access.Clients(s.now()), nil
}

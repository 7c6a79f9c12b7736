package httpfront

import (
	"context"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Admin API: client sessions (kaon fusex), for the admin role.

func (a api) fusexList(ctx context.Context, c auth.Principal, _ nsapi.None) (nsapi.FusexList, error) {
	return a.ns.FusexList(ctx, c)
}

func (a api) fusexCaps(ctx context.Context, c auth.Principal, r nsapi.FusexSessionRequest) ([]nsapi.SessionCap, error) {
	return a.ns.FusexCaps(ctx, c, r.Session)
}

func (a api) fusexEvict(ctx context.Context, c auth.Principal, r nsapi.FusexSessionRequest) (nsapi.FusexDropped, error) {
	return a.ns.FusexEvict(ctx, c, r.Session)
}

func (a api) fusexDropCaps(ctx context.Context, c auth.Principal, r nsapi.FusexSessionRequest) (nsapi.FusexDropped, error) {
	return a.ns.FusexDropCaps(ctx, c, r.Session)
}

func (a api) fusexDropLocks(ctx context.Context, c auth.Principal, r nsapi.FusexPathRequest) (nsapi.FusexDropped, error) {
	return a.ns.FusexDropLocks(ctx, c, r.Path)
}

func (a api) fusexConf(ctx context.Context, c auth.Principal, r nsapi.FusexConfRequest) (nsapi.SessionConfig, error) {
	return a.ns.FusexConf(ctx, c, r.Set)
}

package httpfront

import (
	"context"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Admin API: data movement (drain status, groups and their balancer,
// conversions).

func (a api) drainStatus(ctx context.Context, c auth.Principal, r nsapi.FsStatusRequest) (nsapi.FsStatus, error) {
	return a.ns.DrainStatus(ctx, c, r.ID)
}

func (a api) groups(ctx context.Context, c auth.Principal, _ nsapi.None) ([]nsapi.Group, error) {
	return a.ns.Groups(ctx, c)
}

func (a api) setGroup(ctx context.Context, c auth.Principal, r nsapi.ConfigRequest) (done, error) {
	return done{}, a.ns.SetGroup(ctx, c, r.Name, r.Key, r.Value)
}

func (a api) convert(ctx context.Context, c auth.Principal, r nsapi.ConvertRequest) (nsapi.Entry, error) {
	return a.ns.ConvertFile(ctx, c, r.Path, r.Space, r.Layout)
}

func (a api) convertStatus(ctx context.Context, c auth.Principal, _ nsapi.None) (nsapi.ConvertStatus, error) {
	return a.ns.ConvertStatus(ctx, c)
}

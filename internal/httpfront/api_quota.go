package httpfront

import (
	"context"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Admin API: quota and the recycle bin.

func (a api) setQuota(ctx context.Context, c auth.Principal, r nsapi.QuotaSetRequest) (done, error) {
	return done{}, a.ns.SetQuota(ctx, c, r.Path, r.Key(), r.Limit())
}

func (a api) removeQuota(ctx context.Context, c auth.Principal, r nsapi.QuotaKeyRequest) (done, error) {
	return done{}, a.ns.RemoveQuota(ctx, c, r.Path, r.Key())
}

func (a api) quotas(ctx context.Context, c auth.Principal, r nsapi.QuotaListRequest) ([]nsapi.Quota, error) {
	return a.ns.Quotas(ctx, c, r.Path)
}

func (a api) recycleList(ctx context.Context, c auth.Principal, _ nsapi.None) ([]nsapi.RecycleEntry, error) {
	return a.ns.RecycleList(ctx, c)
}

func (a api) recycleRestore(ctx context.Context, c auth.Principal, r nsapi.RecycleRestoreRequest) (nsapi.RecycleRestored, error) {
	p, err := a.ns.RecycleRestore(ctx, c, r.Key, r.ForceRename)
	return nsapi.RecycleRestored{Path: p}, err
}

func (a api) recyclePurge(ctx context.Context, c auth.Principal, r nsapi.RecyclePurgeRequest) (nsapi.RecyclePurged, error) {
	n, err := a.ns.RecyclePurge(ctx, c, r.Key, r.OlderThan.Duration())
	return nsapi.RecyclePurged{Purged: n}, err
}

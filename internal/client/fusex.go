package client

import (
	"context"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Client sessions' administration (kaon fusex), for the admin role.

// FusexList lists the sessions and their settings.
func (c *Client) FusexList(ctx context.Context) (nsapi.FusexList, error) {
	return get[nsapi.FusexList](ctx, c, "fusex/ls", nsapi.None{})
}

// FusexCaps lists the leases of session id, or of every session ("").
func (c *Client) FusexCaps(ctx context.Context, id string) ([]nsapi.SessionCap, error) {
	return get[[]nsapi.SessionCap](ctx, c, "fusex/caps", nsapi.FusexSessionRequest{Session: id})
}

// FusexEvict ends session id; its locks are released.
func (c *Client) FusexEvict(ctx context.Context, id string) (nsapi.FusexDropped, error) {
	return post[nsapi.FusexDropped](ctx, c, "fusex/evict", nsapi.FusexSessionRequest{Session: id})
}

// FusexDropCaps drops the leases of session id.
func (c *Client) FusexDropCaps(ctx context.Context, id string) (nsapi.FusexDropped, error) {
	return post[nsapi.FusexDropped](ctx, c, "fusex/dropcaps", nsapi.FusexSessionRequest{Session: id})
}

// FusexDropLocks releases every lock on the file at path.
func (c *Client) FusexDropLocks(ctx context.Context, path string) (nsapi.FusexDropped, error) {
	return post[nsapi.FusexDropped](ctx, c, "fusex/droplocks", nsapi.FusexPathRequest{Path: path})
}

// FusexConf changes session settings (KEY=VALUE; none: reads them).
func (c *Client) FusexConf(ctx context.Context, set ...string) (nsapi.SessionConfig, error) {
	return post[nsapi.SessionConfig](ctx, c, "fusex/conf", nsapi.FusexConfRequest{Set: set})
}

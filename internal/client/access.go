package client

import (
	"context"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Access rules and clients (admin only).

// AccessRules returns the instance's access rules (`access ls`).
func (c *Client) AccessRules(ctx context.Context) (nsapi.AccessRules, error) {
	return get[nsapi.AccessRules](ctx, c, "access/ls", nsapi.None{})
}

// SetAccess changes the access rules: verb is ban, unban, allow, unallow,
// stall, redirect or limit.
func (c *Client) SetAccess(ctx context.Context, verb string, r nsapi.AccessRequest) error {
	return c.change(ctx, "access/"+verb, r)
}

// Clients lists the clients the namespace served lately (`who`).
func (c *Client) Clients(ctx context.Context) ([]nsapi.Client, error) {
	return get[[]nsapi.Client](ctx, c, "who", nsapi.None{})
}

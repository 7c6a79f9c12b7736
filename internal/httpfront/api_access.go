package httpfront

import (
	"context"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Admin API: who the client is, tokens.

func (a api) whoami(_ context.Context, c auth.Principal, _ nsapi.None) (nsapi.Whoami, error) {
	w := nsapi.Whoami{UID: c.UID, GID: c.GID, Groups: c.Groups, Name: c.Name, Method: c.Method, FQANs: c.FQANs}
	for _, s := range c.Scopes {
		w.Scopes = append(w.Scopes, s.Op+":"+s.Path)
	}
	return w, nil
}

func (a api) issueToken(ctx context.Context, c auth.Principal, r nsapi.TokenRequest) (nsapi.Token, error) {
	tok, err := a.ns.IssueToken(ctx, c, r)
	return nsapi.Token{Token: tok}, err
}

func (a api) rotateTokenKey(ctx context.Context, c auth.Principal, _ nsapi.None) (nsapi.TokenKey, error) {
	kid, err := a.ns.RotateTokenKey(ctx, c)
	return nsapi.TokenKey{KID: kid}, err
}

func (a api) tokenKeys(ctx context.Context, c auth.Principal, _ nsapi.None) ([]nsapi.TokenKey, error) {
	return a.ns.TokenKeys(ctx, c)
}

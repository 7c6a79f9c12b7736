package httpfront

import (
	"context"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Admin API: who the client is, tokens.

func (a api) whoami(_ context.Context, c auth.Principal, _ nsapi.None) (nsapi.Whoami, error) {
	w := nsapi.Whoami{UID: c.UID, GID: c.GID, Groups: c.Groups, Name: c.Name, Method: c.Method, FQANs: c.FQANs, Authz: c.Authz()}
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

func (a api) accessRules(ctx context.Context, c auth.Principal, _ nsapi.None) (nsapi.AccessRules, error) {
	return a.ns.AccessRules(ctx, c)
}

// accessVerb serves POST access/VERB: a change of the access rules.
func accessVerb(verb string) func(api, context.Context, auth.Principal, nsapi.Args) (any, error) {
	return typed(func(a api, ctx context.Context, c auth.Principal, r nsapi.AccessRequest) (done, error) {
		return done{}, a.ns.SetAccess(ctx, c, verb, r)
	})
}

func (a api) who(ctx context.Context, c auth.Principal, _ nsapi.None) ([]nsapi.Client, error) {
	return a.ns.Clients(ctx, c)
}

package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/auth/token"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() {
	addVerb(newTokenCmd)
}

const tokenUsage = `usage:
  kaon token issue --path /p [--path /q] --scope storage.read[,storage.create] --ttl 1h [--user U] [--aud A]
  kaon token inspect [TOKEN | -]     (default: $BEARER_TOKEN)
  kaon token rotate                  (the published next key signs from now on, a new next key is published;
                                      tokens of the old one stay valid until they expire)
  kaon token keys`

func newTokenCmd() *cobra.Command {
	var paths, scopes, aud []string
	var ttl time.Duration
	var user string
	issue := leaf("issue --path /p --scope S --ttl 1h [--user U] [--aud A]", "issue a bearer token of this instance (scoped to paths)", func(c *cobra.Command, _ []string) int {
		var sc []string
		for _, s := range scopes {
			sc = append(sc, strings.Split(s, ",")...)
		}
		tok, err := newAPI(urlOf(c)).IssueToken(ctx(), nsapi.TokenRequest{User: user, Paths: paths, Scopes: sc, Audience: aud, TTL: nsapi.Duration(ttl)})
		if err != nil {
			return fail("token issue", err)
		}
		fmt.Println(tok)
		return 0
	})
	fl := issue.Flags()
	fl.StringArrayVar(&paths, "path", nil, "namespace path the token is good for (repeatable)")
	fl.StringArrayVar(&scopes, "scope", nil, "storage.read, storage.create, storage.modify (or read, write); comma-separated or repeated")
	fl.StringArrayVar(&aud, "aud", nil, "audience (repeatable; default: this instance's URL)")
	fl.DurationVar(&ttl, "ttl", time.Hour, "lifetime")
	fl.StringVar(&user, "user", "", "local user the token acts as (default: you; never root)")
	inspect := leaf("inspect [TOKEN | -]", "what a token says (default $BEARER_TOKEN; - reads stdin), then how the server takes it", func(c *cobra.Command, args []string) int {
		return runTokenInspect(urlOf(c), args)
	})
	rotate := leaf("rotate", "the published next key signs from now on, a new next key is published (tokens of the old one stay valid until they expire)", func(c *cobra.Command, _ []string) int {
		kid, err := newAPI(urlOf(c)).RotateTokenKey(ctx())
		if err != nil {
			return fail("token rotate", err)
		}
		fmt.Println(kid)
		return 0
	})
	keys := leaf("keys", "the instance's token keys: signing, published next, retired", func(c *cobra.Command, _ []string) int {
		keys, err := newAPI(urlOf(c)).TokenKeys(ctx())
		if err != nil {
			return fail("token keys", err)
		}
		for _, k := range keys {
			state := "signing"
			switch {
			case k.Next:
				state = "published (signs after the next rotation)"
			case k.Retired != nil:
				state = "verifying (retired " + k.Retired.Format(time.RFC3339) + ")"
			}
			fmt.Printf("%s  created %s  %s\n", k.KID, k.Created.Format(time.RFC3339), state)
		}
		return 0
	})
	g := group("token", "bearer tokens: token issue|inspect|rotate|keys", withURL(issue), withURL(inspect), withURL(rotate), withURL(keys))
	g.Long = tokenUsage
	return g
}

// runTokenInspect prints what a token says (signature not checked here),
// then how the server takes it.
func runTokenInspect(u server, args []string) int {
	raw := envBearer()
	switch {
	case len(args) == 1 && args[0] == "-":
		b, _ := io.ReadAll(os.Stdin)
		raw = strings.TrimSpace(string(b))
	case len(args) == 1:
		raw = args[0]
	}
	if raw == "" {
		fmt.Fprintln(os.Stderr, tokenUsage)
		return 2
	}
	t, err := token.Inspect(raw)
	if err != nil {
		return fail("token inspect", err)
	}
	fmt.Println(t)
	if exp, ok := t.Claims["exp"].(float64); ok {
		left := time.Until(time.Unix(int64(exp), 0)).Round(time.Second)
		if left > 0 {
			fmt.Printf("expires in %s\n", left)
		} else {
			fmt.Printf("expired %s ago\n", -left)
		}
	}
	api := newAPI(u)
	api.Token = raw
	w, err := api.Whoami(ctx())
	if err != nil {
		fmt.Printf("server %s: %v\n", api.Base, err)
		return 1
	}
	fmt.Printf("server %s: uid=%d gid=%d name=%s method=%s scopes=%s\n", api.Base, w.UID, w.GID, w.Name, w.Method, strings.Join(w.Scopes, " "))
	return 0
}

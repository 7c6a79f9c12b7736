package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/auth/token"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() {
	register(command{name: "token", short: "bearer tokens: token issue|inspect|rotate|keys", run: runToken})
}

const tokenUsage = `usage:
  kaon token issue --path /p [--path /q] --scope storage.read[,storage.create] --ttl 1h [--user U] [--aud A]
  kaon token inspect [TOKEN | -]     (default: $BEARER_TOKEN)
  kaon token rotate                  (the published next key signs from now on, a new next key is published;
                                      tokens of the old one stay valid until they expire)
  kaon token keys`

func runToken(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, tokenUsage)
		return 2
	}
	switch args[0] {
	case "issue":
		return runTokenIssue(args[1:])
	case "inspect":
		return runTokenInspect(args[1:])
	case "rotate":
		fl, u := flags("token rotate")
		fl.Parse(args[1:])
		kid, err := newAPI(*u).RotateTokenKey(ctx())
		if err != nil {
			return fail("token rotate", err)
		}
		fmt.Println(kid)
		return 0
	case "keys":
		fl, u := flags("token keys")
		fl.Parse(args[1:])
		keys, err := newAPI(*u).TokenKeys(ctx())
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
	}
	fmt.Fprintln(os.Stderr, tokenUsage)
	return 2
}

func runTokenIssue(args []string) int {
	fl, u := flags("token issue")
	var paths, scopes, aud stringList
	fl.Var(&paths, "path", "namespace path the token is good for (repeatable)")
	fl.Var(&scopes, "scope", "storage.read, storage.create, storage.modify (or read, write); comma-separated or repeated")
	fl.Var(&aud, "aud", "audience (repeatable; default: this instance's URL)")
	ttl := fl.Duration("ttl", time.Hour, "lifetime")
	user := fl.String("user", "", "local user the token acts as (default: you; never root)")
	fl.Parse(args)
	var sc []string
	for _, s := range scopes {
		sc = append(sc, strings.Split(s, ",")...)
	}
	tok, err := newAPI(*u).IssueToken(ctx(), nsapi.TokenRequest{User: *user, Paths: paths, Scopes: sc, Audience: aud, TTL: nsapi.Duration(*ttl)})
	if err != nil {
		return fail("token issue", err)
	}
	fmt.Println(tok)
	return 0
}

// runTokenInspect prints what a token says (signature not checked here),
// then how the server takes it.
func runTokenInspect(args []string) int {
	fl, u := flags("token inspect")
	fl.Parse(args)
	raw := envBearer()
	switch {
	case fl.NArg() == 1 && fl.Arg(0) == "-":
		b, _ := io.ReadAll(os.Stdin)
		raw = strings.TrimSpace(string(b))
	case fl.NArg() == 1:
		raw = fl.Arg(0)
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
	api := newAPI(*u)
	api.Token = raw
	w, err := api.Whoami(ctx())
	if err != nil {
		fmt.Printf("server %s: %v\n", api.Base, err)
		return 1
	}
	fmt.Printf("server %s: uid=%d gid=%d name=%s method=%s scopes=%s\n", api.Base, w.UID, w.GID, w.Name, w.Method, strings.Join(w.Scopes, " "))
	return 0
}

package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() {
	register(command{name: "acl", short: "acl set PATH ACL [--user] | get PATH | rm PATH [--user]: directory ACLs (u:UID:rwx,g:GID:rx,z:r, d u !d !u)", run: runACL})
	register(command{name: "whoami", short: "who the server thinks you are, and by which method", run: runWhoami})
}

func runACL(args []string) int {
	fl, u := flags("acl")
	user := fl.Bool("user", false, "the owner's user.acl (evaluated where sys.eval.useracl is set) instead of sys.acl (root)")
	usage := func() int {
		fmt.Fprintln(os.Stderr, "usage: kaon acl set PATH ACL [--user] | get PATH | rm PATH [--user]")
		return 2
	}
	if len(args) < 2 {
		return usage()
	}
	sub := args[0]
	fl.Parse(args[1:])
	a := fl.Args()
	name := nsapi.AttrACL
	if *user {
		name = nsapi.AttrUserACL
	}
	api := newAPI(*u)
	switch {
	case sub == "set" && len(a) == 2:
		if err := api.SetAttr(ctx(), a[0], name, a[1]); err != nil {
			return fail("acl set", err)
		}
	case sub == "rm" && len(a) == 1:
		if err := api.RemoveAttr(ctx(), a[0], name); err != nil {
			return fail("acl rm", err)
		}
	case sub == "get" && len(a) == 1:
		attrs, err := api.Attrs(ctx(), a[0])
		if err != nil {
			return fail("acl get", err)
		}
		for _, kv := range attrs {
			switch kv[0] {
			case nsapi.AttrACL, nsapi.AttrUserACL, nsapi.AttrEvalACL:
				fmt.Printf("%s=%s\n", kv[0], kv[1])
			}
		}
	default:
		return usage()
	}
	return 0
}

func runWhoami(args []string) int {
	fl, u := flags("whoami")
	fl.Parse(args)
	w, err := newAPI(*u).Whoami(ctx())
	if err != nil {
		return fail("whoami", err)
	}
	fmt.Printf("uid=%d gid=%d", w.UID, w.GID)
	if len(w.Groups) > 0 {
		fmt.Printf(" groups=%v", w.Groups)
	}
	fmt.Printf(" name=%s method=%s", w.Name, w.Method)
	if w.Scopes != nil {
		fmt.Printf(" scopes=%s", strings.Join(w.Scopes, ","))
	}
	fmt.Println()
	return 0
}

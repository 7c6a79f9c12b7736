package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() {
	addVerb(newACLCmd)
	addVerb(func() *cobra.Command {
		return withURL(leaf("whoami", "who the server thinks you are, and by which method", func(c *cobra.Command, _ []string) int {
			return runWhoami(urlOf(c))
		}))
	})
}

const aclUsage = "usage: kaon acl set PATH ACL [--user] | get PATH | rm PATH [--user]"

func newACLCmd() *cobra.Command {
	// name is the attribute --user picks.
	name := func(user bool) string {
		if user {
			return nsapi.AttrUserACL
		}
		return nsapi.AttrACL
	}
	const userHelp = "the owner's user.acl (evaluated where sys.eval.useracl is set) instead of sys.acl (root)"
	var setUser, rmUser bool
	set := leaf("set PATH ACL", "set a directory's ACL", func(c *cobra.Command, a []string) int {
		if len(a) != 2 {
			fmt.Fprintln(os.Stderr, aclUsage)
			return 2
		}
		if err := newAPI(urlOf(c)).SetAttr(ctx(), a[0], name(setUser), a[1]); err != nil {
			return fail("acl set", err)
		}
		return 0
	})
	set.Flags().BoolVar(&setUser, "user", false, userHelp)
	rm := leaf("rm PATH", "remove a directory's ACL", func(c *cobra.Command, a []string) int {
		if len(a) != 1 {
			fmt.Fprintln(os.Stderr, aclUsage)
			return 2
		}
		if err := newAPI(urlOf(c)).RemoveAttr(ctx(), a[0], name(rmUser)); err != nil {
			return fail("acl rm", err)
		}
		return 0
	})
	rm.Flags().BoolVar(&rmUser, "user", false, userHelp)
	get := leaf("get PATH", "print a directory's ACLs", func(c *cobra.Command, a []string) int {
		if len(a) != 1 {
			fmt.Fprintln(os.Stderr, aclUsage)
			return 2
		}
		attrs, err := newAPI(urlOf(c)).Attrs(ctx(), a[0])
		if err != nil {
			return fail("acl get", err)
		}
		for _, kv := range attrs {
			switch kv[0] {
			case nsapi.AttrACL, nsapi.AttrUserACL, nsapi.AttrEvalACL:
				fmt.Printf("%s=%s\n", kv[0], kv[1])
			}
		}
		return 0
	})
	return group("acl", "directory ACLs: acl set PATH ACL [--user] | get PATH | rm PATH [--user] (u:UID:rwx,g:GID:rx,z:r, d u !d !u)",
		withURL(set), withURL(get), withURL(rm))
}

func runWhoami(u server) int {
	w, err := newAPI(u).Whoami(ctx())
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
	if w.FQANs != nil {
		fmt.Printf(" fqans=%s", strings.Join(w.FQANs, ","))
	}
	fmt.Println()
	return 0
}

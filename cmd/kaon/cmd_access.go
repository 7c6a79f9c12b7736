package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() {
	addVerb(newAccessCmd)
	addVerb(newWhoCmd)
}

// subjectFlags are the flags naming whom an access rule is about.
type subjectFlags struct{ user, group, host, tokenSubject string }

func (s *subjectFlags) bind(c *cobra.Command) *cobra.Command {
	c.Flags().StringVar(&s.user, "user", "", "a user (uid or local name)")
	c.Flags().StringVar(&s.group, "group", "", "a group (gid or local name): its members")
	c.Flags().StringVar(&s.host, "host", "", "a client host (its IP address as the server sees it)")
	c.Flags().StringVar(&s.tokenSubject, "token-subject", "", "a bearer token's subject")
	return withURL(c)
}

// request is the rule's subject as the API takes it; none says whether
// no subject was named; an error when more than one was.
func (s *subjectFlags) request() (r nsapi.AccessRequest, none bool, err error) {
	n := 0
	for _, x := range []struct{ kind, v string }{{nsapi.SubjectUser, s.user}, {nsapi.SubjectGroup, s.group},
		{nsapi.SubjectHost, s.host}, {nsapi.SubjectTokenSubject, s.tokenSubject}} {
		if x.v != "" {
			r.Kind, r.Value = x.kind, x.v
			n++
		}
	}
	if n > 1 {
		return r, false, fmt.Errorf("name one of --user, --group, --host, --token-subject")
	}
	return r, n == 0, nil
}

const accessUsage = `usage: kaon access ls
       kaon access ban|unban|allow|unallow (--user UID | --group GID | --host IP | --token-subject SUB)
       kaon access stall SECONDS [--user ...]   (0 lifts it; no subject: every client but the admin)
       kaon access redirect root://H:P[,http://H:P] | off [--user ...]
       kaon access set limit RATE (--user UID | --group GID)   (operations per second, 0 lifts it)`

func newAccessCmd() *cobra.Command {
	ls := leaf("ls", "the access rules: bans, allow lists, stalls, redirects, rate limits", func(c *cobra.Command, args []string) int {
		if len(args) != 0 {
			fmt.Fprintln(os.Stderr, accessUsage)
			return 2
		}
		r, err := newAPI(urlOf(c)).AccessRules(ctx())
		if err != nil {
			return fail("access ls", err)
		}
		printAccess(r)
		return 0
	})
	// verb runs one change of the rules: subject required or not, and
	// how many arguments (0 or 1: stall's seconds, redirect's target,
	// limit's rate).
	verb := func(use, short, name string, needSubject bool, nargs int) *cobra.Command {
		var s subjectFlags
		c := leaf(use, short, func(c *cobra.Command, args []string) int {
			r, none, err := s.request()
			if err != nil || len(args) != nargs || (needSubject && none) {
				fmt.Fprintln(os.Stderr, accessUsage)
				return 2
			}
			if nargs == 1 {
				r.Arg = args[0]
				if name == "redirect" && r.Arg == "off" {
					r.Arg = ""
				}
			}
			if err := newAPI(urlOf(c)).SetAccess(ctx(), name, r); err != nil {
				return fail("access "+name, err)
			}
			return 0
		})
		return s.bind(c)
	}
	limit := verb("limit RATE", "cap a user's or a group's operations per second (0 lifts it)", "limit", true, 1)
	return group("access", "access rules: access ls | ban | unban | allow | unallow | stall | redirect | set limit",
		withURL(ls),
		verb("ban", "refuse every request of a user, group, host or token subject", "ban", true, 0),
		verb("unban", "lift a ban", "unban", true, 0),
		verb("allow", "admit only the users (groups, hosts, token subjects) allowed", "allow", true, 0),
		verb("unallow", "take an entry off an allow list", "unallow", true, 0),
		verb("stall SECONDS", "ask clients to come back later (0 lifts it)", "stall", false, 1),
		verb("redirect TARGET", "send clients to another namespace server (off lifts it)", "redirect", false, 1),
		group("set", "access set limit RATE --user U | --group G", limit))
}

func printAccess(r nsapi.AccessRules) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rule\tsubject\tvalue")
	everyone := func(s *nsapi.Subject) string {
		if s == nil {
			return "everyone"
		}
		return s.String()
	}
	for _, b := range r.Bans {
		fmt.Fprintf(tw, "ban\t%s\t\n", b)
	}
	for _, a := range r.Allows {
		fmt.Fprintf(tw, "allow\t%s\t\n", a)
	}
	for _, s := range r.Stalls {
		fmt.Fprintf(tw, "stall\t%s\t%ds\n", everyone(s.Subject), s.Seconds)
	}
	for _, d := range r.Redirects {
		var to []string
		if d.XRootD != "" {
			to = append(to, "root://"+d.XRootD)
		}
		if d.HTTP != "" {
			to = append(to, d.HTTP)
		}
		fmt.Fprintf(tw, "redirect\t%s\t%s\n", everyone(d.Subject), strings.Join(to, ","))
	}
	for _, l := range r.Limits {
		fmt.Fprintf(tw, "limit\t%s\t%s/s\n", l.Subject, strconv.FormatFloat(l.Rate, 'g', -1, 64))
	}
	tw.Flush()
}

func newWhoCmd() *cobra.Command {
	return withURL(leaf("who", "clients served in the last 5 minutes: protocol, method, user, host, requests, idle", func(c *cobra.Command, args []string) int {
		if len(args) != 0 {
			return usageError(c)
		}
		cs, err := newAPI(urlOf(c)).Clients(ctx())
		if err != nil {
			return fail("who", err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "protocol\tmethod\tuser\tuid\thost\trequests\tsince\tidle")
		now := time.Now()
		for _, x := range cs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", x.Protocol, x.Method, x.Name, x.UID, x.Host, x.Requests,
				x.First.Local().Format(time.DateTime), now.Sub(x.Last).Round(time.Second))
		}
		tw.Flush()
		return 0
	}))
}

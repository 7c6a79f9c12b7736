package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

// kaon fusex: the client sessions of the namespace service (EOS's words:
// fusex clients, caps, heartbeats), for the admin.
func init() {
	addVerb(func() *cobra.Command {
		var asJSON bool
		ls := leaf("ls", "sessions: host, user, client version, state (online/volatile/offline), uptime, leases, open files, locks, rates", func(c *cobra.Command, args []string) int {
			if len(args) != 0 {
				return usageError(c)
			}
			l, err := newAPI(urlOf(c)).FusexList(ctx())
			if err != nil {
				return fail("fusex ls", err)
			}
			if asJSON {
				return printJSONValue(l)
			}
			printFusexList(os.Stdout, l, time.Now())
			return 0
		})
		ls.Flags().BoolVar(&asJSON, "json", false, "the list as JSON")
		caps := leaf("caps [SESSION]", "the leases (caps) of a session, or of every session", func(c *cobra.Command, args []string) int {
			if len(args) > 1 {
				return usageError(c)
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			caps, err := newAPI(urlOf(c)).FusexCaps(ctx(), id)
			if err != nil {
				return fail("fusex caps", err)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tINODE\tEXPIRES\tPATH")
			for _, x := range caps {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", x.Session, x.Ino, time.Until(x.Expires).Round(time.Second), x.Path)
			}
			tw.Flush()
			return 0
		})
		evict := leaf("evict SESSION", "end a session: its leases go, its locks are released, its client is told", func(c *cobra.Command, args []string) int {
			if len(args) != 1 {
				return usageError(c)
			}
			d, err := newAPI(urlOf(c)).FusexEvict(ctx(), args[0])
			if err != nil {
				return fail("fusex evict", err)
			}
			fmt.Printf("evicted %s (%d locks released)\n", args[0], d.Locks)
			return 0
		})
		dropcaps := leaf("dropcaps SESSION", "drop every lease of a session (its client drops what it caches)", func(c *cobra.Command, args []string) int {
			if len(args) != 1 {
				return usageError(c)
			}
			d, err := newAPI(urlOf(c)).FusexDropCaps(ctx(), args[0])
			if err != nil {
				return fail("fusex dropcaps", err)
			}
			fmt.Printf("dropped %d leases of %s\n", d.Leases, args[0])
			return 0
		})
		droplocks := leaf("droplocks PATH", "release every lock on a file (waiters are granted in turn)", func(c *cobra.Command, args []string) int {
			if len(args) != 1 {
				return usageError(c)
			}
			d, err := newAPI(urlOf(c)).FusexDropLocks(ctx(), args[0])
			if err != nil {
				return fail("fusex droplocks", err)
			}
			fmt.Printf("released %d locks on %s\n", d.Locks, args[0])
			return 0
		})
		conf := leaf("conf [KEY=VALUE ...]", "session settings: heartbeat=10s lease=300s offline=30s evict=120s grace=30s broadcast.max-audience=256 (none given: show them)", func(c *cobra.Command, args []string) int {
			cfg, err := newAPI(urlOf(c)).FusexConf(ctx(), args...)
			if err != nil {
				return fail("fusex conf", err)
			}
			printSessionConfig(os.Stdout, cfg)
			return 0
		})
		return group("fusex", "client sessions of the namespace (admin): fusex ls | caps [SESSION] | evict SESSION | dropcaps SESSION | droplocks PATH | conf [KEY=VALUE ...]",
			withURL(ls), withURL(caps), withURL(evict), withURL(dropcaps), withURL(droplocks), withURL(conf))
	})
}

func printJSONValue(v any) int {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fail("json", err)
	}
	return 0
}

func printSessionConfig(w io.Writer, c nsapi.SessionConfig) {
	fmt.Fprintf(w, "heartbeat=%s lease=%s offline=%s evict=%s grace=%s broadcast.max-audience=%d\n",
		c.Heartbeat, c.Lease, c.Offline, c.Evict, c.Grace, c.MaxAudience)
}

// printFusexList writes `kaon fusex ls`: the settings, then one line per
// session.
func printFusexList(w io.Writer, l nsapi.FusexList, now time.Time) {
	printSessionConfig(w, l.Config)
	if !l.Grace.IsZero() && l.Grace.After(now) {
		fmt.Fprintf(w, "term %d: locks wait for reclaims for %s more\n", l.Term, l.Grace.Sub(now).Round(time.Second))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tHOST\tUSER\tVERSION\tSTATE\tUPTIME\tHEARTBEAT\tLEASES\tOPEN\tLOCKS\tEVENTS/S\tREQ/S\tDROPPED")
	for _, s := range l.Sessions {
		state := s.State
		if !s.Connected {
			state += " (disconnected)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s ago\t%d\t%d\t%d\t%.2f\t%.2f\t%d\n", s.ID, s.Host, s.User, s.Version, state,
			now.Sub(s.Since).Round(time.Second), now.Sub(s.Heartbeat).Round(time.Second), s.Leases, s.OpenFiles, s.Locks,
			s.EventRate, s.RequestRate, s.Dropped)
	}
	tw.Flush()
}

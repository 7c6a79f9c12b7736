package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() { addVerb(newNodeCmd) }

const nodeUsage = `usage: kaon node ls
       kaon node config NODE key=value   (any key of fs config, set on every filesystem of the node:
                                          configstatus=rw|ro|drain|off, io=..., drain.rate=..., ...)`

func newNodeCmd() *cobra.Command {
	ls := leaf("ls", "storage servers: state, heartbeat age, version, filesystems, I/O rates", func(c *cobra.Command, args []string) int {
		if len(args) != 0 {
			fmt.Fprintln(os.Stderr, nodeUsage)
			return 2
		}
		nodes, err := newAPI(urlOf(c)).Nodes(ctx())
		if err != nil {
			return fail("node ls", err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "node\tstate\theartbeat\tversion\tfs\tbooted\tread/s\twrite/s\tops/s\thttp\txrootd")
		now := time.Now()
		for _, n := range nodes {
			age := "-"
			if !n.LastBeat.IsZero() {
				age = now.Sub(n.LastBeat).Round(100*time.Millisecond).String() + " ago"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%.1f\t%s\t%s\n", n.Name, n.State, age, orDash(n.Release), n.Filesystems, n.Booted,
				human(uint64(n.ReadRate)), human(uint64(n.WriteRate)), n.OpRate, orDash(n.HTTP), orDash(n.XRootD))
		}
		tw.Flush()
		return 0
	})
	config := leaf("config NODE key=value", "set a key of fs config on every filesystem of a storage server", func(c *cobra.Command, args []string) int {
		if len(args) != 2 {
			fmt.Fprintln(os.Stderr, nodeUsage)
			return 2
		}
		k, v, ok := strings.Cut(args[1], "=")
		if !ok {
			return fail("node config", fmt.Errorf("want key=value, got %q", args[1]))
		}
		if err := newAPI(urlOf(c)).ConfigNode(ctx(), args[0], k, v); err != nil {
			return fail("node config", err)
		}
		return 0
	})
	return group("node", "storage servers: node ls | node config NODE key=value", withURL(ls), withURL(config))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// sortedKeys are m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func init() { addVerb(newDebugCmd) }

func newDebugCmd() *cobra.Command {
	var role string
	c := leaf("debug LEVEL [--role mgm|fst]", "set the log level (debug, info, warn, error) of the namespace server, the storage servers, or both, at runtime",
		func(c *cobra.Command, args []string) int {
			if len(args) != 1 {
				return usageError(c)
			}
			l, err := newAPI(urlOf(c)).Debug(ctx(), args[0], role)
			if err != nil {
				return fail("debug", err)
			}
			fmt.Printf("log level: namespace server %s, storage servers %s\n", l.MGM, orDash(l.FST))
			return 0
		})
	c.Flags().StringVar(&role, "role", "", "mgm (the namespace server) or fst (every storage server, at its next heartbeat); default: both")
	return withURL(c)
}

func init() { addVerb(newIOCmd) }

func newIOCmd() *cobra.Command {
	var r nsapi.IOStatRequest
	stat := leaf("stat [--user U] [--app A]", "bytes and files read and written by user, group and application over the last 1 min, 5 min and 1 h",
		func(c *cobra.Command, args []string) int {
			if len(args) != 0 {
				return usageError(c)
			}
			rows, err := newAPI(urlOf(c)).IOStat(ctx(), r)
			if err != nil {
				return fail("io stat", err)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "uid\tgid\tapp\twindow\tread\twritten\tfiles read\tfiles written\tread/s\twrite/s")
			for _, x := range rows {
				for _, w := range x.Windows {
					secs := float64(max(w.Seconds, 1))
					fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", x.UID, x.GID, x.App, time.Duration(w.Seconds)*time.Second,
						human(uint64(w.ReadBytes)), human(uint64(w.WriteBytes)), w.Reads, w.Writes,
						human(uint64(float64(w.ReadBytes)/secs)), human(uint64(float64(w.WriteBytes)/secs)))
				}
			}
			tw.Flush()
			return 0
		})
	stat.Flags().StringVar(&r.User, "user", "", "one user (uid or local name)")
	stat.Flags().StringVar(&r.App, "app", "", "one application (eos.app, or the client: curl, xrootd, ...)")
	return group("io", "I/O accounting: io stat [--user U] [--app A]", withURL(stat))
}

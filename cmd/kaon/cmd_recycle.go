package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func init() {
	addVerb(newRecycleCmd)
}

// parseAge reads a duration that may also be given in days ("7d").
func parseAge(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(d, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("bad age %q", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	return time.ParseDuration(s)
}

const recycleUsage = "usage: kaon recycle ls | restore KEY [--force-rename] | purge [KEY] [--older-than 7d]"

func newRecycleCmd() *cobra.Command {
	usage := func() int {
		fmt.Fprintln(os.Stderr, recycleUsage)
		return 2
	}
	ls := leaf("ls", "the recycle bin's entries: key, when deleted, by whom, size, path", func(c *cobra.Command, args []string) int {
		if len(args) != 0 {
			return usage()
		}
		es, err := newAPI(urlOf(c)).RecycleList(ctx())
		if err != nil {
			return fail("recycle ls", err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "key\tdeleted\tuid\ttype\tsize\tfiles\tpath")
		for _, e := range es {
			kind := "file"
			if e.Dir {
				kind = "tree"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\n", e.Key, e.Time.Format(time.RFC3339), e.UID, kind, human(uint64(e.Size)), e.Files, e.Path)
		}
		tw.Flush()
		return 0
	})
	var force bool
	restore := leaf("restore KEY [--force-rename]", "put an entry back where it was", func(c *cobra.Command, args []string) int {
		if len(args) != 1 {
			return usage()
		}
		p, err := newAPI(urlOf(c)).RecycleRestore(ctx(), args[0], force)
		if err != nil {
			return fail("recycle restore", err)
		}
		fmt.Println("restored", p)
		return 0
	})
	restore.Flags().BoolVar(&force, "force-rename", false, "put it beside an entry that exists now (NAME.restored-KEY)")
	var older string
	purge := leaf("purge [KEY] [--older-than 7d]", "delete entries for good: one, or all (older than a given age)", func(c *cobra.Command, args []string) int {
		if len(args) > 1 {
			return usage()
		}
		var age time.Duration
		if older != "" {
			var err error
			if age, err = parseAge(older); err != nil {
				return fail("recycle purge", err)
			}
		}
		key := ""
		if len(args) == 1 {
			key = args[0]
		}
		n, err := newAPI(urlOf(c)).RecyclePurge(ctx(), key, age)
		if err != nil {
			return fail("recycle purge", err)
		}
		fmt.Printf("purged %d\n", n)
		return 0
	})
	purge.Flags().StringVar(&older, "older-than", "", "only entries deleted longer ago (e.g. 7d, 12h)")
	return group("recycle", "the recycle bin: recycle ls | restore KEY [--force-rename] | purge [KEY] [--older-than 7d]",
		withURL(ls), withURL(restore), withURL(purge))
}

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

func init() {
	register(command{name: "recycle", short: "recycle ls | restore KEY [--force-rename] | purge [KEY] [--older-than 7d]", run: runRecycle})
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

func runRecycle(args []string) int {
	fl, u := flags("recycle")
	force := fl.Bool("force-rename", false, "restore: put it beside an entry that exists now (NAME.restored-KEY)")
	older := fl.String("older-than", "", "purge: only entries deleted longer ago (e.g. 7d, 12h)")
	usage := func() int {
		fmt.Fprintln(os.Stderr, "usage: kaon recycle ls | restore KEY [--force-rename] | purge [KEY] [--older-than 7d]")
		return 2
	}
	if len(args) == 0 {
		return usage()
	}
	sub := args[0]
	fl.Parse(args[1:])
	api := newAPI(*u)
	switch {
	case sub == "ls" && fl.NArg() == 0:
		es, err := api.RecycleList(ctx())
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
	case sub == "restore" && fl.NArg() == 1:
		p, err := api.RecycleRestore(ctx(), fl.Arg(0), *force)
		if err != nil {
			return fail("recycle restore", err)
		}
		fmt.Println("restored", p)
	case sub == "purge" && fl.NArg() <= 1:
		var age time.Duration
		if *older != "" {
			var err error
			if age, err = parseAge(*older); err != nil {
				return fail("recycle purge", err)
			}
		}
		n, err := api.RecyclePurge(ctx(), fl.Arg(0), age)
		if err != nil {
			return fail("recycle purge", err)
		}
		fmt.Printf("purged %d\n", n)
	default:
		return usage()
	}
	return 0
}

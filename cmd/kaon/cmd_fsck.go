package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() {
	addVerb(newFsckCmd)
}

const fsckUsage = `usage: kaon fsck stat
       kaon fsck report [--class C] [--fs ID] [--json]
       kaon fsck run [--fs ID] [--scrub] [--wait [--timeout D]]
       kaon fsck repair --class C|all [--fs ID]`

func newFsckCmd() *cobra.Command {
	// sub is a subverb taking no arguments.
	sub := func(use, short string, run func(api *client.Client) int) *cobra.Command {
		return withURL(leaf(use, short, func(c *cobra.Command, args []string) int {
			if len(args) != 0 {
				fmt.Fprintln(os.Stderr, fsckUsage)
				return 2
			}
			return run(newAPI(urlOf(c)))
		}))
	}
	fsFlag := func(c *cobra.Command, fsid *uint) {
		c.Flags().UintVar(fsid, "fs", 0, "only this filesystem")
	}
	stat := sub("stat", "findings per error class, scans per filesystem, the namespace pass", func(api *client.Client) int {
		st, err := api.FsckStat(ctx())
		if err != nil {
			return fail("fsck stat", err)
		}
		printFsckStat(st)
		return 0
	})
	var rClass string
	var rFs uint
	var asJSON bool
	report := sub("report", "one line per finding: class, fid, fs, stripe, path, physical file, what is wrong", func(api *client.Client) int {
		fs, err := api.FsckReport(ctx(), rClass, uint32(rFs))
		if err != nil {
			return fail("fsck report", err)
		}
		enc := json.NewEncoder(os.Stdout)
		for _, f := range fs {
			if asJSON {
				enc.Encode(f)
				continue
			}
			fmt.Println(findingLine(f))
		}
		return 0
	})
	report.Flags().StringVar(&rClass, "class", "", "only this error class")
	fsFlag(report, &rFs)
	report.Flags().BoolVar(&asJSON, "json", false, "JSON lines instead of text")
	var runFs uint
	var scrub, wait bool
	var timeout time.Duration
	run := sub("run", "scan now (and the namespace pass after the scans)", func(api *client.Client) int {
		before, err := api.FsckStat(ctx())
		if err != nil {
			return fail("fsck run", err)
		}
		if err := api.FsckRun(ctx(), uint32(runFs), scrub); err != nil {
			return fail("fsck run", err)
		}
		if wait {
			if err := api.FsckWait(ctx(), before, uint32(runFs), timeout); err != nil {
				return fail("fsck run", err)
			}
		}
		return 0
	})
	fsFlag(run, &runFs)
	run.Flags().BoolVar(&scrub, "scrub", false, "re-read the data (checksums, erasure-coded frames) too")
	run.Flags().BoolVar(&wait, "wait", false, "wait until the scans and the namespace pass after them are done")
	run.Flags().DurationVar(&timeout, "timeout", time.Hour, "with --wait: give up after this long")
	var fClass string
	var fFs uint
	repair := sub("repair", "repair the findings of a class (all: every class): rebuild, re-replicate, drop orphans", func(api *client.Client) int {
		if fClass == "" {
			fmt.Fprintln(os.Stderr, "kaon fsck repair: --class is required (a class of fsck stat, or all)")
			return 2
		}
		rs, err := api.FsckRepair(ctx(), fClass, uint32(fFs))
		if err != nil {
			return fail("fsck repair", err)
		}
		failed := 0
		for _, r := range rs {
			line := r.Result + " " + findingLine(r.FsckFinding)
			if r.Why != "" {
				line += " => " + r.Why
			}
			fmt.Println(line)
			if r.Result == "failed" {
				failed++
			}
		}
		if failed > 0 {
			return fail("fsck repair", fmt.Errorf("%d of %d repairs failed", failed, len(rs)))
		}
		return 0
	})
	repair.Flags().StringVar(&fClass, "class", "", "the error class (all for every class)")
	fsFlag(repair, &fFs)
	g := group("fsck", "consistency of stripes and namespace: fsck stat | report [--class C] | run [--fs ID] | repair --class C", stat, report, run, repair)
	g.Long = fsckUsage
	return g
}

// findingLine is one finding as `fsck report` prints it: class, ids, the
// path and the physical file, then what is wrong.
func findingLine(f nsapi.FsckFinding) string {
	stripe, fs := "-", "-"
	if f.Stripe >= 0 {
		stripe = strconv.Itoa(f.Stripe)
	}
	if f.FsID != 0 {
		fs = strconv.FormatUint(uint64(f.FsID), 10)
	}
	return fmt.Sprintf("%s fid=%08x fsid=%s stripe=%s path=%s phys=%s: %s", f.Class, f.Fid, fs, stripe, f.Path, dash(f.Phys), f.Detail)
}

func printFsckStat(st nsapi.FsckStatus) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "class\tcount\tmeaning")
	for _, c := range st.Classes {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", c.Name, c.Count, c.Description)
	}
	tw.Flush()
	fmt.Println()
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fsid\tnode\tpath\tstate\tlast scan\tstripes\tlast scrub\tsettings")
	for _, f := range st.Filesystems {
		state := "idle"
		switch {
		case f.Scanning && f.Scrubbing:
			state = fmt.Sprintf("scrubbing %d/%d", f.Seen, f.Total)
		case f.Scanning:
			state = fmt.Sprintf("scanning %d/%d", f.Seen, f.Total)
		case f.Requested:
			state = "requested"
		}
		if f.LastError != "" {
			state += " (last failed: " + f.LastError + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", f.FsID, f.Node, f.Path, state, scanTime(f.LastStart, f.LastEnd),
			f.LastSeen, stamp(f.LastScrub), f.Settings)
	}
	tw.Flush()
	p := st.Pass
	state := ""
	if p.Running {
		state = " (running)"
	}
	fmt.Printf("\nnamespace pass: %s, %d files%s", scanTime(p.LastStart, p.LastEnd), p.Files, state)
	if p.LastError != "" {
		fmt.Printf(", failed: %s", p.LastError)
	}
	fmt.Printf("\norphans are dropped by repair once found %s ago; %d stripes compared since start\n", st.OrphanGrace, st.Checked)
	if r := st.Risk; r != nil {
		printRisk(*r)
	}
}

// printRisk prints the files at risk and the rebuilds.
func printRisk(r nsapi.Rebuilds) {
	when := "never counted"
	if !r.Surveyed.IsZero() {
		when = "counted " + stamp(r.Surveyed)
		if d := r.Took.Duration(); d > 0 {
			when += fmt.Sprintf(" in %v", d.Round(time.Millisecond))
		}
	}
	fmt.Printf("\nfiles at risk (%s; unreadable filesystems: %s):\n", when, idList(r.Unavailable))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "class\tfiles\tbytes\tmeaning")
	for _, c := range []struct {
		name string
		n    nsapi.Count
		what string
	}{
		{"unreadable", r.Unreadable, "fewer readable stripes than the layout needs: readable again only if a filesystem comes back"},
		{"one-failure-from-loss", r.Critical, "exactly as many readable stripes as the layout needs"},
		{"degraded", r.Degraded, "some stripes unreadable, more left than needed"},
		{"rebuilding", r.Rebuilding, "a stripe is being rebuilt now (counted above too)"},
	} {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", c.name, c.n.Files, bytesCol(c.n.Bytes), c.what)
	}
	tw.Flush()
	fmt.Printf("rebuilt since start: %d stripes, %s; remaining: %d stripes, %s; rate %s; eta %s\n",
		r.Rebuilt.Files, bytesCol(r.Rebuilt.Bytes), r.Remaining.Files, bytesCol(r.Remaining.Bytes), rateCol(r.Rate), etaCol(r.ETA))
}

// idList prints filesystem ids ("none" for none).
func idList(ids []uint32) string {
	if len(ids) == 0 {
		return "none"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(uint64(id), 10)
	}
	return strings.Join(s, ",")
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Local().Format("2006-01-02T15:04:05")
}

func scanTime(start, end time.Time) string {
	if start.IsZero() {
		return "never"
	}
	if end.Before(start) {
		return stamp(start) + " (running)"
	}
	return fmt.Sprintf("%s took %v", stamp(start), end.Sub(start).Round(time.Millisecond))
}

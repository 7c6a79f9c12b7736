package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Data movement commands: drain progress in fs ls and fs status, groups
// and their balancer, file conversion.

func init() {
	addVerb(newGroupCmd)
}

// bytesCol prints a byte count without spaces (fs ls columns are split
// on blanks by scripts).
func bytesCol(b int64) string { return strings.ReplaceAll(human(uint64(max(b, 0))), " ", "") }

func rateCol(r float64) string {
	if r <= 0 {
		return "-"
	}
	return bytesCol(int64(r)) + "/s"
}

func etaCol(sec float64) string {
	if sec <= 0 {
		return "-"
	}
	return (time.Duration(sec) * time.Second).Round(time.Second).String()
}

// drainColumns are fs ls's drain, left, rate, eta and failed columns.
func drainColumns(f nsapi.Filesystem) string {
	if f.Drain == "" {
		return "-\t-\t-\t-\t-"
	}
	left := fmt.Sprintf("%d/%s", f.DrainFilesLeft, bytesCol(f.DrainBytesLeft))
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%d", f.Drain, left, rateCol(f.DrainRate), etaCol(f.DrainETA), f.DrainFailures)
}

func printFsStatus(st nsapi.FsStatus) {
	f := st.Filesystem
	fmt.Printf("id:            %d\nnode:          %s\npath:          %s\ngroup:         %s\nlocation:      %s\nboot:          %s\nconfigstatus:  %s\nused:          %s of %s, %d stripes\nhealth:        %s\n",
		f.ID, f.Node, f.Path, f.Group, dash(f.Location), f.BootStatus, f.ConfigStatus, human(f.Used), human(f.Capacity), f.Files, f.Health)
	if !f.DownSince.IsZero() {
		fmt.Printf("unreadable:    since %s (%s): %s\n", f.DownSince.Format(time.RFC3339), time.Since(f.DownSince).Round(time.Second), f.DownWhy)
	}
	kind, moved := "drain", "moved"
	if st.Kind == "rebuild" {
		kind, moved = "rebuild", "rebuilt"
	}
	if f.Drain == "" {
		fmt.Println("drain:         -")
		return
	}
	fmt.Printf("%-14s %s (%s)\n", kind+":", f.Drain, st.DrainPhase)
	if st.Kind == "rebuild" {
		fmt.Printf("lost:          %s: %s\n", st.LostAt.Format(time.RFC3339), st.LostWhy)
	}
	if !st.DrainStarted.IsZero() {
		fmt.Printf("started:       %s\n", st.DrainStarted.Format(time.RFC3339))
	}
	limit := "none"
	switch {
	case f.DrainRateLimit > 0:
		limit = rateCol(float64(f.DrainRateLimit))
	case f.DrainRateLimit == 0 && st.Kind == "rebuild":
		limit = "gives way to client streams"
	}
	fmt.Printf("left:          %d stripes, %s\n%-14s %d stripes, %s\nrate:          %s (limit %s, %d in parallel, %d in flight)\neta:           %s\nfailures:      %d now (%d attempts failed)\n",
		f.DrainFilesLeft, bytesCol(f.DrainBytesLeft), moved+":", st.FilesMoved, bytesCol(st.BytesMoved), rateCol(f.DrainRate), limit,
		f.DrainParallel, st.InFlight, etaCol(f.DrainETA), len(st.Failures), st.Failed)
	if r := st.Risk; r != nil {
		fmt.Printf("at risk:       %s one failure from loss, %s degraded, %s unreadable\n", countCol(r.Critical), countCol(r.Degraded), countCol(r.Unreadable))
		if !st.SafeAt.IsZero() {
			fmt.Printf("safe:          since %s: none of its files is one failure from loss any more\n", st.SafeAt.Format(time.RFC3339))
		}
	}
	printFailures(st.Failures)
}

// countCol prints files and their bytes ("3 files (1.2GiB)").
func countCol(c nsapi.Count) string {
	return fmt.Sprintf("%d files (%s)", c.Files, bytesCol(c.Bytes))
}

func printFailures(fs []nsapi.MoveFailure) {
	for _, m := range fs {
		what := m.Path
		if m.Stripe >= 0 {
			what = fmt.Sprintf("%s stripe %d", m.Path, m.Stripe)
		}
		fmt.Printf("  %s  %s: %s\n", m.Time.Format(time.TimeOnly), what, m.Reason)
	}
}

func newConvertCmd() *cobra.Command {
	var space, lay string
	var status bool
	c := leaf("convert PATH [--space S] [--layout L] | convert --status", "rewrite a file into another space and/or layout; --status: the directory policies' progress", func(c *cobra.Command, args []string) int {
		api := newAPI(urlOf(c))
		if status {
			st, err := api.ConvertStatus(ctx())
			if err != nil {
				return fail("file convert", err)
			}
			last := "never"
			if !st.LastSweep.IsZero() {
				last = st.LastSweep.Format(time.RFC3339)
			}
			fmt.Printf("last sweep:  %s\npending:     %d files\nconverted:   %d files\nfailures:    %d now (%d attempts failed)\n", last, st.Pending, st.Converted, len(st.Failures), st.Failed)
			printFailures(st.Failures)
			return 0
		}
		if len(args) != 1 || (space == "" && lay == "") {
			fmt.Fprintln(os.Stderr, "usage: kaon file convert PATH [--space S] [--layout L] (at least one) | kaon file convert --status")
			return 2
		}
		e, err := api.ConvertFile(ctx(), args[0], space, lay)
		if err != nil {
			return fail("file convert", err)
		}
		fmt.Printf("%s: fid %d, layout %s, stripes on fs %v\n", e.Path, e.ID, e.Layout, e.Locations)
		return 0
	})
	c.Flags().StringVar(&space, "space", "", "space to move the file to (default: where it is)")
	c.Flags().StringVar(&lay, "layout", "", "layout to convert the file to: plain, replica:N, ec:K+M[:unit] (default: its own)")
	c.Flags().BoolVar(&status, "status", false, "show the progress of the directory conversion policies (sys.convert.space, sys.convert.layout)")
	return c
}

const groupUsage = `usage: kaon group ls
       kaon group set G key=value...   (balancer=on|off, threshold=N percentage points of fill,
                                        balancer.rate=SIZE per second (0 = no cap), balancer.parallel=N)`

func newGroupCmd() *cobra.Command {
	ls := leaf("ls", "scheduling groups: fill spread, balancer state and progress", func(c *cobra.Command, args []string) int {
		if len(args) != 0 {
			fmt.Fprintln(os.Stderr, groupUsage)
			return 2
		}
		gs, err := newAPI(urlOf(c)).Groups(ctx())
		if err != nil {
			return fail("group ls", err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "group\tfs\tbackends\tmin-fill\tmax-fill\tspread\tbalancer\tthreshold\tmoved\trate\tin-flight\tstate")
		for _, g := range gs {
			bal, moved, state := "off", "-", "-"
			if g.Balancer {
				bal = "on"
				moved = fmt.Sprintf("%d/%s", g.Moved, bytesCol(g.Bytes))
				state = g.Phase
				if len(g.Failures) > 0 {
					state += fmt.Sprintf(" (%d failing: %s)", len(g.Failures), g.Failures[0].Reason)
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f%%\t%.1f%%\t%.1f\t%s\t%.1f\t%s\t%s\t%d\t%s\n", g.Name, g.Filesystems, g.Usable,
				g.MinFill, g.MaxFill, g.MaxFill-g.MinFill, bal, g.Threshold, moved, rateCol(g.Rate), g.InFlight, state)
		}
		tw.Flush()
		return 0
	})
	set := leaf("set G key=value...", "set a group's balancer: balancer=on|off, threshold=N, balancer.rate=SIZE, balancer.parallel=N", func(c *cobra.Command, args []string) int {
		if len(args) < 2 {
			fmt.Fprintln(os.Stderr, groupUsage)
			return 2
		}
		api := newAPI(urlOf(c))
		for _, kv := range args[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fail("group set", fmt.Errorf("want key=value, got %q", kv))
			}
			if err := api.SetGroup(ctx(), args[0], k, v); err != nil {
				return fail("group set", err)
			}
		}
		return 0
	})
	set.Long = groupUsage
	return group("group", "scheduling groups and their balancer: group ls | group set G key=value...", withURL(ls), withURL(set))
}

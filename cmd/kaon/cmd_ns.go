package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() {
	addVerb(func() *cobra.Command {
		status := leaf("status", "the namespace's store and its members, the active server since when, standbys' lag", func(c *cobra.Command, _ []string) int {
			st, err := newAPI(urlOf(c)).NSStatus(ctx())
			if err != nil {
				return fail("ns status", err)
			}
			printNSStatus(os.Stdout, st, time.Now())
			return 0
		})
		stepDown := leaf("step-down", "the active namespace server hands its role over to a standby", func(c *cobra.Command, _ []string) int {
			return runStepDown(newAPI(urlOf(c)))
		})
		stat := leaf("stat", "the namespace's files, directories, pending uploads, requests per second, engine size", func(c *cobra.Command, args []string) int {
			if len(args) != 0 {
				return usageError(c)
			}
			st, err := newAPI(urlOf(c)).NSStat(ctx())
			if err != nil {
				return fail("ns stat", err)
			}
			printNSStat(os.Stdout, st)
			return 0
		})
		var dumpPath string
		dump := leaf("dump", "every file below --path, one path per line, streamed (Rucio's consistency checks; the admin only)", func(c *cobra.Command, _ []string) int {
			out := bufio.NewWriterSize(os.Stdout, 64<<10)
			err := newAPI(urlOf(c)).Dump(ctx(), dumpPath, out)
			if ferr := out.Flush(); err == nil && ferr != nil {
				err = ferr
			}
			if err != nil {
				return fail("ns dump", err)
			}
			return 0
		})
		dump.Flags().StringVar(&dumpPath, "path", "/", "the directory to dump")
		return group("ns", "the namespace's store, its servers (active, standbys), handing over, figures, its file list: ns status | ns step-down | ns stat | ns dump --path P [--url URL]",
			withURL(status), withURL(stepDown), withURL(stat), withURL(dump))
	})
}

func printNSStat(w io.Writer, st nsapi.NSStat) {
	fmt.Fprintf(w, "files:            %d\n", st.Files)
	fmt.Fprintf(w, "directories:      %d\n", st.Directories)
	fmt.Fprintf(w, "bytes:            %d (%s)\n", st.Bytes, human(uint64(max(st.Bytes, 0))))
	fmt.Fprintf(w, "pending uploads:  %d\n", st.PendingUploads)
	if st.EngineBytes > 0 {
		fmt.Fprintf(w, "engine size:      %s\n", human(uint64(st.EngineBytes)))
	} else {
		fmt.Fprintln(w, "engine size:      - (kaon ns status: the store's members)")
	}
	for _, proto := range sortedKeys(st.Rates) {
		fmt.Fprintf(w, "requests %-8s %.2f/s over the last minute, %d since start\n", proto+":", st.Rates[proto], st.Requests[proto])
	}
}

func runStepDown(api *client.Client) int {
	before, _ := api.NSStatus(ctx()) // who steps down (none known: any active server is the successor)
	if err := api.StepDown(ctx()); err != nil {
		return fail("ns step-down", err)
	}
	next, err := successor(api, before.Active, stepDownWait)
	switch {
	case err != nil:
		return fail("ns step-down", err)
	case next == "":
		fmt.Printf("stepped down; no active server yet after %v (an election is under way, or the store has no quorum): see kaon ns status\n", stepDownWait)
	case next == before.Active:
		fmt.Printf("stepped down; no standby took over within %v, and %s is active again\n", stepDownWait, next)
	default:
		fmt.Printf("stepped down; active now: %s\n", next)
	}
	return 0
}

// stepDownWait bounds how long `ns step-down` waits for the successor: a
// standby takes over within moments of a clean step-down.
const stepDownWait = 15 * time.Second

// successor waits until the instance names an active server other than
// old, and returns it; after wait, the one it names then ("" for none).
func successor(api *client.Client, old string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		st, err := api.NSStatus(ctx())
		if err == nil && st.Active != "" && st.Active != old {
			return st.Active, nil
		}
		if time.Now().After(deadline) {
			return st.Active, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none (an election is under way, or the store has no quorum)"
	}
	return s
}

// printNSStatus writes `kaon ns status`: the active server first (one
// line: "active URL"), then the engine and its members, then every server
// with its role and how far its replica lags.
func printNSStatus(w io.Writer, st nsapi.NSStatus, now time.Time) {
	fmt.Fprintf(w, "active    %s\n", orNone(st.Active))
	eng := st.Engine.Name
	if st.Engine.Revision > 0 {
		eng += fmt.Sprintf(", last committed revision %d", st.Engine.Revision)
	}
	fmt.Fprintf(w, "engine    %s\n", eng)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, m := range st.Engine.Members {
		state := "healthy"
		if !m.Healthy {
			state = "unhealthy: " + m.Error
		}
		if m.Leader {
			state += ", leader"
		}
		size := ""
		if m.DBSize > 0 {
			size = fmt.Sprintf("db %s (in use %s)", human(uint64(m.DBSize)), human(uint64(m.DBInUse)))
		}
		fmt.Fprintf(tw, "member\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.Endpoint, state, m.Version, size)
	}
	tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range st.Servers {
		line := fmt.Sprintf("server\t%s\t%s", s.HTTP, s.Role)
		if !s.Since.IsZero() { // an embedded engine's only server has no term
			line += fmt.Sprintf("\tsince %s (%s)", s.Since.Format(time.RFC3339), now.Sub(s.Since).Round(time.Second))
		}
		switch {
		case s.Role == "active" && s.Committed > 0:
			line += fmt.Sprintf("\tcommitted %d", s.Committed)
		case st.Engine.Revision > 0:
			lag := int64(st.Engine.Revision) - int64(s.Applied)
			line += fmt.Sprintf("\tapplied %d (lag %d)", s.Applied, max(lag, 0))
		default:
			line += fmt.Sprintf("\tapplied %d", s.Applied)
		}
		if !s.Updated.IsZero() {
			line += fmt.Sprintf("\treported %s ago", now.Sub(s.Updated).Round(100*time.Millisecond))
		}
		if s.Error != "" {
			line += "\t" + s.Error
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if st.Error != "" {
		fmt.Fprintf(w, "note      %s\n", st.Error)
	}
}

package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/checksum"
)

// `kaon file versions PATH` and `kaon file restore-version PATH VERSION`:
// the contents sys.versioning keeps of a file (namespace/versions.go).

const versionsUsage = "file versions PATH | file restore-version PATH VERSION"

func newVersionsCmd() *cobra.Command {
	return leaf("versions PATH", "the kept versions of a file: id, size, mtime, checksums", func(c *cobra.Command, args []string) int {
		if len(args) != 1 {
			fmt.Fprintln(os.Stderr, "usage: kaon "+versionsUsage)
			return 2
		}
		vs, err := newAPI(urlOf(c)).Versions(ctx(), args[0])
		if err != nil {
			return fail("file versions", err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "version\tsize\tmtime\tchecksums")
		for _, v := range vs {
			var sums []string
			for _, t := range checksum.SortedTypes(v.Checksums) {
				sums = append(sums, t+":"+v.Checksums[t])
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", v.ID, v.Size, v.MTime.UTC().Format(time.RFC3339), dash(strings.Join(sums, ",")))
		}
		tw.Flush()
		return 0
	})
}

func newRestoreVersionCmd() *cobra.Command {
	return leaf("restore-version PATH VERSION", "make a kept version the file's content (the content it replaces becomes a version)", func(c *cobra.Command, args []string) int {
		if len(args) != 2 {
			fmt.Fprintln(os.Stderr, "usage: kaon "+versionsUsage)
			return 2
		}
		e, err := newAPI(urlOf(c)).RestoreVersion(ctx(), args[0], args[1])
		if err != nil {
			return fail("file restore-version", err)
		}
		fmt.Printf("restored %s: version %s (%d bytes) is its content; the content it replaced is a version\n", e.Path, args[1], e.Size)
		return 0
	})
}

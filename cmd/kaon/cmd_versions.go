package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kaon-storage/kaon/internal/checksum"
)

// `kaon file versions PATH` and `kaon file restore-version PATH VERSION`:
// the contents sys.versioning keeps of a file (namespace/versions.go).

const versionsUsage = "file versions PATH | file restore-version PATH VERSION"

// runFileVersions runs the version subcommands of `kaon file`.
func runFileVersions(fl *flag.FlagSet, u *string, sub string, args []string) int {
	fl.Parse(args)
	api := newAPI(*u)
	switch {
	case sub == "versions" && fl.NArg() == 1:
		vs, err := api.Versions(ctx(), fl.Arg(0))
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
	case sub == "restore-version" && fl.NArg() == 2:
		e, err := api.RestoreVersion(ctx(), fl.Arg(0), fl.Arg(1))
		if err != nil {
			return fail("file restore-version", err)
		}
		fmt.Printf("restored %s: version %s (%d bytes) is its content; the content it replaced is a version\n", e.Path, fl.Arg(1), e.Size)
	default:
		fmt.Fprintln(os.Stderr, "usage: kaon "+versionsUsage)
		return 2
	}
	return 0
}

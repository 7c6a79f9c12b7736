package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() {
	addVerb(newQuotaCmd)
}

// parseAmount reads 10G-style numbers: powers of 1024 for bytes, of 1000
// for counts.
func parseAmount(s string, base int64) (int64, error) {
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	for i, suf := range "KMGTP" {
		if strings.HasSuffix(strings.ToUpper(s), string(suf)) {
			s = s[:len(s)-1]
			for j := 0; j <= i; j++ {
				mult *= base
			}
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad amount %q", s)
	}
	return n * mult, nil
}

const quotaUsage = "usage: kaon quota set --path P (-u UID | -g GID | -p) [--bytes N] [--files N] | ls [--path P] | rm --path P (-u UID | -g GID | -p)"

// quotaWho is whose limit: -u UID, -g GID or -p.
type quotaWho struct {
	uid, gid int64
	project  bool
}

func (w *quotaWho) bind(c *cobra.Command) {
	c.Flags().Int64VarP(&w.uid, "u", "u", -1, "a user's limit")
	c.Flags().Int64VarP(&w.gid, "g", "g", -1, "a group's limit")
	c.Flags().BoolVarP(&w.project, "p", "p", false, "the project limit (everybody together)")
}

// kind is the quota kind and id w names; false unless exactly one is given.
func (w quotaWho) kind() (string, uint32, bool) {
	switch {
	case w.uid >= 0 && w.gid < 0 && !w.project:
		return "user", uint32(w.uid), true
	case w.gid >= 0 && w.uid < 0 && !w.project:
		return "group", uint32(w.gid), true
	case w.project && w.uid < 0 && w.gid < 0:
		return "project", 0, true
	}
	return "", 0, false
}

func newQuotaCmd() *cobra.Command {
	usage := func() int {
		fmt.Fprintln(os.Stderr, quotaUsage)
		return 2
	}
	const pathHelp = "quota node (a directory)"
	var setPath, bytes, files string
	var setWho quotaWho
	set := leaf("set --path P (-u UID | -g GID | -p) [--bytes N] [--files N]", "set a user's, a group's or the project limit of a quota node", func(c *cobra.Command, _ []string) int {
		kind, id, ok := setWho.kind()
		if !ok || setPath == "" {
			return usage()
		}
		b, err1 := parseAmount(bytes, 1024)
		f, err2 := parseAmount(files, 1000)
		if err1 != nil || err2 != nil {
			return fail("quota set", fmt.Errorf("%v %v", err1, err2))
		}
		if err := newAPI(urlOf(c)).SetQuota(ctx(), setPath, nsapi.QuotaKey{Kind: nsapi.QuotaKind(kind), ID: id}, nsapi.Amount{Bytes: b, Files: f}); err != nil {
			return fail("quota set", err)
		}
		return 0
	})
	set.Flags().StringVar(&setPath, "path", "", pathHelp)
	setWho.bind(set)
	set.Flags().StringVar(&bytes, "bytes", "", "byte limit (K, M, G, T suffixes: powers of 1024)")
	set.Flags().StringVar(&files, "files", "", "file count limit (K, M suffixes: powers of 1000)")
	var rmPath string
	var rmWho quotaWho
	rm := leaf("rm --path P (-u UID | -g GID | -p)", "remove a limit", func(c *cobra.Command, _ []string) int {
		kind, id, ok := rmWho.kind()
		if !ok || rmPath == "" {
			return usage()
		}
		if err := newAPI(urlOf(c)).RemoveQuota(ctx(), rmPath, nsapi.QuotaKey{Kind: nsapi.QuotaKind(kind), ID: id}); err != nil {
			return fail("quota rm", err)
		}
		return 0
	})
	rm.Flags().StringVar(&rmPath, "path", "", pathHelp)
	rmWho.bind(rm)
	var lsPath string
	ls := leaf("ls [--path P]", "quota nodes at or below P (default /): use, limits, bytes booked by uploads in flight", func(c *cobra.Command, _ []string) int {
		p := lsPath
		if p == "" {
			p = "/"
		}
		qs, err := newAPI(urlOf(c)).Quotas(ctx(), p)
		if err != nil {
			return fail("quota ls", err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "path\tkind\tid\tused bytes\tlimit bytes\tused files\tlimit files\tbooked bytes")
		limit := func(n int64, f func(uint64) string) string {
			if n == 0 {
				return "-"
			}
			return f(uint64(n))
		}
		for _, q := range qs {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", q.Path, q.Kind, q.ID, human(uint64(q.UsedBytes)),
				limit(q.LimitBytes, human), q.UsedFiles, limit(q.LimitFiles, func(n uint64) string { return strconv.FormatUint(n, 10) }),
				human(uint64(q.BookedBytes)))
		}
		tw.Flush()
		return 0
	})
	ls.Flags().StringVar(&lsPath, "path", "", pathHelp)
	return group("quota", "quota set --path P (-u UID | -g GID | -p) [--bytes 10G] [--files 1M] | ls [--path P] | rm --path P (-u|-g|-p)",
		withURL(set), withURL(ls), withURL(rm))
}

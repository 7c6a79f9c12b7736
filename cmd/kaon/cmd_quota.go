package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() {
	register(command{name: "quota", short: "quota set --path P (-u UID | -g GID | -p) [--bytes 10G] [--files 1M] | ls [--path P] | rm --path P (-u|-g|-p)", run: runQuota})
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

func runQuota(args []string) int {
	fl, u := flags("quota")
	path := fl.String("path", "", "quota node (a directory)")
	uid := fl.Int64("u", -1, "a user's limit")
	gid := fl.Int64("g", -1, "a group's limit")
	project := fl.Bool("p", false, "the project limit (everybody together)")
	bytes := fl.String("bytes", "", "byte limit (K, M, G, T suffixes: powers of 1024)")
	files := fl.String("files", "", "file count limit (K, M suffixes: powers of 1000)")
	usage := func() int {
		fmt.Fprintln(os.Stderr, "usage: kaon quota set --path P (-u UID | -g GID | -p) [--bytes N] [--files N] | ls [--path P] | rm --path P (-u UID | -g GID | -p)")
		return 2
	}
	if len(args) == 0 {
		return usage()
	}
	sub := args[0]
	fl.Parse(args[1:])
	api := newAPI(*u)
	who := func() (string, uint32, bool) {
		switch {
		case *uid >= 0 && *gid < 0 && !*project:
			return "user", uint32(*uid), true
		case *gid >= 0 && *uid < 0 && !*project:
			return "group", uint32(*gid), true
		case *project && *uid < 0 && *gid < 0:
			return "project", 0, true
		}
		return "", 0, false
	}
	switch sub {
	case "set":
		kind, id, ok := who()
		if !ok || *path == "" {
			return usage()
		}
		b, err1 := parseAmount(*bytes, 1024)
		f, err2 := parseAmount(*files, 1000)
		if err1 != nil || err2 != nil {
			return fail("quota set", fmt.Errorf("%v %v", err1, err2))
		}
		if err := api.SetQuota(ctx(), *path, nsapi.QuotaKey{Kind: nsapi.QuotaKind(kind), ID: id}, nsapi.Amount{Bytes: b, Files: f}); err != nil {
			return fail("quota set", err)
		}
	case "rm":
		kind, id, ok := who()
		if !ok || *path == "" {
			return usage()
		}
		if err := api.RemoveQuota(ctx(), *path, nsapi.QuotaKey{Kind: nsapi.QuotaKind(kind), ID: id}); err != nil {
			return fail("quota rm", err)
		}
	case "ls":
		p := *path
		if p == "" {
			p = "/"
		}
		qs, err := api.Quotas(ctx(), p)
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
	default:
		return usage()
	}
	return 0
}

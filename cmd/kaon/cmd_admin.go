package main

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/kaon-storage/kaon/internal/checksum"
)

func init() {
	register(command{name: "space", short: "space ls: capacity and state per space", run: runSpace})
	register(command{name: "fs", short: "fs ls | fs add --node N --path P [--group G] | fs config ID key=value | fs reinit ID", run: runFs})
	register(command{name: "file", short: "file info PATH: fid, layout, checksums, stripes", run: runFile})
	register(command{name: "attr", short: "attr set PATH name=value | get PATH name | ls PATH | rm PATH name", run: runAttr})
}

func urlPathEscape(s string) string { return url.PathEscape(s) }

func human(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

func runSpace(args []string) int {
	fl, u := flags("space")
	fl.Parse(args)
	if fl.NArg() != 1 || fl.Arg(0) != "ls" {
		fmt.Fprintln(os.Stderr, "usage: kaon space ls")
		return 2
	}
	sp, err := newAPI(*u).Spaces(ctx())
	if err != nil {
		return fail("space ls", err)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "name\tgroups\tfs\trw\tbooted\tused\tcapacity\tfiles")
	for _, s := range sp {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%d\n", s.Name, s.Groups, s.Filesystems, s.RW, s.Booted, human(s.Used), human(s.Capacity), s.Files)
	}
	tw.Flush()
	return 0
}

func runFs(args []string) int {
	fl, u := flags("fs")
	node := fl.String("node", "", "fs add: storage server node name (host:port as in fs ls)")
	path := fl.String("path", "", "fs add: directory on that node")
	group := fl.String("group", "", "fs add: scheduling group (default default.0)")
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: kaon fs ls | add --node N --path P [--group G] | config ID key=value | reinit ID")
		return 2
	}
	sub := args[0]
	fl.Parse(args[1:])
	api := newAPI(*u)
	switch sub {
	case "ls":
		fss, err := api.Filesystems(ctx())
		if err != nil {
			return fail("fs ls", err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "host:port\tid\tpath\tgroup\tboot\tconfig\tused\tcapacity\tfiles\thealth")
		for _, f := range fss {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", f.Node, f.ID, f.Path, f.Group, f.BootStatus, f.ConfigStatus,
				human(f.Used), human(f.Capacity), f.Files, f.Health)
		}
		tw.Flush()
	case "add":
		if err := api.AddFilesystem(ctx(), *node, *path, *group); err != nil {
			return fail("fs add", err)
		}
	case "config":
		if fl.NArg() != 2 {
			fmt.Fprintln(os.Stderr, "usage: kaon fs config ID key=value (configstatus=rw|ro|drain|off, group=NAME)")
			return 2
		}
		k, v, ok := strings.Cut(fl.Arg(1), "=")
		if !ok {
			return fail("fs config", fmt.Errorf("want key=value, got %q", fl.Arg(1)))
		}
		if err := api.ConfigFilesystem(ctx(), fl.Arg(0), k, v); err != nil {
			return fail("fs config", err)
		}
	case "reinit":
		if fl.NArg() != 1 {
			fmt.Fprintln(os.Stderr, "usage: kaon fs reinit ID (the storage server creates the filesystem again, on an empty directory)")
			return 2
		}
		if err := api.ReinitFilesystem(ctx(), fl.Arg(0)); err != nil {
			return fail("fs reinit", err)
		}
	default:
		fmt.Fprintf(os.Stderr, "kaon fs: unknown subcommand %q\n", sub)
		return 2
	}
	return 0
}

func runFile(args []string) int {
	fl, u := flags("file")
	if len(args) == 0 || args[0] != "info" {
		fmt.Fprintln(os.Stderr, "usage: kaon file info PATH")
		return 2
	}
	p, ok := oneArg(fl, args[1:])
	if !ok {
		return 2
	}
	e, err := newAPI(*u).FileInfo(ctx(), p)
	if err != nil {
		return fail("file info", err)
	}
	if e.IsDir {
		return fail("file info", fmt.Errorf("%s: is a directory", p))
	}
	fmt.Printf("  File: %s\n   fid: %d (%08x)\n  Size: %d\nLayout: %s\n", e.Path, e.ID, e.ID, e.Size, e.Layout)
	for _, t := range checksum.SortedTypes(e.Checksums) {
		fmt.Printf("  %s: %s\n", t, e.Checksums[t])
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "stripe\tfsid\tnode\tphysical path")
	for _, s := range e.Stripes {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\n", s.Index, s.FsID, s.Node, s.PhysPath)
	}
	tw.Flush()
	return 0
}

func runAttr(args []string) int {
	fl, u := flags("attr")
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kaon attr set PATH name=value | get PATH name | ls PATH | rm PATH name")
		return 2
	}
	sub := args[0]
	fl.Parse(args[1:])
	api := newAPI(*u)
	a := fl.Args()
	switch {
	case sub == "set" && len(a) == 2:
		k, v, ok := strings.Cut(a[1], "=")
		if !ok {
			return fail("attr set", fmt.Errorf("want name=value, got %q", a[1]))
		}
		if err := api.SetAttr(ctx(), a[0], k, v); err != nil {
			return fail("attr set", err)
		}
	case sub == "rm" && len(a) == 2:
		if err := api.RemoveAttr(ctx(), a[0], a[1]); err != nil {
			return fail("attr rm", err)
		}
	case (sub == "ls" && len(a) == 1) || (sub == "get" && len(a) == 2):
		attrs, err := api.Attrs(ctx(), a[0])
		if err != nil {
			return fail("attr "+sub, err)
		}
		found := false
		for _, kv := range attrs {
			if sub == "ls" || kv[0] == a[1] {
				fmt.Printf("%s=%q\n", kv[0], kv[1])
				found = true
			}
		}
		if sub == "get" && !found {
			return fail("attr get", fmt.Errorf("%s: no attribute %q", a[0], a[1]))
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: kaon attr set PATH name=value | get PATH name | ls PATH | rm PATH name")
		return 2
	}
	return 0
}

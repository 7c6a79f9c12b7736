package main

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() {
	register(command{name: "space", short: "space ls | define NAME | config NAME key=value: spaces, capacity counted once per backend", run: runSpace})
	register(command{name: "fs", short: "fs ls | fs add --node N (--path P | --rados --pool P) [--space S] | fs config ID key=value | fs status ID | fs reinit ID", run: runFs})
	register(command{name: "file", short: "file info PATH: fid, layout, checksums, stripes | file convert PATH --space S --layout L | " + versionsUsage, run: runFile})
	register(command{name: "attr", short: "attr set PATH name=value | get PATH name | ls PATH | rm PATH name", run: runAttr})
}

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
	const usage = "usage: kaon space ls | define NAME | config NAME key=value (cephfs.pool=POOL, cephfs.object-size=SIZE)"
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	sub := args[0]
	fl.Parse(args[1:])
	api := newAPI(*u)
	switch {
	case sub == "ls" && fl.NArg() == 0:
		sp, err := api.Spaces(ctx())
		if err != nil {
			return fail("space ls", err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "name\tgroups\tfs\trw\tbooted\tbackends\tused\tcapacity\tfiles\tsettings")
		for _, s := range sp {
			var set []string
			if s.CephPool != "" {
				set = append(set, "cephfs.pool="+s.CephPool)
			}
			if s.ObjectSize > 0 {
				set = append(set, "cephfs.object-size="+human(uint64(s.ObjectSize)))
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%d\t%s\n", s.Name, s.Groups, s.Filesystems, s.RW, s.Booted, s.Backends,
				human(s.Used), human(s.Capacity), s.Files, strings.Join(set, " "))
		}
		tw.Flush()
	case sub == "define" && fl.NArg() == 1:
		if err := api.DefineSpace(ctx(), fl.Arg(0)); err != nil {
			return fail("space define", err)
		}
	case sub == "config" && fl.NArg() == 2:
		k, v, ok := strings.Cut(fl.Arg(1), "=")
		if !ok {
			return fail("space config", fmt.Errorf("want key=value, got %q", fl.Arg(1)))
		}
		if err := api.ConfigSpace(ctx(), fl.Arg(0), k, v); err != nil {
			return fail("space config", err)
		}
	default:
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	return 0
}

// radosPlace is the path of a RADOS filesystem:
// rados://[USER@]POOL[/NAMESPACE][?conf=FILE].
func radosPlace(pool, namespace, user, conf string) string {
	u := url.URL{Scheme: "rados", Host: pool}
	if user != "" {
		u.User = url.User(user)
	}
	if namespace != "" {
		u.Path = "/" + namespace
	}
	if conf != "" {
		u.RawQuery = url.Values{"conf": {conf}}.Encode()
	}
	return u.String()
}

const fsUsage = `usage: kaon fs ls
       kaon fs add --node N --path DIR [--space S | --group S.N] [--io auto|direct|buffered]
       kaon fs add --node N --rados --pool P [--namespace NS] [--ceph-conf F] [--ceph-user U] [--object-size 16M] [--space S]
       kaon fs config ID key=value   (configstatus=rw|ro|drain|off, group=S.N, space=S, io=auto|direct|buffered, object-size=SIZE,
                                      drain.rate=SIZE per second (0 = no cap), drain.parallel=N,
                                      fsck: scan_disk_interval=4h, scan_ns_rate=1000 (stripes/s), scaninterval=7d, scanrate=100 (MB/s))
       kaon fs status ID             (a filesystem and its drain: stripes and bytes left, rate, ETA, failures with reasons)
       kaon fs reinit ID`

func runFs(args []string) int {
	fl, u := flags("fs")
	var nf nsapi.NewFilesystem
	fl.StringVar(&nf.Node, "node", "", "fs add: storage server node name (host:port as in fs ls)")
	fl.StringVar(&nf.Path, "path", "", "fs add: directory on that node")
	fl.StringVar(&nf.Group, "group", "", "fs add: scheduling group SPACE.N (default SPACE.0)")
	fl.StringVar(&nf.Space, "space", "", "fs add: space (default \"default\")")
	fl.StringVar(&nf.IO, "io", "", "fs add: write mode auto (direct on local disks, buffered on network/FUSE filesystems), direct or buffered")
	rados := fl.Bool("rados", false, "fs add: a RADOS pool instead of a directory")
	pool := fl.String("pool", "", "fs add --rados: the pool")
	rns := fl.String("namespace", "", "fs add --rados: object namespace in the pool (default: one of its own)")
	conf := fl.String("ceph-conf", "", "fs add --rados: ceph.conf on the storage server (default: its --ceph-conf)")
	user := fl.String("ceph-user", "", "fs add --rados: Ceph client id (default: the storage server's --ceph-user)")
	fl.StringVar(&nf.ObjectSize, "object-size", "", "fs add --rados: object size stripes are cut into (4M, 16M, 64M)")
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, fsUsage)
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
		fmt.Fprintln(tw, "host:port\tid\tpath\tgroup\tboot\tconfig\tkind\tio\tused\tcapacity\tfiles\tdrain\tleft\trate\teta\tfailed\tbackend-health\thealth")
		for _, f := range fss {
			io := f.IOInUse
			if io != "" {
				set := f.IO
				if set == "" {
					set = "auto"
				}
				io += "/" + set
			}
			health := f.Health
			if f.Slow != "" { // standing out from its group: new files avoid it
				health = strings.TrimPrefix(health+"; ", "ok; ") + "slow: " + f.Slow
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", f.Node, f.ID, f.Path, f.Group, f.BootStatus, f.ConfigStatus,
				dash(f.Kind), dash(io), human(f.Used), human(f.Capacity), f.Files, drainColumns(f), dash(f.BackendHealth), health)
		}
		tw.Flush()
	case "add":
		if *rados {
			if *pool == "" || nf.Path != "" {
				return fail("fs add", fmt.Errorf("--rados needs --pool (and no --path)"))
			}
			nf.Path = radosPlace(*pool, *rns, *user, *conf)
		}
		if err := api.AddFilesystem(ctx(), nf); err != nil {
			return fail("fs add", err)
		}
	case "config":
		if fl.NArg() != 2 {
			fmt.Fprintln(os.Stderr, fsUsage)
			return 2
		}
		k, v, ok := strings.Cut(fl.Arg(1), "=")
		if !ok {
			return fail("fs config", fmt.Errorf("want key=value, got %q", fl.Arg(1)))
		}
		id, err := nsapi.ParseFsID("fs config", fl.Arg(0))
		if err == nil {
			err = api.ConfigFilesystem(ctx(), id, k, v)
		}
		if err != nil {
			return fail("fs config", err)
		}
	case "status":
		if fl.NArg() != 1 {
			fmt.Fprintln(os.Stderr, fsUsage)
			return 2
		}
		id, err := nsapi.ParseFsID("fs status", fl.Arg(0))
		var st nsapi.FsStatus
		if err == nil {
			st, err = api.FsStatus(ctx(), id)
		}
		if err != nil {
			return fail("fs status", err)
		}
		printFsStatus(st)
	case "reinit":
		if fl.NArg() != 1 {
			fmt.Fprintln(os.Stderr, "usage: kaon fs reinit ID (the storage server creates the filesystem again, on an empty directory)")
			return 2
		}
		id, err := nsapi.ParseFsID("fs reinit", fl.Arg(0))
		if err == nil {
			err = api.ReinitFilesystem(ctx(), id)
		}
		if err != nil {
			return fail("fs reinit", err)
		}
	default:
		fmt.Fprintf(os.Stderr, "kaon fs: unknown subcommand %q\n%s\n", sub, fsUsage)
		return 2
	}
	return 0
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func runFile(args []string) int {
	fl, u := flags("file")
	if len(args) > 0 && args[0] == "convert" {
		return runConvert(fl, u, args[1:])
	}
	if len(args) > 0 && (args[0] == "versions" || args[0] == "restore-version") {
		return runFileVersions(fl, u, args[0], args[1:])
	}
	if len(args) == 0 || args[0] != "info" {
		fmt.Fprintln(os.Stderr, "usage: kaon file info PATH | file convert PATH [--space S] [--layout L] | file convert --status | "+versionsUsage)
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

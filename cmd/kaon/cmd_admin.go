package main

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

func init() {
	addVerb(newSpaceCmd)
	addVerb(newFsCmd)
	addVerb(newFileCmd)
	addVerb(newAttrCmd)
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

const spaceUsage = "usage: kaon space ls | define NAME | config NAME key=value (cephfs.pool=POOL, cephfs.object-size=SIZE)"

func newSpaceCmd() *cobra.Command {
	ls := leaf("ls", "spaces: groups, filesystems, backends, capacity (counted once per backend), settings", func(c *cobra.Command, args []string) int {
		if len(args) != 0 {
			fmt.Fprintln(os.Stderr, spaceUsage)
			return 2
		}
		sp, err := newAPI(urlOf(c)).Spaces(ctx())
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
		return 0
	})
	define := leaf("define NAME", "define a space", func(c *cobra.Command, args []string) int {
		if len(args) != 1 {
			fmt.Fprintln(os.Stderr, spaceUsage)
			return 2
		}
		if err := newAPI(urlOf(c)).DefineSpace(ctx(), args[0]); err != nil {
			return fail("space define", err)
		}
		return 0
	})
	config := leaf("config NAME key=value", "set a space's setting (cephfs.pool=POOL, cephfs.object-size=SIZE)", func(c *cobra.Command, args []string) int {
		if len(args) != 2 {
			fmt.Fprintln(os.Stderr, spaceUsage)
			return 2
		}
		k, v, ok := strings.Cut(args[1], "=")
		if !ok {
			return fail("space config", fmt.Errorf("want key=value, got %q", args[1]))
		}
		if err := newAPI(urlOf(c)).ConfigSpace(ctx(), args[0], k, v); err != nil {
			return fail("space config", err)
		}
		return 0
	})
	return group("space", "spaces: space ls | define NAME | config NAME key=value", withURL(ls), withURL(define), withURL(config))
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
       kaon fs add --node N --path DIR [--space S | --group S.N] [--io auto|direct|buffered] [--location SITE::RACK]
       kaon fs add --node N --rados --pool P [--namespace NS] [--ceph-conf F] [--ceph-user U] [--object-size 16M] [--space S]
       kaon fs config ID key=value   (configstatus=rw|ro|drain|off|lost, location=SITE::RACK, group=S.N, space=S,
                                      io=auto|direct|buffered, object-size=SIZE, blocksums=on|off,
                                      drain.rate=SIZE per second (0 = no cap), drain.parallel=N,
                                      rebuild.rate=SIZE per second (default: gives way to clients; 0 = no cap), rebuild.parallel=N,
                                      fsck: scan_disk_interval=4h, scan_ns_rate=1000 (stripes/s), scaninterval=7d, scanrate=100 (MB/s))
       kaon fs status ID             (a filesystem and its drain or rebuild: stripes and bytes left, files at risk, rate, ETA,
                                      failures with reasons)
       kaon fs reinit ID`

func newFsCmd() *cobra.Command {
	ls := leaf("ls", "filesystems: location, state, fill, I/O mode, drain or rebuild progress, health", func(c *cobra.Command, args []string) int {
		fss, err := newAPI(urlOf(c)).Filesystems(ctx())
		if err != nil {
			return fail("fs ls", err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "host:port\tid\tpath\tgroup\tlocation\tboot\tconfig\tkind\tio\tused\tcapacity\tfiles\tdrain\tleft\trate\teta\tfailed\tbackend-health\thealth")
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
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", f.Node, f.ID, f.Path, f.Group, dash(f.Location), f.BootStatus, f.ConfigStatus,
				dash(f.Kind), dash(io), human(f.Used), human(f.Capacity), f.Files, drainColumns(f), dash(f.BackendHealth), health)
		}
		tw.Flush()
		return 0
	})
	var nf nsapi.NewFilesystem
	var rados bool
	var pool, rns, conf, user string
	add := leaf("add --node N (--path DIR | --rados --pool P)", "add a filesystem of a storage server: a directory or a RADOS pool", func(c *cobra.Command, args []string) int {
		if rados {
			if pool == "" || nf.Path != "" {
				return fail("fs add", fmt.Errorf("--rados needs --pool (and no --path)"))
			}
			nf.Path = radosPlace(pool, rns, user, conf)
		}
		if err := newAPI(urlOf(c)).AddFilesystem(ctx(), nf); err != nil {
			return fail("fs add", err)
		}
		return 0
	})
	fl := add.Flags()
	fl.StringVar(&nf.Node, "node", "", "storage server node name (host:port as in fs ls)")
	fl.StringVar(&nf.Path, "path", "", "directory on that node")
	fl.StringVar(&nf.Group, "group", "", "scheduling group SPACE.N (default SPACE.0)")
	fl.StringVar(&nf.Space, "space", "", "space (default \"default\")")
	fl.StringVar(&nf.IO, "io", "", "write mode auto (direct on local disks, buffered on network/FUSE filesystems), direct or buffered")
	fl.StringVar(&nf.Location, "location", "", "failure-domain tag, widest first (site::rack1): a file's stripes are spread over locations")
	fl.BoolVar(&rados, "rados", false, "a RADOS pool instead of a directory")
	fl.StringVar(&pool, "pool", "", "--rados: the pool")
	fl.StringVar(&rns, "namespace", "", "--rados: object namespace in the pool (default: one of its own)")
	fl.StringVar(&conf, "ceph-conf", "", "--rados: ceph.conf on the storage server (default: its --ceph-conf)")
	fl.StringVar(&user, "ceph-user", "", "--rados: Ceph client id (default: the storage server's --ceph-user)")
	fl.StringVar(&nf.ObjectSize, "object-size", "", "--rados: object size stripes are cut into (4M, 16M, 64M)")
	config := leaf("config ID key=value", "set a filesystem's setting: configstatus=rw|ro|drain|off|lost, location, group, space, io, object-size, blocksums, drain.*, rebuild.*, fsck's scan_*", func(c *cobra.Command, args []string) int {
		if len(args) != 2 {
			fmt.Fprintln(os.Stderr, fsUsage)
			return 2
		}
		k, v, ok := strings.Cut(args[1], "=")
		if !ok {
			return fail("fs config", fmt.Errorf("want key=value, got %q", args[1]))
		}
		id, err := nsapi.ParseFsID("fs config", args[0])
		if err == nil {
			err = newAPI(urlOf(c)).ConfigFilesystem(ctx(), id, k, v)
		}
		if err != nil {
			return fail("fs config", err)
		}
		return 0
	})
	config.Long = fsUsage
	status := leaf("status ID", "a filesystem and its drain or rebuild: stripes and bytes left, files at risk, rate, ETA, failures with reasons", func(c *cobra.Command, args []string) int {
		if len(args) != 1 {
			fmt.Fprintln(os.Stderr, fsUsage)
			return 2
		}
		id, err := nsapi.ParseFsID("fs status", args[0])
		var st nsapi.FsStatus
		if err == nil {
			st, err = newAPI(urlOf(c)).FsStatus(ctx(), id)
		}
		if err != nil {
			return fail("fs status", err)
		}
		printFsStatus(st)
		return 0
	})
	reinit := leaf("reinit ID", "the storage server creates the filesystem again, on an empty directory", func(c *cobra.Command, args []string) int {
		if len(args) != 1 {
			fmt.Fprintln(os.Stderr, "usage: kaon fs reinit ID (the storage server creates the filesystem again, on an empty directory)")
			return 2
		}
		id, err := nsapi.ParseFsID("fs reinit", args[0])
		if err == nil {
			err = newAPI(urlOf(c)).ReinitFilesystem(ctx(), id)
		}
		if err != nil {
			return fail("fs reinit", err)
		}
		return 0
	})
	g := group("fs", "filesystems: fs ls | add | config ID key=value | status ID | reinit ID",
		withURL(ls), withURL(add), withURL(config), withURL(status), withURL(reinit))
	g.Long = fsUsage
	return g
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newFileCmd() *cobra.Command {
	info := leaf("info PATH", "a file's fid, layout, checksums, stripes and their physical paths", func(c *cobra.Command, args []string) int {
		p, ok := oneArg(c, args)
		if !ok {
			return 2
		}
		return runFileInfo(urlOf(c), p)
	})
	return group("file", "file info PATH | file convert PATH --space S --layout L | "+versionsUsage,
		withURL(info), withURL(newConvertCmd()), withURL(newVersionsCmd()), withURL(newRestoreVersionCmd()))
}

func runFileInfo(u server, p string) int {
	e, err := newAPI(u).FileInfo(ctx(), p)
	if err != nil {
		return fail("file info", err)
	}
	if e.IsDir {
		return fail("file info", fmt.Errorf("%s: is a directory", p))
	}
	fmt.Printf("  File: %s\n   fid: %d (%08x)\n  Size: %d\nLayout: %s\nData version: %d\n", e.Path, e.ID, e.ID, e.Size, e.Layout, e.DataVersion)
	if len(e.Stale) > 0 {
		fmt.Printf("Stale stripes: %s (missed an update: never read, rebuilt by fsck repair --class stale)\n", strings.Trim(fmt.Sprint(e.Stale), "[]"))
	}
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

const attrUsage = "usage: kaon attr set PATH name=value | get PATH name | ls PATH | rm PATH name"

func newAttrCmd() *cobra.Command {
	sub := func(use, short string, n int, run func(api *client.Client, a []string) int) *cobra.Command {
		return withURL(leaf(use, short, func(c *cobra.Command, a []string) int {
			if len(a) != n {
				fmt.Fprintln(os.Stderr, attrUsage)
				return 2
			}
			return run(newAPI(urlOf(c)), a)
		}))
	}
	set := sub("set PATH name=value", "set an attribute (sys.* : root or the admin role)", 2, func(api *client.Client, a []string) int {
		k, v, ok := strings.Cut(a[1], "=")
		if !ok {
			return fail("attr set", fmt.Errorf("want name=value, got %q", a[1]))
		}
		if err := api.SetAttr(ctx(), a[0], k, v); err != nil {
			return fail("attr set", err)
		}
		return 0
	})
	rm := sub("rm PATH name", "remove an attribute", 2, func(api *client.Client, a []string) int {
		if err := api.RemoveAttr(ctx(), a[0], a[1]); err != nil {
			return fail("attr rm", err)
		}
		return 0
	})
	// show prints the attributes of a[0]; all, or the one named a[1].
	show := func(sub string) func(api *client.Client, a []string) int {
		return func(api *client.Client, a []string) int {
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
			return 0
		}
	}
	return group("attr", "attributes: attr set PATH name=value | get PATH name | ls PATH | rm PATH name",
		set, sub("get PATH name", "print an attribute", 2, show("get")), sub("ls PATH", "print every attribute", 1, show("ls")), rm)
}

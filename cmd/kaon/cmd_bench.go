package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/bench"
	"github.com/kaon-storage/kaon/internal/ha"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/role"
	"github.com/kaon-storage/kaon/internal/role/endpoints"
)

func init() {
	addVerb(func() *cobra.Command {
		return group("bench", "benchmarks: bench stream | bench ns | bench fsck | bench rebuild | bench token | bench sessions | bench locks | bench session-wire | bench io500",
			newBenchStreamCmd(), newBenchNSCmd(), newBenchFsckCmd(), newBenchRebuildCmd(), newBenchTokenCmd(), newBenchSessionsCmd(), newBenchLocksCmd(), newBenchSessionWireCmd(),
			newBenchIO500Cmd())
	})
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, s[:len(s)-1]
	}
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

// serverOf reads endpoints.json of a data dir: URL and PID of the server.
func serverOf(data string) (string, int, error) {
	ep, err := endpoints.Read(data)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0, fmt.Errorf("no running kaon for data dir %s: %w", data, err)
	} else if err != nil {
		return "", 0, err
	}
	return ep.HTTP, ep.PID, nil
}

func newBenchStreamCmd() *cobra.Command {
	var (
		data, layouts, spaces, size, ops, sums, cpuPids, plotFile string
		rawDirs                                                   rawDirFlag
		streams, rounds                                           int
		pause                                                     time.Duration
		fsync, drop, verbose                                      bool
	)
	c := leaf("stream", "parallel streams through a running server, beside a raw baseline (dd-like) on the same disks", func(*cobra.Command, []string) int {
		url, pid, err := serverOf(data)
		if err != nil {
			return fail("bench stream", err)
		}
		sz, err := parseSize(size)
		if err != nil {
			return fail("bench stream", err)
		}
		cfg := bench.StreamConfig{URL: url, ServerPID: pid, RawDir: filepath.Join(data, "bench-raw"), RawDirs: rawDirs,
			Layouts: strings.Split(layouts, ","), Streams: streams, Size: sz, Fsync: fsync, DropCaches: drop, Checksums: sums,
			Rounds: rounds, Pause: pause, Ops: strings.Split(ops, ",")}
		if spaces != "" {
			cfg.Spaces = strings.Split(spaces, ",")
		}
		for _, p := range strings.Split(cpuPids, ",") {
			if p == "" {
				continue
			}
			n, err := strconv.Atoi(p)
			if err != nil {
				return fail("bench stream", fmt.Errorf("--cpu-pids: bad pid %q", p))
			}
			cfg.CPUPids = append(cfg.CPUPids, n)
		}
		if verbose {
			cfg.Progress = os.Stderr
		}
		rows, err := bench.Stream(cfg)
		if err != nil {
			return fail("bench stream", err)
		}
		bench.PrintStream(os.Stdout, cfg, rows)
		if plotFile != "" {
			if err := bench.PlotTails(plotFile, cfg, rows); err != nil {
				return fail("bench stream", err)
			}
		}
		return 0
	})
	fl := c.Flags()
	fl.StringVar(&data, "data", defaultDataDir(), "data dir of the running server (endpoints.json; the raw baseline is written beside it)")
	fl.StringVar(&layouts, "layouts", "plain,replica:2,ec:4+2", "comma-separated layouts")
	fl.StringVar(&spaces, "spaces", "", "comma-separated spaces: every layout on every space (sys.forced.space), rows SPACE[/LAYOUT]")
	fl.Var(&rawDirs, "raw-dir", "[NAME=]DIR: a raw baseline (buffered + fsync, like dd) in DIR instead of beside --data, e.g. in a ceph-fuse mount; repeatable")
	fl.IntVar(&streams, "streams", 8, "parallel streams")
	fl.StringVar(&size, "size", "256M", "bytes per stream")
	fl.IntVar(&rounds, "rounds", 1, "measure every row this often, alternating the order; medians are printed")
	fl.DurationVar(&pause, "pause", 0, "pause before every phase (let a cluster settle)")
	fl.StringVar(&ops, "ops", "write,read", "phases: write,read or write (reads read what the writes wrote)")
	fl.BoolVar(&fsync, "fsync", true, "fsync raw files (match the server's --sync)")
	fl.BoolVar(&drop, "drop-caches", false, "drop the page cache before read phases (root)")
	fl.StringVar(&sums, "checksums", "", "checksums computed while writing (sys.forced.checksums), default: the server's")
	fl.StringVar(&cpuPids, "cpu-pids", "", "comma-separated pids whose CPU time is counted per GiB beside the server's (ceph-fuse)")
	fl.StringVar(&plotFile, "plot", "", "draw the stream tails to FILE.png (line at the average, box to p99, whisker to max)")
	fl.BoolVarP(&verbose, "v", "v", false, "print every row of every round as it finishes (stderr)")
	return c
}

func newBenchNSCmd() *cobra.Command {
	var (
		files, dirs, workers  int
		data, dir, cpuProfile string
		sync, http2, session  bool
		unbatched             bool
		meta                  role.MetaConfig
	)
	c := leaf("ns", "namespace creates: in-process (embedded or etcd store) or through a running server's API", func(*cobra.Command, []string) int {
		stop, err := startCPUProfile(cpuProfile)
		if err != nil {
			return fail("bench ns", err)
		}
		defer stop()
		cfg := bench.NSConfig{Files: files, Dirs: dirs, Workers: workers, Sync: sync, HTTP2: http2, Session: session, Unbatched: unbatched}
		if data != "" {
			url, pid, err := serverOf(data)
			if err != nil {
				return fail("bench ns", err)
			}
			cfg.URL, cfg.ServerPID = url, pid
		} else {
			cfg.Dir = dir
			if cfg.Dir == "" {
				d, err := os.MkdirTemp("", "kaon-bench-ns-")
				if err != nil {
					return fail("bench ns", err)
				}
				defer os.RemoveAll(d)
				cfg.Dir = d
			}
			if meta.URL != "" {
				cfg.Store = func() (bench.NSStore, error) { return benchActive(meta, cfg.Dir, files) }
			}
		}
		res, err := bench.Namespace(cfg)
		if err != nil {
			return fail("bench ns", err)
		}
		bench.PrintNamespace(os.Stdout, cfg, res)
		return 0
	})
	fl := c.Flags()
	fl.IntVar(&files, "files", 1000000, "files to create")
	fl.IntVar(&dirs, "dirs", 1000, "directories to spread them over")
	fl.IntVar(&workers, "workers", 32, "parallel workers")
	fl.StringVar(&data, "data", "", "data dir of a running server: benchmark through its API (default: in-process)")
	fl.BoolVar(&http2, "http2", false, "with --data: speak HTTP/2 (h2c on http://, as the mount's session channel) instead of HTTP/1.1")
	fl.BoolVar(&session, "session", false, "with --data: creates and stats as requests framed on one session stream (/sessions/v1, batched) instead of HTTP requests, and a phase of null requests (the channel's floor)")
	fl.BoolVar(&unbatched, "unbatched", false, "with --session: a frame per request (no batches)")
	fl.StringVar(&dir, "dir", "", "in-process: store directory (default: a temp dir)")
	fl.BoolVar(&sync, "sync", true, "in-process: durable commits, as the server does by default")
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run (the benchmark process) to this file")
	bindMeta(fl, &meta)
	return c
}

func newBenchFsckCmd() *cobra.Command {
	var cfg bench.FsckConfig
	c := leaf("fsck", "fsck scans and the namespace pass over a million files (a namespace server and a storage server it starts)", func(*cobra.Command, []string) int {
		if cfg.Dir == "" {
			return fail("bench fsck", fmt.Errorf("--data is required"))
		}
		exe, err := os.Executable()
		if err != nil {
			return fail("bench fsck", err)
		}
		cfg.Kaon = exe
		runs, err := bench.Fsck(cfg, os.Stdout)
		if err != nil {
			return fail("bench fsck", err)
		}
		bench.PrintFsck(os.Stdout, cfg, runs)
		return 0
	})
	fl := c.Flags()
	fl.StringVar(&cfg.Dir, "data", "", "work directory (populated on first use, reused after)")
	fl.StringVar(&cfg.Stripes, "stripes", "", "parent of the filesystems (default DATA/fs; a tmpfs such as /dev/shm/x holds a million stripes cheaply)")
	fl.IntVar(&cfg.Files, "files", 1000000, "files in the namespace")
	fl.IntVar(&cfg.Dirs, "dirs", 1000, "directories to spread them over")
	fl.IntVar(&cfg.Filesystems, "filesystems", 4, "filesystems of the storage server")
	fl.StringVar(&cfg.Layout, "layout", "plain", "layout of the files (plain: one stripe each)")
	fl.IntVar(&cfg.Runs, "runs", 3, "unthrottled runs (the median is reported)")
	fl.BoolVar(&cfg.Throttled, "throttled", true, "one more run at the default rates (scan_ns_rate per filesystem, --fsck-rate)")
	return c
}

func newBenchRebuildCmd() *cobra.Command {
	var cfg bench.RebuildConfig
	c := leaf("rebuild", "rebuild of a lost filesystem: time until no file is one failure from loss, and until it is empty (servers it starts)", func(*cobra.Command, []string) int {
		if cfg.Dir == "" {
			return fail("bench rebuild", fmt.Errorf("--data is required"))
		}
		exe, err := os.Executable()
		if err != nil {
			return fail("bench rebuild", err)
		}
		cfg.Kaon = exe
		runs, err := bench.Rebuild(cfg, os.Stdout)
		if err != nil {
			return fail("bench rebuild", err)
		}
		bench.PrintRebuild(os.Stdout, cfg, runs)
		return 0
	})
	fl := c.Flags()
	fl.StringVar(&cfg.Dir, "data", "", "work directory (populated anew for every run)")
	fl.StringVar(&cfg.Stripes, "stripes", "", "parent of the filesystems (default DATA/fs; a tmpfs such as /dev/shm/x holds them cheaply)")
	fl.IntVar(&cfg.Files, "files", 100000, "files in the namespace")
	fl.IntVar(&cfg.Dirs, "dirs", 100, "directories to spread them over")
	fl.IntVar(&cfg.Filesystems, "filesystems", 5, "filesystems of the storage server (fs 1 is lost)")
	fl.IntVar(&cfg.Size, "size", 4096, "bytes per file")
	fl.StringSliceVar(&cfg.Layouts, "layouts", []string{"replica:2", "replica:3"}, "layouts of the files, in turn (plain or replica:N)")
	fl.IntVar(&cfg.Parallel, "parallel", 0, "rebuild.parallel (0: the default)")
	fl.IntVar(&cfg.Runs, "runs", 1, "runs")
	return c
}

func newBenchTokenCmd() *cobra.Command {
	var (
		data, method, user string
		n, workers, rounds int
	)
	c := leaf("token", "requests with and without a bearer token: what verifying tokens costs", func(*cobra.Command, []string) int {
		url, _, err := serverOf(data)
		if err != nil {
			return fail("bench token", err)
		}
		cfg := bench.TokenConfig{URL: url, Method: strings.ToUpper(method), Requests: n, Workers: workers, Rounds: rounds, User: user}
		res, err := bench.Token(cfg)
		if err != nil {
			return fail("bench token", err)
		}
		bench.PrintToken(os.Stdout, cfg, res)
		return 0
	})
	fl := c.Flags()
	fl.StringVar(&data, "data", defaultDataDir(), "data dir of the running server (endpoints.json); it must accept tokens (--auth unix,token)")
	fl.StringVar(&method, "method", "HEAD", "HEAD (answered by the namespace server) or GET (answered with a redirect)")
	fl.IntVar(&n, "requests", 20000, "requests per round")
	fl.IntVar(&workers, "workers", 8, "concurrent clients (kept-alive connections)")
	fl.IntVar(&rounds, "rounds", 5, "rounds with and without a token, alternating")
	fl.StringVar(&user, "user", "65534", "local user the token acts as")
	return c
}

func newBenchIO500Cmd() *cobra.Command {
	var (
		cfg     bench.IO500Config
		easy    string
		verbose bool
	)
	c := leaf("io500 DIR", "IO500's phases (ior-easy/hard with fio, mdtest-easy/hard, find) in a fresh directory under DIR, scored as IO500 scores", func(c *cobra.Command, args []string) int {
		if len(args) != 1 {
			return usageError(c)
		}
		cfg.Dir = args[0]
		n, err := parseSize(easy)
		if err != nil {
			return fail("bench io500", fmt.Errorf("--easy-size: %w", err))
		}
		cfg.EasyBytes = n
		if verbose {
			cfg.Progress = os.Stderr
		}
		res, err := bench.IO500(cfg)
		if err != nil {
			return fail("bench io500", err)
		}
		bench.PrintIO500(os.Stdout, cfg, res)
		return 0
	})
	fl := c.Flags()
	fl.IntVar(&cfg.Procs, "procs", 4, "parallel processes (fio jobs, metadata workers)")
	fl.StringVar(&easy, "easy-size", "1G", "ior-easy: bytes each process writes to a file of its own")
	fl.IntVar(&cfg.HardWrites, "hard-writes", 10000, "ior-hard: 47008-byte writes per process to the one shared file")
	fl.IntVar(&cfg.EasyFiles, "easy-files", 10000, "mdtest-easy: empty files per process, a directory each")
	fl.IntVar(&cfg.HardFiles, "hard-files", 5000, "mdtest-hard: 3901-byte files per process, all in one directory")
	fl.BoolVar(&cfg.DropCaches, "drop-caches", false, "drop the kernel's caches before every read and stat phase (root)")
	fl.StringVar(&cfg.Fio, "fio", "fio", "fio binary")
	fl.BoolVarP(&verbose, "v", "v", false, "print every phase as it finishes (stderr)")
	return c
}

// startCPUProfile writes a Go CPU profile to path (nothing when path is
// empty) until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// rawDirFlag collects --raw-dir [NAME=]DIR (NAME defaults to DIR's base name).
type rawDirFlag []bench.RawDir

func (f *rawDirFlag) String() string {
	if len(*f) == 0 {
		return ""
	}
	return fmt.Sprint(*f)
}

func (f *rawDirFlag) Type() string { return "[NAME=]DIR" }

func (f *rawDirFlag) Set(v string) error {
	name, dir, ok := strings.Cut(v, "=")
	if !ok {
		name, dir = filepath.Base(v), v
	}
	if name == "" || dir == "" {
		return fmt.Errorf("want [NAME=]DIR, got %q", v)
	}
	*f = append(*f, bench.RawDir{Name: name, Dir: dir})
	return nil
}

// benchActive makes this process the active namespace server of the
// instance in meta (its replica in dir) and returns its store, for `bench
// ns --meta`: the namespace runs over the same pipeline as in kaon mgm.
// Its report is what etcd holds per file: the history is compacted and the
// bytes in use compared with those before the run.
func benchActive(meta role.MetaConfig, dir string, files int) (bench.NSStore, error) {
	remote, err := meta.OpenEtcd()
	if err != nil {
		return bench.NSStore{}, err
	}
	local, err := pebblekv.Open(filepath.Join(dir, "replica"), pebblekv.Options{NoSync: true})
	if err != nil {
		remote.Close()
		return bench.NSStore{}, err
	}
	node, err := ha.New(ha.Config{Remote: remote, Local: local, Lease: meta.Lease, KeepHistory: meta.KeepHistory,
		Self:   ha.Member{ID: "bench", HTTP: "http://bench"},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Serve:  func(_ context.Context, s kv.Store, _ uint64, _ []byte) (any, error) { return s, nil }})
	if err != nil {
		remote.Close()
		local.Close()
		return bench.NSStore{}, err
	}
	inUse := func() (int64, error) {
		st, err := remote.Status(context.Background())
		if err != nil {
			return 0, err
		}
		if err := remote.Compact(context.Background(), st.Revision); err != nil {
			return 0, err
		}
		if st, err = remote.Status(context.Background()); err != nil {
			return 0, err
		}
		var use int64
		for _, m := range st.Members {
			use = max(use, m.DBInUse)
		}
		return use, nil
	}
	before, err := inUse()
	if err != nil {
		remote.Close()
		local.Close()
		return bench.NSStore{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { node.Run(ctx); close(done) }()
	closeAll := func() {
		cancel()
		<-done
		local.Close()
		remote.Close()
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if p, ok := node.View().Service.(*ha.Pipeline); ok {
			return bench.NSStore{Store: p, Name: "etcd " + meta.URL,
				Close: func() {
					st := p.Stats()
					fmt.Fprintf(os.Stderr, "pipeline: %d batches committed in %d groups (%.1f per group)\n", st.Batches, st.Groups, float64(st.Batches)/float64(max(st.Groups, 1)))
					closeAll()
				},
				Report: func() []string {
					after, err := inUse()
					if err != nil {
						return []string{"etcd size: " + err.Error()}
					}
					return []string{fmt.Sprintf("etcd database in use after compaction: %.1f MiB more than before the run, %.0f bytes per file",
						float64(after-before)/(1<<20), float64(after-before)/float64(max(files, 1)))}
				}}, nil
		}
		if time.Now().After(deadline) {
			closeAll()
			return bench.NSStore{}, fmt.Errorf("not the active namespace server of %s within a minute (another one is active?)", meta.URL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/kaon-storage/kaon/internal/bench"
)

func init() {
	register(command{name: "bench", short: "benchmarks: bench stream | bench ns | bench fsck | bench token", run: runBench})
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
	b, err := os.ReadFile(filepath.Join(data, "endpoints.json"))
	if err != nil {
		return "", 0, fmt.Errorf("no running kaon for data dir %s: %w", data, err)
	}
	var ep Endpoints
	if err := json.Unmarshal(b, &ep); err != nil {
		return "", 0, err
	}
	return ep.HTTP, ep.PID, nil
}

func runBench(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: kaon bench stream|ns|fsck|token [flags]")
		return 2
	}
	switch args[0] {
	case "stream":
		fl := flag.NewFlagSet("kaon bench stream", flag.ExitOnError)
		data := fl.String("data", defaultDataDir(), "data dir of the running server (endpoints.json; the raw baseline is written beside it)")
		layouts := fl.String("layouts", "plain,replica:2,ec:4+2", "comma-separated layouts")
		spaces := fl.String("spaces", "", "comma-separated spaces: every layout on every space (sys.forced.space), rows SPACE[/LAYOUT]")
		var rawDirs rawDirFlag
		fl.Var(&rawDirs, "raw-dir", "[NAME=]DIR: a raw baseline (buffered + fsync, like dd) in DIR instead of beside --data, e.g. in a ceph-fuse mount; repeatable")
		streams := fl.Int("streams", 8, "parallel streams")
		size := fl.String("size", "256M", "bytes per stream")
		rounds := fl.Int("rounds", 1, "measure every row this often, alternating the order; medians are printed")
		pause := fl.Duration("pause", 0, "pause before every phase (let a cluster settle)")
		ops := fl.String("ops", "write,read", "phases: write,read or write (reads read what the writes wrote)")
		fsync := fl.Bool("fsync", true, "fsync raw files (match the server's --sync)")
		drop := fl.Bool("drop-caches", false, "drop the page cache before read phases (root)")
		sums := fl.String("checksums", "", "checksums computed while writing (sys.forced.checksums), default: the server's")
		cpuPids := fl.String("cpu-pids", "", "comma-separated pids whose CPU time is counted per GiB beside the server's (ceph-fuse)")
		plotFile := fl.String("plot", "", "draw the stream tails to FILE.png (line at the average, box to p99, whisker to max)")
		verbose := fl.Bool("v", false, "print every row of every round as it finishes (stderr)")
		fl.Parse(args[1:])
		url, pid, err := serverOf(*data)
		if err != nil {
			return fail("bench stream", err)
		}
		sz, err := parseSize(*size)
		if err != nil {
			return fail("bench stream", err)
		}
		cfg := bench.StreamConfig{URL: url, ServerPID: pid, RawDir: filepath.Join(*data, "bench-raw"), RawDirs: rawDirs,
			Layouts: strings.Split(*layouts, ","), Streams: *streams, Size: sz, Fsync: *fsync, DropCaches: *drop, Checksums: *sums,
			Rounds: *rounds, Pause: *pause, Ops: strings.Split(*ops, ",")}
		if *spaces != "" {
			cfg.Spaces = strings.Split(*spaces, ",")
		}
		for _, p := range strings.Split(*cpuPids, ",") {
			if p == "" {
				continue
			}
			n, err := strconv.Atoi(p)
			if err != nil {
				return fail("bench stream", fmt.Errorf("--cpu-pids: bad pid %q", p))
			}
			cfg.CPUPids = append(cfg.CPUPids, n)
		}
		if *verbose {
			cfg.Progress = os.Stderr
		}
		rows, err := bench.Stream(cfg)
		if err != nil {
			return fail("bench stream", err)
		}
		bench.PrintStream(os.Stdout, cfg, rows)
		if *plotFile != "" {
			if err := bench.PlotTails(*plotFile, cfg, rows); err != nil {
				return fail("bench stream", err)
			}
		}
	case "ns":
		fl := flag.NewFlagSet("kaon bench ns", flag.ExitOnError)
		files := fl.Int("files", 1000000, "files to create")
		dirs := fl.Int("dirs", 1000, "directories to spread them over")
		workers := fl.Int("workers", 32, "parallel workers")
		data := fl.String("data", "", "data dir of a running server: benchmark through its API (default: in-process)")
		dir := fl.String("dir", "", "in-process: store directory (default: a temp dir)")
		sync := fl.Bool("sync", true, "in-process: durable commits, as the server does by default")
		cpuProfile := fl.String("cpuprofile", "", "in-process: write a Go CPU profile of the run to this file")
		var meta MetaConfig
		meta.bind(fl)
		fl.Parse(args[1:])
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return fail("bench ns", err)
		}
		defer stop()
		cfg := bench.NSConfig{Files: *files, Dirs: *dirs, Workers: *workers, Sync: *sync}
		if *data != "" {
			url, pid, err := serverOf(*data)
			if err != nil {
				return fail("bench ns", err)
			}
			cfg.URL, cfg.ServerPID = url, pid
		} else {
			cfg.Dir = *dir
			if cfg.Dir == "" {
				d, err := os.MkdirTemp("", "kaon-bench-ns-")
				if err != nil {
					return fail("bench ns", err)
				}
				defer os.RemoveAll(d)
				cfg.Dir = d
			}
			if meta.URL != "" {
				cfg.Store = func() (bench.NSStore, error) { return benchActive(meta, cfg.Dir, *files) }
			}
		}
		res, err := bench.Namespace(cfg)
		if err != nil {
			return fail("bench ns", err)
		}
		bench.PrintNamespace(os.Stdout, cfg, res)
	case "fsck":
		fl := flag.NewFlagSet("kaon bench fsck", flag.ExitOnError)
		var cfg bench.FsckConfig
		fl.StringVar(&cfg.Dir, "data", "", "work directory (populated on first use, reused after)")
		fl.StringVar(&cfg.Stripes, "stripes", "", "parent of the filesystems (default DATA/fs; a tmpfs such as /dev/shm/x holds a million stripes cheaply)")
		fl.IntVar(&cfg.Files, "files", 1000000, "files in the namespace")
		fl.IntVar(&cfg.Dirs, "dirs", 1000, "directories to spread them over")
		fl.IntVar(&cfg.Filesystems, "filesystems", 4, "filesystems of the storage server")
		fl.StringVar(&cfg.Layout, "layout", "plain", "layout of the files (plain: one stripe each)")
		fl.IntVar(&cfg.Runs, "runs", 3, "unthrottled runs (the median is reported)")
		fl.BoolVar(&cfg.Throttled, "throttled", true, "one more run at the default rates (scan_ns_rate per filesystem, --fsck-rate)")
		fl.Parse(args[1:])
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
	case "token":
		fl := flag.NewFlagSet("kaon bench token", flag.ExitOnError)
		data := fl.String("data", defaultDataDir(), "data dir of the running server (endpoints.json); it must accept tokens (--auth unix,token)")
		method := fl.String("method", "HEAD", "HEAD (answered by the namespace server) or GET (answered with a redirect)")
		n := fl.Int("requests", 20000, "requests per round")
		workers := fl.Int("workers", 8, "concurrent clients (kept-alive connections)")
		rounds := fl.Int("rounds", 5, "rounds with and without a token, alternating")
		user := fl.String("user", "65534", "local user the token acts as")
		fl.Parse(args[1:])
		url, _, err := serverOf(*data)
		if err != nil {
			return fail("bench token", err)
		}
		cfg := bench.TokenConfig{URL: url, Method: strings.ToUpper(*method), Requests: *n, Workers: *workers, Rounds: *rounds, User: *user}
		res, err := bench.Token(cfg)
		if err != nil {
			return fail("bench token", err)
		}
		bench.PrintToken(os.Stdout, cfg, res)
	default:
		fmt.Fprintf(os.Stderr, "kaon bench: unknown benchmark %q\n", args[0])
		return 2
	}
	return 0
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

func (f *rawDirFlag) String() string { return fmt.Sprint(*f) }

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

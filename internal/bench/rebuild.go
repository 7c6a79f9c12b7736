package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// RebuildConfig configures `kaon bench rebuild`: Files files of Size
// bytes, their layouts taken in turn from Layouts (plain or replicas:
// their stripes are written directly, no upload), over Filesystems
// filesystems of one storage server; then a namespace server and a
// storage server (processes of their own) run, the directory of
// filesystem 1 goes away (the storage server reports it offline, as a
// disk gone) and it is declared lost. The run times its rebuild: until no
// file is one failure from loss any more (the rebuild moves those
// first), and until the filesystem is empty. Every run populates Dir
// anew (a rebuild consumes its data).
type RebuildConfig struct {
	Kaon        string
	Dir         string
	Stripes     string // the filesystems' parent (default Dir/fs)
	Files       int
	Dirs        int
	Filesystems int
	Size        int
	Layouts     []string
	Parallel    int // rebuild.parallel (0: the default)
	Runs        int
}

// RebuildRun is one rebuild.
type RebuildRun struct {
	Populate time.Duration
	Stripes  int64         // stripes the rebuild recreated
	Critical int64         // files one failure from loss when it started
	Safe     time.Duration // from lost until none is one failure from loss (0: none was)
	Empty    time.Duration // from lost until the filesystem is empty
	MgmCPU   time.Duration
	FstCPU   time.Duration
}

// Rebuild runs cfg.Runs rebuilds.
func Rebuild(cfg RebuildConfig, out io.Writer) ([]RebuildRun, error) {
	if cfg.Stripes == "" {
		cfg.Stripes = filepath.Join(cfg.Dir, "fs")
	}
	var ls []layout.Layout
	for _, s := range cfg.Layouts {
		l, err := layout.Parse(s)
		if err != nil {
			return nil, err
		}
		if l.Stripes() > cfg.Filesystems-1 {
			return nil, fmt.Errorf("layout %s needs %d filesystems besides the lost one", l, l.Stripes())
		}
		ls = append(ls, l)
	}
	var runs []RebuildRun
	for i := range cfg.Runs {
		for _, d := range []string{filepath.Join(cfg.Dir, "mgm"), filepath.Join(cfg.Dir, "fst"), cfg.Stripes} {
			if err := os.RemoveAll(d); err != nil {
				return runs, err
			}
		}
		t0 := time.Now()
		if err := populate(cfg.Dir, cfg.Stripes, cfg.Files, cfg.Dirs, cfg.Filesystems, ls, cfg.Size); err != nil {
			return runs, fmt.Errorf("populate: %w", err)
		}
		r, err := rebuildRun(cfg)
		if err != nil {
			return runs, fmt.Errorf("run %d: %w", i+1, err)
		}
		r.Populate = time.Since(t0) - r.Empty
		fmt.Fprintf(out, "  run %d: %d stripes rebuilt, safe after %v, empty after %v\n", i+1, r.Stripes, r.Safe.Round(time.Millisecond),
			r.Empty.Round(time.Millisecond))
		runs = append(runs, r)
	}
	return runs, nil
}

// rebuildRun starts both servers, loses filesystem 1 and times its
// rebuild.
func rebuildRun(cfg RebuildConfig) (RebuildRun, error) {
	var r RebuildRun
	mgmDir := filepath.Join(cfg.Dir, "mgm")
	mgm, err := startKaon(cfg.Kaon, mgmDir, "mgm", "--data", mgmDir, "--http", "127.0.0.1:0", "--audit-log", "", "--rebuild-after", "0")
	if err != nil {
		return r, err
	}
	defer mgm.stop()
	fstDir := filepath.Join(cfg.Dir, "fst")
	args := []string{"fst", "--mgm", mgm.ep.HTTP, "--key", filepath.Join(mgmDir, "keys", "capability.key"), "--node", benchNode,
		"--http", "127.0.0.1:0", "--data", fstDir, "--latency-probe", "0"}
	for i := range cfg.Filesystems {
		args = append(args, "--fs", filepath.Join(cfg.Stripes, fmt.Sprintf("fs%02d", i+1)))
	}
	fst, err := startKaon(cfg.Kaon, fstDir, args...)
	if err != nil {
		return r, err
	}
	defer fst.stop()
	api := client.New(mgm.ep.HTTP)
	ctx := context.Background()
	if err := waitFs(api, time.Minute, func(fss []nsapi.Filesystem) bool { return countBooted(fss) == cfg.Filesystems }); err != nil {
		return r, fmt.Errorf("booting: %w", err)
	}
	if cfg.Parallel > 0 {
		if err := api.ConfigFilesystem(ctx, 1, "rebuild.parallel", strconv.Itoa(cfg.Parallel)); err != nil {
			return r, err
		}
	}
	root := filepath.Join(cfg.Stripes, "fs01")
	if err := os.Rename(root, root+".lost"); err != nil {
		return r, err
	}
	defer os.Rename(root+".lost", root)
	if err := waitFs(api, time.Minute, func(fss []nsapi.Filesystem) bool { return len(fss) > 0 && !fss[0].DownSince.IsZero() }); err != nil {
		return r, fmt.Errorf("fs 1 gone: %w", err)
	}
	mc, fc := mgm.cpu(), fst.cpu()
	t0 := time.Now()
	if err := api.ConfigFilesystem(ctx, 1, "configstatus", "lost"); err != nil {
		return r, err
	}
	for {
		st, err := api.FsStatus(ctx, 1)
		if err != nil {
			return r, err
		}
		if st.Risk != nil {
			r.Critical = max(r.Critical, st.Risk.Critical.Files) // as the rebuild's scan found them
		}
		if st.Drain == "empty" {
			r.Empty, r.Stripes = time.Since(t0), st.FilesMoved
			if !st.SafeAt.IsZero() {
				r.Safe = st.SafeAt.Sub(t0)
			}
			if len(st.Failures) > 0 {
				return r, fmt.Errorf("rebuild failures: %s", st.Failures[0].Reason)
			}
			break
		}
		if time.Since(t0) > 24*time.Hour {
			return r, fmt.Errorf("no end within a day: %s", st.DrainPhase)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.MgmCPU, r.FstCPU = mgm.cpu()-mc, fst.cpu()-fc
	return r, nil
}

func countBooted(fss []nsapi.Filesystem) int {
	n := 0
	for _, f := range fss {
		if f.BootStatus == "booted" {
			n++
		}
	}
	return n
}

// waitFs polls fs ls until ok holds, for at most d.
func waitFs(api *client.Client, d time.Duration, ok func([]nsapi.Filesystem) bool) error {
	deadline := time.Now().Add(d)
	for {
		fss, err := api.Filesystems(context.Background())
		if err == nil && ok(fss) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v (%v)", d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// PrintRebuild prints the runs with the load average.
func PrintRebuild(w io.Writer, cfg RebuildConfig, runs []RebuildRun) {
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(w, "rebuild of fs 1 of %d: %d files of %d bytes, layouts %s in turn (%s), load %s", cfg.Filesystems, cfg.Files, cfg.Size,
		strings.Join(cfg.Layouts, ","), cfg.Stripes, load)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tstripes\tcritical at start\tsafe after\tempty after\tstripes/s\tmgm cpu\tfst cpu\tmgm cpu/stripe\t")
	for i, r := range runs {
		per := time.Duration(0)
		if r.Stripes > 0 {
			per = r.MgmCPU / time.Duration(r.Stripes)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%v\t%v\t%.0f\t%v\t%v\t%v\t\n", i+1, r.Stripes, r.Critical, r.Safe.Round(time.Millisecond),
			r.Empty.Round(time.Millisecond), float64(r.Stripes)/r.Empty.Seconds(), r.MgmCPU.Round(10*time.Millisecond),
			r.FstCPU.Round(10*time.Millisecond), per)
	}
	tw.Flush()
}

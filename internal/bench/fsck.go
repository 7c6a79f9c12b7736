package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// FsckConfig configures `kaon bench fsck`: a namespace of Files empty
// files whose stripes (empty, with their metadata) are spread over
// Filesystems filesystems, written once directly (no upload), then
// scanned by a real namespace server and storage server, each its own
// process, with every scan and the namespace pass unthrottled (Runs
// times) and, with Throttled, once at the default rates.
type FsckConfig struct {
	Kaon        string // the kaon binary to run
	Dir         string // namespace (Dir/mgm) and storage server (Dir/fst) data
	Stripes     string // the filesystems' parent directory (default Dir/fs); a tmpfs holds a million stripes cheaply
	Files       int
	Dirs        int
	Filesystems int
	Layout      string
	Runs        int
	Throttled   bool
}

// FsckRun is one scan of everything.
type FsckRun struct {
	Mode     string
	Wall     time.Duration // fsck run until the namespace pass after the scans ended
	Scans    time.Duration // the longest filesystem scan
	Pass     time.Duration // the namespace pass
	MgmCPU   time.Duration // namespace server CPU during the run
	FstCPU   time.Duration // storage server CPU
	Stripes  int64         // stripes the scans walked
	Findings int           // should be 0: the data is consistent
}

const benchNode = "bench"

// Fsck populates cfg.Dir if it is empty and runs the scans.
func Fsck(cfg FsckConfig, out io.Writer) ([]FsckRun, error) {
	if cfg.Stripes == "" {
		cfg.Stripes = filepath.Join(cfg.Dir, "fs")
	}
	l, err := layout.Parse(cfg.Layout)
	if err != nil {
		return nil, err
	}
	if l.Stripes() > cfg.Filesystems {
		return nil, fmt.Errorf("layout %s needs %d filesystems", l, l.Stripes())
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, "mgm", "meta")); err != nil {
		t0 := time.Now()
		fmt.Fprintf(out, "populating %s: %d files, stripes under %s ...\n", cfg.Dir, cfg.Files, cfg.Stripes)
		if err := populate(cfg.Dir, cfg.Stripes, cfg.Files, cfg.Dirs, cfg.Filesystems, []layout.Layout{l}, 0); err != nil {
			return nil, fmt.Errorf("populate: %w", err)
		}
		fmt.Fprintf(out, "populated in %v\n", time.Since(t0).Round(time.Second))
	}
	var runs []FsckRun
	for i := range cfg.Runs {
		r, err := fsckRun(cfg, false)
		if err != nil {
			return runs, fmt.Errorf("unthrottled run %d: %w", i+1, err)
		}
		fmt.Fprintf(out, "  run %d unthrottled: %v\n", i+1, r.Wall.Round(time.Millisecond))
		runs = append(runs, r)
	}
	if cfg.Throttled {
		r, err := fsckRun(cfg, true)
		if err != nil {
			return runs, fmt.Errorf("throttled run: %w", err)
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// populate writes the namespace of dir (files in dirs directories, of
// size bytes each, their layouts taken in turn from layouts: plain or
// replicas when size > 0), the registrations of nfs filesystems under
// stripes and their stripes, directly (the servers are not running).
func populate(dir, stripes string, files, dirs, nfs int, layouts []layout.Layout, size int) error {
	mgm := filepath.Join(dir, "mgm")
	if err := os.MkdirAll(filepath.Join(mgm, "keys"), 0o700); err != nil {
		return err
	}
	if _, err := capability.LoadOrCreateKey(filepath.Join(mgm, "keys", "capability.key")); err != nil {
		return err
	}
	eng, err := pebblekv.Open(filepath.Join(mgm, "meta"), pebblekv.Options{})
	if err != nil {
		return err
	}
	defer eng.Close()
	ns, err := namespace.Open(eng, namespace.Options{})
	if err != nil {
		return err
	}
	stores := make([]backend.Store, nfs)
	for i := range stores {
		id := uint32(i + 1)
		root := filepath.Join(stripes, fmt.Sprintf("fs%02d", id))
		var u [16]byte
		rand.Read(u[:])
		uuid := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
		// No scans but the benchmark's: a scan interval far away, no scrub.
		err := ns.SaveFilesystem(namespace.Filesystem{ID: id, Node: benchNode, Path: root, Group: "default.0", Space: "default",
			ConfigStatus: "rw", UUID: uuid, Initialized: true, Fsck: namespace.FsckSettings{DiskInterval: 10000 * time.Hour, ScrubInterval: -1}})
		if err != nil {
			return err
		}
		st := posix.New(root, posix.Options{IO: backend.IOBuffered})
		if err := st.Initialize(backend.Identity{FsID: id, UUID: uuid}); err != nil {
			return err
		}
		stores[i] = st
	}
	data := make([]byte, size)
	rand.Read(data)
	sums := map[string]string{}
	for _, t := range namespace.DefaultChecksums {
		v, err := checksum.Sum(t, data)
		if err != nil {
			return err
		}
		sums[t] = v
	}
	for _, l := range layouts {
		if l.Kind == layout.EC && size > 0 {
			return fmt.Errorf("layout %s: only empty erasure-coded files are written directly", l)
		}
	}
	next := 0
	place := func(l layout.Layout, _ string) ([]uint32, error) {
		locs := make([]uint32, l.Stripes())
		for i := range locs {
			locs[i] = uint32((next+i)%nfs + 1)
		}
		next++
		return locs, nil
	}
	for d := range dirs {
		if err := ns.Mkdir(namespace.Root, fmt.Sprintf("/bench/d%05d", d), 0o755, true); err != nil {
			return err
		}
	}
	for i := range files {
		p := fmt.Sprintf("/bench/d%05d/f%08d", i%dirs, i)
		l := layouts[i%len(layouts)]
		f, err := ns.BeginCreate(namespace.Root, p, namespace.CreateOptions{Layout: l.String()}, place)
		if err != nil {
			return err
		}
		if _, err := ns.Commit(f.ID, int64(size), sums); err != nil {
			return err
		}
		for s, fsid := range f.Locations {
			w, err := stores[fsid-1].Create(f.ID, backend.CreateOptions{})
			if err != nil {
				return err
			}
			if _, err := w.Write(data); err != nil {
				w.Abort()
				return err
			}
			m := backend.Meta{Fid: f.ID, Stripe: s, Layout: f.Layout, Size: int64(size), Checksums: sums, Path: p}
			if err := w.Finish(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// fsckProc is a kaon server started for the benchmark.
type fsckProc struct {
	cmd  *osexec.Cmd
	log  bytes.Buffer
	done chan struct{}
	ep   struct {
		HTTP    string `json:"http"`
		FSTHTTP string `json:"fst_http"`
	}
}

func startKaon(bin, dir string, args ...string) (*fsckProc, error) {
	os.MkdirAll(dir, 0o755)
	os.Remove(filepath.Join(dir, "endpoints.json"))
	p := &fsckProc{cmd: osexec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "endpoints.json")); err == nil && json.Unmarshal(b, &p.ep) == nil {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("kaon %s exited: %s", args[0], p.log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("kaon %s did not start within 2 minutes", args[0])
		}
	}
}

func (p *fsckProc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// cpu is the process's user+system time (from /proc).
func (p *fsckProc) cpu() time.Duration { return CPUTime(p.cmd.Process.Pid) }

// fsckRun starts both servers, scans everything once and stops them.
func fsckRun(cfg FsckConfig, throttled bool) (FsckRun, error) {
	r := FsckRun{Mode: "unthrottled"}
	rate := "0"
	if throttled {
		r.Mode, rate = "throttled", ""
	}
	args := []string{"mgm", "--data", filepath.Join(cfg.Dir, "mgm"), "--http", "127.0.0.1:0", "--audit-log", ""}
	if rate != "" {
		args = append(args, "--fsck-rate", rate)
	}
	mgm, err := startKaon(cfg.Kaon, filepath.Join(cfg.Dir, "mgm"), args...)
	if err != nil {
		return r, err
	}
	defer mgm.stop()
	fstDir := filepath.Join(cfg.Dir, "fst")
	args = []string{"fst", "--mgm", mgm.ep.HTTP, "--key", filepath.Join(cfg.Dir, "mgm", "keys", "capability.key"), "--node", benchNode,
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
	deadline := time.Now().Add(time.Minute)
	for {
		fss, err := api.Filesystems(ctx)
		booted := 0
		for _, f := range fss {
			if f.BootStatus == "booted" {
				booted++
			}
		}
		if err == nil && booted == cfg.Filesystems {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%d of %d filesystems booted within a minute", booted, cfg.Filesystems)
		}
		time.Sleep(200 * time.Millisecond)
	}
	nsRate := "off"
	if throttled {
		nsRate = "default"
	}
	for i := range cfg.Filesystems {
		if err := api.ConfigFilesystem(ctx, uint32(i+1), "scan_ns_rate", nsRate); err != nil {
			return r, err
		}
	}
	time.Sleep(2 * time.Second) // the settings travel with the next heartbeat
	before, err := api.FsckStat(ctx)
	if err != nil {
		return r, err
	}
	mc, fc := mgm.cpu(), fst.cpu()
	t0 := time.Now()
	if err := api.FsckRun(ctx, 0, false); err != nil {
		return r, err
	}
	if err := api.FsckWait(ctx, before, 0, 24*time.Hour); err != nil {
		return r, err
	}
	r.Wall = time.Since(t0)
	r.MgmCPU, r.FstCPU = mgm.cpu()-mc, fst.cpu()-fc
	st, err := api.FsckStat(ctx)
	if err != nil {
		return r, err
	}
	for _, f := range st.Filesystems {
		r.Stripes += f.LastSeen
		r.Scans = max(r.Scans, f.LastEnd.Sub(f.LastStart))
	}
	r.Pass = st.Pass.LastEnd.Sub(st.Pass.LastStart)
	for _, c := range st.Classes {
		r.Findings += c.Count
	}
	return r, nil
}

// PrintFsck prints the runs: the median of the unthrottled ones, each
// run, and the throttled one.
func PrintFsck(w io.Writer, cfg FsckConfig, runs []FsckRun) {
	var load []byte
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Fprintf(w, "fsck of %d files, layout %s over %d filesystems (%s), load %s", cfg.Files, cfg.Layout, cfg.Filesystems,
		cfg.Stripes, load)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\twall\tscans\tns pass\tmgm cpu\tfst cpu\tstripes\tstripes/s\tmgm cpu/stripe\tfindings\t")
	row := func(name string, r FsckRun) {
		perStripe := time.Duration(0)
		if r.Stripes > 0 {
			perStripe = r.MgmCPU / time.Duration(r.Stripes)
		}
		fmt.Fprintf(tw, "%s\t%v\t%v\t%v\t%v\t%v\t%d\t%.0f\t%v\t%d\t\n", name, r.Wall.Round(time.Millisecond), r.Scans.Round(time.Millisecond),
			r.Pass.Round(time.Millisecond), r.MgmCPU.Round(10*time.Millisecond), r.FstCPU.Round(10*time.Millisecond), r.Stripes,
			float64(r.Stripes)/r.Wall.Seconds(), perStripe, r.Findings)
	}
	var un []FsckRun
	for _, r := range runs {
		if r.Mode == "unthrottled" {
			un = append(un, r)
		}
	}
	if len(un) > 0 {
		med := func(get func(FsckRun) time.Duration) time.Duration {
			v := make([]time.Duration, len(un))
			for i, r := range un {
				v[i] = get(r)
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		m := FsckRun{Wall: med(func(r FsckRun) time.Duration { return r.Wall }), Scans: med(func(r FsckRun) time.Duration { return r.Scans }),
			Pass: med(func(r FsckRun) time.Duration { return r.Pass }), MgmCPU: med(func(r FsckRun) time.Duration { return r.MgmCPU }),
			FstCPU: med(func(r FsckRun) time.Duration { return r.FstCPU }), Stripes: un[0].Stripes, Findings: un[0].Findings}
		row(fmt.Sprintf("unthrottled (median of %d)", len(un)), m)
	}
	for i, r := range runs {
		row(fmt.Sprintf("%s #%d", r.Mode, i+1), r)
	}
	tw.Flush()
}

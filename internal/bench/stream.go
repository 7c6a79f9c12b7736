package bench

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/kaon-storage/kaon/internal/directio"
)

// StreamConfig configures `kaon bench stream`.
type StreamConfig struct {
	URL       string // namespace HTTP endpoint
	ServerPID int    // sampled for peak RSS and CPU time (0: skip)
	// RawDir is the directory on the same disk for the raw baselines
	// (raw-direct and raw) when RawDirs is empty.
	RawDir string
	// RawDirs are named directories for raw baselines instead (buffered +
	// fsync only), e.g. directories of a ceph-fuse mount with the layouts
	// of the spaces measured: rows raw:NAME.
	RawDirs []RawDir
	// Spaces, when not empty, puts each layout's files on each of these
	// spaces (sys.forced.space): rows SPACE/LAYOUT, or SPACE with one
	// layout. A space row compares with the raw row whose NAME is the
	// space's name or ends it after a '-' (space cephfs-rep-4M and rados-rep-4M
	// with raw:rep-4M), else with the first raw row.
	Spaces     []string
	Layouts    []string // e.g. plain, replica:2, ec:4+2
	Streams    int      // parallel streams (one file each)
	Size       int64    // bytes per stream
	Rounds     int      // every row measured this often, the order reversed every other round; medians printed
	Pause      time.Duration
	Fsync      bool   // fsync raw files (match the server's --sync)
	Checksums  string // sys.forced.checksums for the benchmark dirs ("" = server default)
	DropCaches bool   // drop the page cache before read phases (root)
	Ops        []string
	// CPUPids are other processes whose CPU time is the node's cost too
	// (ceph-fuse): counted per GiB moved in a column of their own.
	CPUPids []int
	// Progress, if not nil, gets a line per row and round as they finish.
	Progress io.Writer
}

// RawDir is a named directory for a raw baseline.
type RawDir struct{ Name, Dir string }

// Row is one line of the stream table: medians over the rounds.
type Row struct {
	Target string // raw, raw-direct, raw:NAME, LAYOUT, SPACE or SPACE/LAYOUT
	Raw    bool
	Op     string
	Summary
	Rounds []Summary
	RSS    int64
	Ratio  float64 // aggregate / the raw row's aggregate for the same op
	// TailVsRaw is this row's Tail (p99/avg) over its raw row's.
	TailVsRaw float64
	// ServerCPU and OtherCPU are the CPU seconds the server and CPUPids
	// used per GiB moved.
	ServerCPU, OtherCPU float64
	rawRef              string
}

// target is one thing measured: a raw directory or a Kaon directory.
type target struct {
	name   string
	raw    bool
	direct bool   // raw with O_DIRECT
	dir    string // raw: local directory; Kaon: namespace directory
	layout string
	space  string
	rawRef string // Kaon: the raw target compared with
}

// patternReader yields n bytes from a random block, shifted per stream so
// no two streams send identical data.
type patternReader struct {
	block []byte
	off   int
	left  int64
}

func (p *patternReader) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	n := 0
	for n < len(b) {
		c := copy(b[n:], p.block[p.off:])
		n += c
		p.off = (p.off + c) % len(p.block)
	}
	p.left -= int64(n)
	return n, nil
}

// targets lists what cfg measures.
func targets(cfg StreamConfig) []target {
	var ts []target
	if len(cfg.RawDirs) == 0 {
		// raw is the reference: buffered writes + fsync, as an application
		// writes. raw-direct writes with O_DIRECT like the storage servers
		// do on local disks (package directio), to show what the disk takes.
		ts = append(ts, target{name: "raw-direct", raw: true, direct: true, dir: cfg.RawDir},
			target{name: "raw", raw: true, dir: cfg.RawDir})
	}
	for _, r := range cfg.RawDirs {
		ts = append(ts, target{name: "raw:" + r.Name, raw: true, dir: r.Dir})
	}
	firstRaw := ""
	for _, t := range ts {
		if !t.direct {
			firstRaw = t.name
			break
		}
	}
	spaces := cfg.Spaces
	if len(spaces) == 0 {
		spaces = []string{""}
	}
	for _, sp := range spaces {
		ref := firstRaw
		for _, r := range cfg.RawDirs {
			if sp == r.Name || strings.HasSuffix(sp, "-"+r.Name) {
				ref = "raw:" + r.Name
				break
			}
		}
		for _, l := range cfg.Layouts {
			name, dir := l, "/bench-stream/"+strings.NewReplacer(":", "-", "+", "-").Replace(l)
			switch {
			case sp != "" && len(cfg.Layouts) == 1:
				name, dir = sp, "/bench-stream/"+sp
			case sp != "":
				name, dir = sp+"/"+l, "/bench-stream/"+sp+dir[len("/bench-stream"):]
			}
			ts = append(ts, target{name: name, dir: dir, layout: l, space: sp, rawRef: ref})
		}
	}
	// Each raw target right before the targets compared with it, so that
	// a drift of the machine's load between them stays small.
	out := make([]target, 0, len(ts))
	done := make([]bool, len(ts))
	for i, t := range ts {
		if !t.raw || done[i] {
			continue
		}
		out, done[i] = append(out, t), true
		for j, k := range ts {
			if !done[j] && !k.raw && k.rawRef == t.name {
				out, done[j] = append(out, k), true
			}
		}
	}
	for i, t := range ts {
		if !done[i] {
			out = append(out, t)
		}
	}
	return out
}

// Stream runs the write and read phases of every target, Rounds times.
func Stream(cfg StreamConfig) ([]Row, error) {
	if cfg.Rounds < 1 {
		cfg.Rounds = 1
	}
	if len(cfg.Ops) == 0 {
		cfg.Ops = []string{"write", "read"}
	}
	if !slices.Equal(cfg.Ops, []string{"write", "read"}) && !slices.Equal(cfg.Ops, []string{"write"}) {
		return nil, fmt.Errorf("phases %q: want write,read or write (reads read what the writes wrote)", strings.Join(cfg.Ops, ","))
	}
	block := make([]byte, 1<<20)
	_, _ = rand.Read(block)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Streams * 2, DisableCompression: true,
		WriteBufferSize: 256 << 10, ReadBufferSize: 256 << 10}}
	ts := targets(cfg)
	for _, t := range ts {
		if t.raw {
			if err := os.MkdirAll(t.dir, 0o755); err != nil {
				return nil, err
			}
		}
	}
	if len(cfg.RawDirs) == 0 {
		defer os.RemoveAll(cfg.RawDir)
	}
	rounds := map[string][]measured{} // by target + " " + op
	for r := 0; r < cfg.Rounds; r++ {
		order := append([]target(nil), ts...)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			if err := prepare(client, cfg, t); err != nil {
				return nil, err
			}
			for _, op := range cfg.Ops {
				if cfg.Pause > 0 {
					time.Sleep(cfg.Pause)
				}
				if op == "read" && cfg.DropCaches {
					dropCaches()
				}
				m, err := runPhase(client, cfg, t, op, block)
				if err != nil {
					return nil, err
				}
				rounds[t.name+" "+op] = append(rounds[t.name+" "+op], m)
				if cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "round %d %s %s: avg %.2fs p99 %.2fs max %.2fs p99/avg %.2f aggregate %.1f MiB/s (load %s)\n",
						r+1, t.name, op, m.s.Mean.Seconds(), m.s.P99.Seconds(), m.s.Max.Seconds(), m.s.Tail(), m.s.AggregateMiBs, loadAvg())
				}
			}
			cleanup(client, cfg, t)
		}
	}
	var rows []Row
	for _, t := range ts {
		for _, op := range cfg.Ops {
			ms := rounds[t.name+" "+op]
			row := Row{Target: t.name, Raw: t.raw, Op: op, rawRef: t.rawRef}
			var scpu, ocpu []float64
			var rss []float64
			for _, m := range ms {
				row.Rounds = append(row.Rounds, m.s)
				gib := float64(cfg.Size) * float64(cfg.Streams) / (1 << 30)
				scpu = append(scpu, m.serverCPU.Seconds()/gib)
				ocpu = append(ocpu, m.otherCPU.Seconds()/gib)
				rss = append(rss, float64(m.rss))
			}
			row.Summary = medianSummary(row.Rounds)
			row.RSS = int64(Median(rss))
			if cfg.ServerPID > 0 {
				row.ServerCPU = Median(scpu)
			}
			if len(cfg.CPUPids) > 0 {
				row.OtherCPU = Median(ocpu)
			}
			rows = append(rows, row)
		}
	}
	compareWithRaw(rows)
	return rows, nil
}

// compareWithRaw fills Ratio and TailVsRaw: each row against its raw
// reference row for the same op (a raw row against the raw row).
func compareWithRaw(rows []Row) {
	byName := map[string]Row{}
	ref := ""
	for _, r := range rows {
		byName[r.Target+" "+r.Op] = r
		if r.Raw && ref == "" && r.Target != "raw-direct" {
			ref = r.Target
		}
	}
	for i := range rows {
		name := rows[i].rawRef
		if rows[i].Raw {
			name = ref
			if rows[i].Target != "raw-direct" {
				name = rows[i].Target
			}
		}
		raw, ok := byName[name+" "+rows[i].Op]
		if !ok {
			continue
		}
		if raw.AggregateMiBs > 0 {
			rows[i].Ratio = rows[i].AggregateMiBs / raw.AggregateMiBs
		}
		if t := raw.Tail(); t > 0 {
			rows[i].TailVsRaw = rows[i].Tail() / t
		}
	}
}

type measured struct {
	s                   Summary
	serverCPU, otherCPU time.Duration
	rss                 int64
}

// prepare makes t's directory (a Kaon one with its layout, space and
// checksums).
func prepare(client *http.Client, cfg StreamConfig, t target) error {
	if t.raw {
		return nil
	}
	if err := apiPost(client, cfg.URL, "mkdir", map[string]any{"path": t.dir, "parents": true}); err != nil {
		return err
	}
	attrs := [][2]string{{"sys.forced.layout", t.layout}}
	if t.space != "" {
		attrs = append(attrs, [2]string{"sys.forced.space", t.space})
	}
	if cfg.Checksums != "" {
		attrs = append(attrs, [2]string{"sys.forced.checksums", cfg.Checksums})
	}
	for _, a := range attrs {
		if err := apiPost(client, cfg.URL, "attr/set", map[string]any{"path": t.dir, "name": a[0], "value": a[1]}); err != nil {
			return err
		}
	}
	return nil
}

// cleanup removes what a round of t wrote.
func cleanup(client *http.Client, cfg StreamConfig, t target) {
	if !t.raw {
		_ = apiPost(client, cfg.URL, "rm", map[string]any{"path": t.dir, "recursive": true})
		return
	}
	for i := 0; i < cfg.Streams; i++ {
		_ = os.Remove(rawFile(t, i))
	}
}

func rawFile(t target, i int) string {
	return filepath.Join(t.dir, fmt.Sprintf("%s-s%d", strings.NewReplacer(":", "-").Replace(t.name), i))
}

// runPhase runs cfg.Streams parallel streams of op on t.
func runPhase(client *http.Client, cfg StreamConfig, t target, op string, block []byte) (measured, error) {
	var rss *RSSSampler
	if cfg.ServerPID > 0 && !t.raw {
		rss = SampleRSS(cfg.ServerPID)
	}
	cpu0 := CPUTime(cfg.ServerPID)
	var other0 time.Duration
	for _, p := range cfg.CPUPids {
		other0 += CPUTime(p)
	}
	ds := make([]time.Duration, cfg.Streams)
	errs := make([]error, cfg.Streams)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < cfg.Streams; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			t0 := time.Now()
			src := &patternReader{block: block, off: (i * 4099) % len(block), left: cfg.Size}
			switch {
			case t.raw && op == "write":
				errs[i] = rawWrite(rawFile(t, i), src, cfg.Fsync, t.direct)
			case t.raw:
				errs[i] = rawRead(rawFile(t, i), cfg.Size)
			case op == "write":
				errs[i] = httpPut(client, cfg.URL, fmt.Sprintf("%s/s%d", t.dir, i), src, cfg.Size)
			default:
				errs[i] = httpGet(client, cfg.URL, fmt.Sprintf("%s/s%d", t.dir, i), cfg.Size)
			}
			ds[i] = time.Since(t0)
		}(i)
	}
	wg.Wait()
	m := measured{s: Summarize(ds, cfg.Size, time.Since(start)), serverCPU: CPUTime(cfg.ServerPID) - cpu0}
	for _, p := range cfg.CPUPids {
		m.otherCPU += CPUTime(p)
	}
	m.otherCPU -= other0
	if rss != nil {
		m.rss = rss.Stop()
	}
	for _, err := range errs {
		if err != nil {
			return m, fmt.Errorf("%s %s: %w", t.name, op, err)
		}
	}
	return m, nil
}

// PrintStream writes the table: per target and op the medians over the
// rounds of the per-stream figures, the tail (p99/avg) and how it and the
// aggregate compare with the raw row, and the CPU cost per GiB.
func PrintStream(w io.Writer, cfg StreamConfig, rows []Row) {
	sums := cfg.Checksums
	if sums == "" {
		sums = "server default"
	}
	fmt.Fprintf(w, "%d streams x %d MiB per target, checksums: %s, %d round(s), medians\n", cfg.Streams, cfg.Size>>20, sums, max(cfg.Rounds, 1))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\top\tavg time s\tsigma s\tavg MiB/s\tp99 time s\tmax time s\taggregate MiB/s\tvs raw\tp99/avg\ttail vs raw\tserver CPU s/GiB\tother CPU s/GiB\tserver peak RSS MiB\t")
	opt := func(v float64, f string) string {
		if v == 0 {
			return "-"
		}
		return fmt.Sprintf(f, v)
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.1f\t%.2f\t%.2f\t%.1f\t%s\t%.2f\t%s\t%s\t%s\t%s\t\n", r.Target, r.Op, r.Mean.Seconds(), r.Sigma.Seconds(),
			r.MeanMiBs, r.P99.Seconds(), r.Max.Seconds(), r.AggregateMiBs, opt(r.Ratio, "%.2f"), r.Tail(), opt(r.TailVsRaw, "%.2f"),
			opt(r.ServerCPU, "%.2f"), opt(r.OtherCPU, "%.2f"), opt(float64(r.RSS)/(1<<20), "%.0f"))
	}
	tw.Flush()
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

func dropCaches() {
	_ = exec("sync")
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200)
}

// rawWrite writes src to p in 1 MiB writes, buffered or with O_DIRECT,
// and fsyncs if asked.
func rawWrite(p string, src io.Reader, fsync, direct bool) (err error) {
	var f interface {
		io.WriteCloser
		Sync() error
	}
	finish := func() error { return nil }
	if direct {
		_ = os.Remove(p)
		d, err := directio.Create(p, 0o644, true)
		if err != nil {
			return err
		}
		f, finish = d, d.Finish
	} else if f, err = os.Create(p); err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	// Both ends wrapped: otherwise io.CopyBuffer hands the copy to
	// os.File.ReadFrom, which writes in 32 KiB pieces.
	if _, err = io.CopyBuffer(struct{ io.Writer }{f}, struct{ io.Reader }{src}, make([]byte, 1<<20)); err != nil {
		return err
	}
	if err = finish(); err == nil && fsync {
		err = f.Sync()
	}
	return err
}

func rawRead(p string, size int64) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{f}, make([]byte, 1<<20)) // 1 MiB reads, see rawWrite
	if err == nil && n != size {
		err = fmt.Errorf("%s: read %d bytes, want %d", p, n, size)
	}
	return err
}

func escape(p string) string { return (&urlPath{p}).String() }

func httpPut(c *http.Client, base, p string, body io.Reader, size int64) error {
	noFollow := *c
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, _ := http.NewRequest(http.MethodPut, base+escape(p), http.NoBody)
	resp, err := noFollow.Do(req)
	if err != nil {
		return err
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect {
		return fmt.Errorf("PUT %s: %d %s", p, resp.StatusCode, msg)
	}
	req, _ = http.NewRequest(http.MethodPut, resp.Header.Get("Location"), body)
	req.ContentLength = size
	resp, err = c.Do(req)
	if err != nil {
		return err
	}
	msg, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("PUT %s: %d %s", p, resp.StatusCode, msg)
	}
	return nil
}

func httpGet(c *http.Client, base, p string, size int64) error {
	resp, err := c.Get(base + escape(p))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %d %s", p, resp.StatusCode, msg)
	}
	n, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{resp.Body}, make([]byte, 1<<20))
	if err == nil && n != size {
		err = fmt.Errorf("GET %s: %d bytes, want %d", p, n, size)
	}
	return err
}

func apiPost(c *http.Client, base, route string, args map[string]any) error {
	b, _ := json.Marshal(args)
	resp, err := c.Post(base+"/api/v1/"+route, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body) // drained, so the connection is reused
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %s", route, resp.StatusCode, msg)
	}
	return nil
}

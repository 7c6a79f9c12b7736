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
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/kaon-storage/kaon/internal/directio"
)

// StreamConfig configures `kaon bench stream`.
type StreamConfig struct {
	URL        string   // namespace HTTP endpoint
	ServerPID  int      // sampled for peak RSS (0: skip)
	RawDir     string   // directory on the same disk for the raw baseline
	Layouts    []string // e.g. plain, replica:2, ec:4+2
	Streams    int      // parallel streams (one file each)
	Size       int64    // bytes per stream
	Fsync      bool     // fsync raw files (match the server's --sync)
	Checksums  string   // sys.forced.checksums for the benchmark dirs ("" = server default)
	DropCaches bool     // drop the page cache before read phases (root)
	Out        io.Writer
}

// Row is one line of the stream table.
type Row struct {
	Layout, Op string
	Summary
	RSS   int64
	Ratio float64 // aggregate / raw aggregate for the same op
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

// Stream runs the write and read phases for the raw disk and each layout.
func Stream(cfg StreamConfig) ([]Row, error) {
	block := make([]byte, 1<<20)
	_, _ = rand.Read(block)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Streams * 2, DisableCompression: true,
		WriteBufferSize: 256 << 10, ReadBufferSize: 256 << 10}}
	if err := os.MkdirAll(cfg.RawDir, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(cfg.RawDir)
	var rows []Row
	raw := map[string]float64{}
	// raw is the reference: buffered writes + fsync, as an application
	// writes. raw-direct writes with O_DIRECT like the storage servers do
	// (package directio), to show what the disk itself takes.
	for _, layout := range append([]string{"raw-direct", "raw"}, cfg.Layouts...) {
		isRaw := strings.HasPrefix(layout, "raw")
		var dir string
		if !isRaw {
			dir = "/bench-stream/" + strings.NewReplacer(":", "-", "+", "-").Replace(layout)
			if err := apiPost(client, cfg.URL, "mkdir", map[string]any{"path": dir, "parents": true}); err != nil {
				return nil, err
			}
			if err := apiPost(client, cfg.URL, "attr/set", map[string]any{"path": dir, "name": "sys.forced.layout", "value": layout}); err != nil {
				return nil, err
			}
			if cfg.Checksums != "" {
				if err := apiPost(client, cfg.URL, "attr/set", map[string]any{"path": dir, "name": "sys.forced.checksums", "value": cfg.Checksums}); err != nil {
					return nil, err
				}
			}
		}
		for _, op := range []string{"write", "read"} {
			if op == "read" && cfg.DropCaches {
				dropCaches()
			}
			var rss *RSSSampler
			if cfg.ServerPID > 0 && !isRaw {
				rss = SampleRSS(cfg.ServerPID)
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
					case isRaw && op == "write":
						errs[i] = rawWrite(filepath.Join(cfg.RawDir, layout+fmt.Sprint(i)), src, cfg.Fsync, layout == "raw-direct")
					case isRaw:
						errs[i] = rawRead(filepath.Join(cfg.RawDir, layout+fmt.Sprint(i)), cfg.Size)
					case op == "write":
						errs[i] = httpPut(client, cfg.URL, fmt.Sprintf("%s/s%d", dir, i), src, cfg.Size)
					default:
						errs[i] = httpGet(client, cfg.URL, fmt.Sprintf("%s/s%d", dir, i), cfg.Size)
					}
					ds[i] = time.Since(t0)
				}(i)
			}
			wg.Wait()
			wall := time.Since(start)
			row := Row{Layout: layout, Op: op, Summary: Summarize(ds, cfg.Size, wall)}
			if rss != nil {
				row.RSS = rss.Stop()
			}
			for _, err := range errs {
				if err != nil {
					return rows, fmt.Errorf("%s %s: %w", layout, op, err)
				}
			}
			if layout == "raw" {
				raw[op] = row.AggregateMiBs
			}
			rows = append(rows, row)
		}
		if !isRaw {
			_ = apiPost(client, cfg.URL, "rm", map[string]any{"path": dir, "recursive": true})
		}
	}
	for i := range rows {
		if r := raw[rows[i].Op]; r > 0 {
			rows[i].Ratio = rows[i].AggregateMiBs / r
		}
	}
	return rows, nil
}

// PrintStream writes the table.
func PrintStream(w io.Writer, cfg StreamConfig, rows []Row) {
	sums := cfg.Checksums
	if sums == "" {
		sums = "server default"
	}
	fmt.Fprintf(w, "%d streams x %d MiB per layout, checksums: %s\n", cfg.Streams, cfg.Size>>20, sums)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "layout\top\tavg time s\tsigma s\tavg MiB/s\tp99 time s\tmax time s\taggregate MiB/s\tvs raw\tserver peak RSS MiB\t")
	for _, r := range rows {
		rss := "-"
		if r.RSS > 0 {
			rss = fmt.Sprintf("%.0f", float64(r.RSS)/(1<<20))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.1f\t%.2f\t%.2f\t%.1f\t%.2f\t%s\t\n", r.Layout, r.Op, r.Mean.Seconds(), r.Sigma.Seconds(),
			r.MeanMiBs, r.P99.Seconds(), r.Max.Seconds(), r.AggregateMiBs, r.Ratio, rss)
	}
	tw.Flush()
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

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// IO500Config sizes the IO500 phases run by IO500. The official
// benchmark runs each write phase for at least 300 s (stonewalled) on a
// cluster; here every phase does a fixed amount of work so a run on one
// client takes what its sizes ask.
type IO500Config struct {
	Dir        string // a fresh directory is made under it and removed at the end
	Procs      int    // parallel processes (fio jobs) or workers (metadata phases)
	EasyBytes  int64  // ior-easy: bytes each process writes to a file of its own
	HardWrites int    // ior-hard: 47008-byte writes each process makes to the one shared file
	EasyFiles  int    // mdtest-easy: empty files each process creates in a directory of its own
	HardFiles  int    // mdtest-hard: 3901-byte files each process creates in the one shared directory
	DropCaches bool   // drop the kernel's caches before every read and stat phase (root)
	Fio        string // fio binary (default "fio" on PATH)
	Progress   io.Writer
}

// IO500 transfer and file sizes, as the benchmark fixes them.
const (
	io500HardXfer = 47008 // ior-hard: bytes per write, interleaved between processes in one file
	io500HardFile = 3901  // mdtest-hard: bytes per file
	io500EasyXfer = 2 << 20
)

// IO500Phase is one measured phase. Bandwidth phases report GiB/s,
// metadata phases kIOPS (thousands of operations per second).
type IO500Phase struct {
	Name  string
	BW    bool    // a bandwidth phase (GiB/s), else metadata (kIOPS)
	Value float64 // GiB/s or kIOPS
	Ops   int64   // bytes (bandwidth) or operations (metadata)
	Time  time.Duration
}

// IO500Result is a run's phases in IO500's order and its scores.
type IO500Result struct {
	Phases        []IO500Phase
	BW, MD, Score float64
}

// IO500Score computes IO500's scores from phases: the bandwidth score is
// the geometric mean of the bandwidth phases (GiB/s), the metadata score
// that of the metadata phases including find (kIOPS), and the score the
// geometric mean of the two. A phase of zero makes its score zero, as in
// IO500 (an invalid phase scores nothing).
func IO500Score(phases []IO500Phase) (bw, md, score float64) {
	geo := func(bwPhases bool) float64 {
		var sum float64
		n := 0
		for _, p := range phases {
			if p.BW != bwPhases {
				continue
			}
			if p.Value <= 0 {
				return 0
			}
			sum += math.Log(p.Value)
			n++
		}
		if n == 0 {
			return 0
		}
		return math.Exp(sum / float64(n))
	}
	bw, md = geo(true), geo(false)
	return bw, md, math.Sqrt(bw * md)
}

// IO500 runs IO500's phases in its order on a fresh directory under
// cfg.Dir: ior-easy and ior-hard with fio, mdtest-easy and mdtest-hard
// and find in process.
func IO500(cfg IO500Config) (IO500Result, error) {
	if cfg.Procs < 1 {
		cfg.Procs = 1
	}
	if cfg.Fio == "" {
		cfg.Fio = "fio"
	}
	root, err := os.MkdirTemp(cfg.Dir, "io500-")
	if err != nil {
		return IO500Result{}, err
	}
	defer os.RemoveAll(root)
	r := io500Run{cfg: cfg, root: root}
	steps := []struct {
		name string
		bw   bool
		run  func() (int64, error)
	}{
		{"ior-easy-write", true, func() (int64, error) { return r.iorEasy("write") }},
		{"mdtest-easy-write", false, func() (int64, error) { return r.mdtest("easy", "write") }},
		{"ior-hard-write", true, func() (int64, error) { return r.iorHard("write") }},
		{"mdtest-hard-write", false, func() (int64, error) { return r.mdtest("hard", "write") }},
		{"find", false, r.find},
		{"ior-easy-read", true, func() (int64, error) { return r.iorEasy("read") }},
		{"mdtest-easy-stat", false, func() (int64, error) { return r.mdtest("easy", "stat") }},
		{"ior-hard-read", true, func() (int64, error) { return r.iorHard("read") }},
		{"mdtest-hard-stat", false, func() (int64, error) { return r.mdtest("hard", "stat") }},
		{"mdtest-easy-delete", false, func() (int64, error) { return r.mdtest("easy", "delete") }},
		{"mdtest-hard-read", false, func() (int64, error) { return r.mdtest("hard", "read") }},
		{"mdtest-hard-delete", false, func() (int64, error) { return r.mdtest("hard", "delete") }},
	}
	var res IO500Result
	for _, s := range steps {
		if !strings.HasSuffix(s.name, "-write") && cfg.DropCaches {
			dropCaches()
		}
		t0 := time.Now()
		n, err := s.run()
		if err != nil {
			return res, fmt.Errorf("%s in %s: %w", s.name, root, err)
		}
		p := IO500Phase{Name: s.name, BW: s.bw, Ops: n, Time: time.Since(t0)}
		if s.bw {
			p.Value = float64(n) / (1 << 30) / p.Time.Seconds()
		} else {
			p.Value = float64(n) / 1e3 / p.Time.Seconds()
		}
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "%-20s %10.4f %s\n", p.Name, p.Value, p.unit())
		}
		res.Phases = append(res.Phases, p)
	}
	res.BW, res.MD, res.Score = IO500Score(res.Phases)
	return res, nil
}

func (p IO500Phase) unit() string {
	if p.BW {
		return "GiB/s"
	}
	return "kIOPS"
}

type io500Run struct {
	cfg  IO500Config
	root string
}

// fio runs fio with args (the JSON report parsed) and returns the bytes
// it moved in all jobs.
func (r *io500Run) fio(args ...string) (int64, error) {
	args = append([]string{"--output-format=json", "--ioengine=psync", "--group_reporting"}, args...)
	out, err := osexec.CommandContext(context.Background(), r.cfg.Fio, args...).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*osexec.ExitError); ok {
			msg = strings.TrimSpace(string(ee.Stderr))
		}
		return 0, fmt.Errorf("fio %s: %w %s", strings.Join(args, " "), err, msg)
	}
	var rep struct {
		Jobs []struct {
			Read struct {
				IOBytes int64 `json:"io_bytes"`
			} `json:"read"`
			Write struct {
				IOBytes int64 `json:"io_bytes"`
			} `json:"write"`
		} `json:"jobs"`
	}
	// fio may print notes before the JSON object
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return 0, fmt.Errorf("fio's report: %w", err)
	}
	var n int64
	for _, j := range rep.Jobs {
		n += j.Read.IOBytes + j.Write.IOBytes
	}
	return n, nil
}

// iorEasy: every process writes (reads) a file of its own, sequentially,
// 2 MiB per call, fsync at the end of the writes.
func (r *io500Run) iorEasy(rw string) (int64, error) {
	dir := filepath.Join(r.root, "ior-easy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	args := []string{"--name=ior-easy", "--directory=" + dir, "--rw=" + rw, "--bs=" + strconv.Itoa(io500EasyXfer),
		"--size=" + strconv.FormatInt(r.cfg.EasyBytes, 10), "--numjobs=" + strconv.Itoa(r.cfg.Procs), "--filename_format=$jobname.$jobnum"}
	if rw == "write" {
		args = append(args, "--end_fsync=1")
	}
	return r.fio(args...)
}

// iorHard: the processes write (read) one shared file in 47008-byte
// pieces, interleaved: process i's k-th piece is at (k*Procs+i)*47008.
func (r *io500Run) iorHard(rw string) (int64, error) {
	dir := filepath.Join(r.root, "ior-hard")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	p := int64(r.cfg.Procs)
	args := []string{"--filename=" + filepath.Join(dir, "file"), "--bs=" + strconv.Itoa(io500HardXfer),
		fmt.Sprintf("--rw=%s:%d", rw, (p-1)*io500HardXfer),
		"--size=" + strconv.FormatInt(p*int64(r.cfg.HardWrites)*io500HardXfer, 10),
		"--io_size=" + strconv.FormatInt(int64(r.cfg.HardWrites)*io500HardXfer, 10), "--fallocate=none"}
	if rw == "write" {
		args = append(args, "--end_fsync=1")
	}
	for i := range p {
		args = append(args, fmt.Sprintf("--name=ior-hard-%d", i), "--offset="+strconv.FormatInt(i*io500HardXfer, 10))
	}
	return r.fio(args...)
}

// mdtest: easy: empty files, a directory per process; hard: 3901-byte
// files, all processes in one directory. Phases: write (create, and for
// hard write, close), stat, read (hard), delete.
func (r *io500Run) mdtest(kind, phase string) (int64, error) {
	files := r.cfg.EasyFiles
	if kind == "hard" {
		files = r.cfg.HardFiles
	}
	data := make([]byte, io500HardFile) // what the writes write; reads use a buffer per worker
	path := func(w, i int) string {
		if kind == "hard" {
			return filepath.Join(r.root, "mdtest-hard", fmt.Sprintf("file.mdtest.%d.%d", w, i))
		}
		return filepath.Join(r.root, "mdtest-easy", fmt.Sprintf("proc%d", w), fmt.Sprintf("file.mdtest.%d.%d", w, i))
	}
	op := func(w, i int, buf []byte) error {
		p := path(w, i)
		switch phase {
		case "write":
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			if kind == "hard" {
				if _, err := f.Write(data); err != nil {
					f.Close()
					return err
				}
			}
			return f.Close()
		case "stat":
			_, err := os.Stat(p)
			return err
		case "read":
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.ReadFull(f, buf)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		case "delete":
			return os.Remove(p)
		}
		return fmt.Errorf("unknown mdtest phase %q", phase)
	}
	if phase == "write" {
		for w := range r.cfg.Procs {
			if err := os.MkdirAll(filepath.Dir(path(w, 0)), 0o755); err != nil {
				return 0, err
			}
		}
	}
	errs := make([]error, r.cfg.Procs)
	var wg sync.WaitGroup
	for w := range r.cfg.Procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, io500HardFile)
			for i := range files {
				if err := op(w, i, buf); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return int64(r.cfg.Procs * files), nil
}

// find walks the whole tree, as IO500's find does: every entry is looked
// at (its name and, for files, its size and time), and those matching
// IO500's pattern (3901 bytes, named *01*) are counted. The rate is of
// entries looked at.
func (r *io500Run) find() (int64, error) {
	var n, match int64
	err := filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		if d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Size() == io500HardFile && strings.Contains(d.Name(), "01") {
			match++
		}
		return nil
	})
	return n, err
}

// PrintIO500 writes the phases and scores as IO500 lists them.
func PrintIO500(w io.Writer, cfg IO500Config, res IO500Result) {
	fmt.Fprintf(w, "io500 in %s: %d processes; ior-easy %d MiB per process (2 MiB writes); ior-hard %d x 47008 B per process, one shared file; mdtest-easy %d empty files per process; mdtest-hard %d x 3901 B files per process, one directory; drop caches %v\n",
		cfg.Dir, cfg.Procs, cfg.EasyBytes>>20, cfg.HardWrites, cfg.EasyFiles, cfg.HardFiles, cfg.DropCaches)
	for _, p := range res.Phases {
		fmt.Fprintf(w, "[RESULT] %-20s %12.4f %-6s : time %8.3f seconds\n", p.Name, p.Value, p.unit(), p.Time.Seconds())
	}
	fmt.Fprintf(w, "[SCORE ] Bandwidth %.6f GiB/s : IOPS %.6f kiops : TOTAL %.6f\n", res.BW, res.MD, res.Score)
}

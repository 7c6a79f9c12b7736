// Command mbench holds the parts of bench/mount/bench.sh a shell does
// badly: timed creates with every operation's latency kept, the time a
// change made in one mount takes to be seen in another, and the plots.
//
//	mbench creates -dir D -files N -dirs P -lat FILE   N empty files, P directories in parallel: files/s; latencies (ns) to FILE
//	mbench vis -a A -b B -n N -kind create|modify -lat FILE   change in A, poll B until seen: median/p99; latencies to FILE
//	mbench plot -o FILE.png -title T NAME=LATFILE...          exceedance curves of latency files (internal/bench.PlotLatency)
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/bench"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: mbench creates|vis|plot ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "creates":
		err = creates(os.Args[2:])
	case "vis":
		err = vis(os.Args[2:])
	case "plot":
		err = plotCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "mbench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// creates makes files empty files spread over dirs directories, one
// worker per directory, and prints the rate over the wall time.
func creates(args []string) error {
	fl := flag.NewFlagSet("creates", flag.ExitOnError)
	dir := fl.String("dir", "", "parent directory (created)")
	files := fl.Int("files", 10000, "files in all")
	dirs := fl.Int("dirs", 1, "directories, one worker each")
	lat := fl.String("lat", "", "append every create's latency (ns) to this file")
	fl.Parse(args)
	if *dir == "" || *dirs < 1 {
		return fmt.Errorf("-dir and -dirs >= 1 are required")
	}
	per := *files / *dirs
	ds := make([][]time.Duration, *dirs)
	errs := make([]error, *dirs)
	for w := range *dirs {
		if err := os.MkdirAll(filepath.Join(*dir, fmt.Sprintf("d%d", w)), 0o755); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := range *dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := filepath.Join(*dir, fmt.Sprintf("d%d", w))
			for i := range per {
				s := time.Now()
				f, err := os.OpenFile(filepath.Join(d, fmt.Sprintf("f%07d", i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				if err == nil {
					err = f.Close()
				}
				if err != nil {
					errs[w] = err
					return
				}
				ds[w] = append(ds[w], time.Since(s))
			}
		}()
	}
	wg.Wait()
	wall := time.Since(t0)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	fmt.Printf("%.1f\n", float64(per**dirs)/wall.Seconds())
	return appendLat(*lat, slices.Concat(ds...))
}

// vis changes a file in mount A n times and measures, each time, how long
// until mount B shows the change: a poller on B starts before the change
// (as a reader waiting for it would), so B's negative or stale cache is
// what the change must get past. create: a new name; modify: new content
// in a file B has read before.
func vis(args []string) error {
	fl := flag.NewFlagSet("vis", flag.ExitOnError)
	a := fl.String("a", "", "directory in the writing mount")
	b := fl.String("b", "", "the same directory in the reading mount")
	n := fl.Int("n", 50, "changes")
	kind := fl.String("kind", "create", "create or modify")
	timeout := fl.Duration("timeout", 30*time.Second, "give up on one change after this long")
	lat := fl.String("lat", "", "append every latency (ns) to this file")
	fl.Parse(args)
	if *a == "" || *b == "" {
		return fmt.Errorf("-a and -b are required")
	}
	var ds []time.Duration
	target := filepath.Join(*a, "vis-modify")
	if *kind == "modify" {
		if err := os.WriteFile(target, []byte("v-1"), 0o644); err != nil {
			return err
		}
		if err := waitSeen(filepath.Join(*b, "vis-modify"), []byte("v-1"), *timeout); err != nil {
			return fmt.Errorf("%s: the initial content never showed: %w", *b, err)
		}
	}
	for i := range *n {
		var pa, pb string
		var want []byte
		switch *kind {
		case "create":
			name := fmt.Sprintf("vis-%d-%d", os.Getpid(), i)
			pa, pb = filepath.Join(*a, name), filepath.Join(*b, name)
			os.Stat(pb) // B looks first: a negative entry is what it may cache
		case "modify":
			pa, pb, want = target, filepath.Join(*b, "vis-modify"), []byte(fmt.Sprintf("v%04d", i))
		default:
			return fmt.Errorf("-kind %q: want create or modify", *kind)
		}
		seen := make(chan time.Time, 1)
		start := make(chan struct{})
		go func() {
			close(start)
			deadline := time.Now().Add(*timeout)
			for time.Now().Before(deadline) {
				if isSeen(pb, want) {
					seen <- time.Now()
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
			seen <- time.Time{}
		}()
		<-start
		t0 := time.Now()
		if err := os.WriteFile(pa, want, 0o644); err != nil {
			return err
		}
		t1 := <-seen
		if t1.IsZero() {
			return fmt.Errorf("change %d (%s) not seen in %s within %v", i, pa, pb, *timeout)
		}
		ds = append(ds, t1.Sub(t0))
		time.Sleep(20 * time.Millisecond) // let the mounts settle between samples
	}
	slices.Sort(ds)
	fmt.Printf("%.3f %.3f\n", ms(bench.Percentile(ds, 0.5)), ms(bench.Percentile(ds, 0.99)))
	return appendLat(*lat, ds)
}

// isSeen: p exists (want nil) or holds want.
func isSeen(p string, want []byte) bool {
	if want == nil {
		_, err := os.Stat(p)
		return err == nil
	}
	got, err := os.ReadFile(p)
	return err == nil && bytes.Equal(got, want)
}

func waitSeen(p string, want []byte, timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if isSeen(p, want) {
			return nil
		}
	}
	return fmt.Errorf("not within %v", timeout)
}

func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }

func appendLat(file string, ds []time.Duration) error {
	if file == "" {
		return nil
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, d := range ds {
		fmt.Fprintln(w, int64(d))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func plotCmd(args []string) error {
	fl := flag.NewFlagSet("plot", flag.ExitOnError)
	out := fl.String("o", "", "output file (.png, .svg)")
	title := fl.String("title", "", "title")
	fl.Parse(args)
	var series []bench.Series
	for _, arg := range fl.Args() {
		name, file, ok := strings.Cut(arg, "=")
		if !ok {
			return fmt.Errorf("want NAME=FILE, got %q", arg)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			if os.IsNotExist(err) {
				continue // that file system was not measured
			}
			return err
		}
		var ds []time.Duration
		for _, l := range strings.Fields(string(data)) {
			v, err := strconv.ParseInt(l, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			ds = append(ds, time.Duration(v))
		}
		slices.Sort(ds)
		series = append(series, bench.Series{Name: name, Ds: ds})
	}
	if len(series) == 0 {
		fmt.Fprintf(os.Stderr, "mbench plot: no samples for %s, not drawn\n", *out)
		return nil
	}
	return bench.PlotLatency(*out, *title, series)
}

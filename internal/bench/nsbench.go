package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// NSConfig configures `kaon bench ns` (mdtest-style).
type NSConfig struct {
	Files, Dirs, Workers int
	URL                  string // through the server's API; empty: in-process
	ServerPID            int    // server to read RSS from (API mode)
	// HTTP2 speaks HTTP/2 to the API (h2c for http://, as the mount's
	// session channel does) instead of HTTP/1.1 connections.
	HTTP2 bool
	// Session sends the creates and stats as requests framed on one
	// session stream (/sessions/v1, what the mount's lease subscriptions
	// use) instead of HTTP requests of their own, coalesced into batches
	// unless Unbatched, and adds a phase of null requests on the same
	// stream (the channel's floor). A server before batches takes only
	// the stats (creates go over HTTP, no null phase).
	Session, Unbatched bool
	Dir                string // store directory (in-process mode)
	Sync               bool   // durable commits (in-process mode)
	// Store opens the store of the in-process namespace (default: Pebble
	// in Dir).
	Store func() (NSStore, error)
}

// NSStore is the store of an in-process run.
type NSStore struct {
	Store kv.Store
	Name  string // for the report
	Close func()
	// Report, when set, is called once the files are created; its lines
	// go to the report (a replicated engine's size per file).
	Report func() []string
}

// NSPhase is one phase's result.
type NSPhase struct {
	Name    string
	Ops     int
	Elapsed time.Duration
	// PerFrame is how many requests a frame on the session stream
	// carried on average (0: not on the session stream).
	PerFrame float64
}

// NSResult is the whole run.
type NSResult struct {
	Mode   string
	Phases []NSPhase
	RSS    int64 // resident set of the namespace holder after creates
	Heap   uint64
	Notes  []string // what the store reported once the files were created
}

// nsOps is what a phase calls: in-process or over HTTP.
type nsOps interface {
	mkdir(p string) error
	create(p string) error
	stat(p string) error
	list(p string) (int, error)
	remove(p string) error
}

type localOps struct{ ns *namespace.Namespace }

func (l localOps) mkdir(p string) error { return l.ns.Mkdir(namespace.Root, p, 0o755, true) }
func (l localOps) create(p string) error {
	_, err := l.ns.CreateEmpty(namespace.Root, p, namespace.CreateOptions{Exclusive: true})
	return err
}
func (l localOps) stat(p string) error { _, err := l.ns.Stat(namespace.Root, p); return err }
func (l localOps) list(p string) (int, error) {
	e, err := l.ns.List(namespace.Root, p)
	return len(e), err
}
func (l localOps) remove(p string) error {
	return l.ns.Remove(namespace.Root, p, namespace.RemoveOptions{})
}

type apiOps struct {
	base string
	c    *http.Client
	sess *client.Session // stats (and creates, when the server takes them) on the session stream, when set
	// sessCreate: creates go on the session stream.
	sessCreate bool
}

func (a apiOps) post(route string, args map[string]any) error {
	return apiPost(a.c, a.base, route, args)
}
func (a apiOps) get(route, p string, out any) error {
	resp, err := a.c.Get(a.base + "/api/v1/" + route + "?path=" + url.QueryEscape(p))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %d %s", route, p, resp.StatusCode, msg)
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
func (a apiOps) mkdir(p string) error {
	return a.post("mkdir", map[string]any{"path": p, "parents": true})
}
func (a apiOps) create(p string) error {
	if a.sessCreate {
		_, err := a.sess.Create(context.Background(), p, true, 0)
		return err
	}
	return a.post("touch", map[string]any{"path": p, "exclusive": true})
}
func (a apiOps) stat(p string) error {
	if a.sess != nil {
		_, err := a.sess.Stat(context.Background(), p)
		return err
	}
	return a.get("stat", p, nil)
}
func (a apiOps) list(p string) (int, error) {
	var ents []json.RawMessage
	err := a.get("ls", p, &ents)
	return len(ents), err
}
func (a apiOps) remove(p string) error { return a.post("rm", map[string]any{"path": p}) }

// Namespace runs mkdir, create, stat, list and delete phases.
func Namespace(cfg NSConfig) (NSResult, error) {
	var ops nsOps
	var report func() []string
	res := NSResult{Mode: "in-process"}
	if cfg.URL != "" {
		res.Mode = "server API " + cfg.URL
		t := &http.Transport{MaxIdleConnsPerHost: cfg.Workers * 2}
		if cfg.HTTP2 {
			res.Mode += " over HTTP/2"
			var p http.Protocols
			p.SetHTTP2(true)
			p.SetUnencryptedHTTP2(true)
			t.Protocols = &p
		}
		a := apiOps{base: cfg.URL, c: &http.Client{Transport: t}}
		if cfg.Session {
			s, err := client.New(cfg.URL).OpenSession(context.Background(), client.SessionOptions{Host: "kaon bench ns", Unbatched: cfg.Unbatched})
			if err != nil {
				return res, err
			}
			defer s.Close()
			a.sess = s
			// A server before batches answers create and null as
			// unknown operations: creates go over HTTP then.
			a.sessCreate = s.Null(context.Background()) == nil
			switch {
			case !a.sessCreate:
				res.Mode += ", stats on a session stream"
			case cfg.Unbatched:
				res.Mode += ", creates and stats on a session stream, a frame each"
			default:
				res.Mode += ", creates and stats on a session stream, batched"
			}
		}
		ops = a
	} else {
		var store kv.Store
		if cfg.Store != nil {
			s, err := cfg.Store()
			if err != nil {
				return res, err
			}
			defer s.Close()
			store, res.Mode, report = s.Store, "in-process, "+s.Name, s.Report
		} else {
			eng, err := pebblekv.Open(cfg.Dir, pebblekv.Options{})
			if err != nil {
				return res, err
			}
			defer eng.Close()
			store, res.Mode = eng, "in-process, pebble"
		}
		ns, err := namespace.Open(store, namespace.Options{Sync: cfg.Sync})
		if err != nil {
			return res, err
		}
		ops = localOps{ns}
	}
	root := fmt.Sprintf("/bench-ns-%d", time.Now().UnixNano())
	// Paths are built with strconv, not fmt: the driver shares the cores
	// with what it measures, so its own cost must stay small.
	dir := func(i int) string {
		return root + "/d" + strconv.Itoa(100000 + i%cfg.Dirs)[1:]
	}
	file := func(i int) string {
		return dir(i) + "/f" + strconv.Itoa(100000000 + i)[1:]
	}
	var sess *client.Session
	if a, ok := ops.(apiOps); ok && a.sessCreate {
		sess = a.sess
	}
	// coalesced is the requests per frame since f0 frames carried r0.
	coalesced := func(f0, r0 float64) float64 {
		if sess == nil {
			return 0
		}
		f, r := sess.Coalesced()
		if float64(f) == f0 {
			return 0
		}
		return (float64(r) - r0) / (float64(f) - f0)
	}
	run := func(name string, n int, fn func(i int) error) error {
		var next atomic.Int64
		var firstErr error
		var once sync.Once
		var wg sync.WaitGroup
		var f0, r0 float64
		if sess != nil {
			f, r := sess.Coalesced()
			f0, r0 = float64(f), float64(r)
		}
		start := time.Now()
		for w := 0; w < cfg.Workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= n {
						return
					}
					if err := fn(i); err != nil {
						once.Do(func() { firstErr = fmt.Errorf("%s %d: %w", name, i, err) })
						return
					}
				}
			}()
		}
		wg.Wait()
		res.Phases = append(res.Phases, NSPhase{Name: name, Ops: n, Elapsed: time.Since(start), PerFrame: coalesced(f0, r0)})
		return firstErr
	}
	if err := run("mkdir", cfg.Dirs, func(i int) error { return ops.mkdir(dir(i)) }); err != nil {
		return res, err
	}
	if err := run("create", cfg.Files, func(i int) error { return ops.create(file(i)) }); err != nil {
		return res, err
	}
	if err := run("stat", cfg.Files, func(i int) error { return ops.stat(file(i)) }); err != nil {
		return res, err
	}
	if sess != nil {
		if err := run("null", cfg.Files, func(int) error { return sess.Null(context.Background()) }); err != nil {
			return res, err
		}
	}
	pid := os.Getpid()
	if cfg.URL != "" {
		pid = cfg.ServerPID
	}
	runtime.GC()
	res.RSS = RSS(pid)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.Heap = ms.HeapInuse
	if report != nil {
		res.Notes = report()
	}
	var listed atomic.Int64
	if err := run("list", cfg.Dirs, func(i int) error {
		n, err := ops.list(dir(i))
		listed.Add(int64(n))
		return err
	}); err != nil {
		return res, err
	}
	if listed.Load() != int64(cfg.Files) {
		return res, fmt.Errorf("listing found %d entries, created %d", listed.Load(), cfg.Files)
	}
	if err := run("delete", cfg.Files, func(i int) error { return ops.remove(file(i)) }); err != nil {
		return res, err
	}
	return res, nil
}

// PrintNamespace writes the table.
func PrintNamespace(w io.Writer, cfg NSConfig, r NSResult) {
	fmt.Fprintf(w, "namespace benchmark (%s): %d files in %d directories, %d workers\n", r.Mode, cfg.Files, cfg.Dirs, cfg.Workers)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tops\tseconds\tops/s\trequests/frame\t")
	for _, p := range r.Phases {
		per := "-"
		if p.PerFrame > 0 {
			per = strconv.FormatFloat(p.PerFrame, 'f', 1, 64)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%s\t\n", p.Name, p.Ops, p.Elapsed.Seconds(), float64(p.Ops)/p.Elapsed.Seconds(), per)
	}
	tw.Flush()
	if r.RSS > 0 {
		// Absolute, not extrapolated: the fixed part (caches, runtime) would
		// dominate a per-million figure from a small run.
		fmt.Fprintf(w, "RSS of the namespace holder while it held %d files: %.0f MiB\n", cfg.Files, float64(r.RSS)/(1<<20))
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, n)
	}
}

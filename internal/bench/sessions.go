package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// SessionsConfig configures Sessions: a load generator of client
// sessions against a running namespace server.
type SessionsConfig struct {
	URL       string
	ServerPID int
	Sessions  int // sessions to open
	Leases    int // leases per session
	// PerStream sessions share one stream (the protocol's S): so 100 000
	// sessions need neither 100 000 connections nor 100 000 streams here.
	PerStream int
	Conns     int
	// HTTP2 opens the streams as HTTP/2 POSTs (as clients before the
	// WebSocket), over Conns connections; otherwise each stream is a
	// WebSocket, a connection of its own (as clients open them).
	HTTP2    bool
	Dirs     int // directories the leases are spread over
	Audience int // sessions subscribed to the one directory the changes are made in
	Changes  int // changes timed, one at a time, with and without suppression
	Settle   time.Duration
}

// SessionsResult are the figures.
type SessionsResult struct {
	Open      time.Duration // to open every session and take its leases
	RSS       int64         // the namespace server's, once they are open
	RSSBefore int64
	CPU       float64 // the namespace server's, cores, while the sessions only heartbeat
	Heartbeat time.Duration
	// Reach: from the change's request to the last of Audience sessions
	// receiving it; without suppression and with (max audience below
	// the audience).
	Reach, ReachSuppressed []time.Duration
	Events                 int // invalidations received in all
}

// benchStream is one HTTP/2 stream carrying many sessions.
type benchStream struct {
	mu   sync.Mutex
	enc  *json.Encoder
	body io.Closer
	ws   *websocket.Conn // nil: an HTTP/2 stream
	out  bytes.Buffer    // the WebSocket's message being sent
	n    int             // sessions on it
}

func (s *benchStream) send(r nsapi.SessionRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ws == nil {
		return s.enc.Encode(r)
	}
	s.out.Reset()
	if err := s.enc.Encode(r); err != nil {
		return err
	}
	return s.ws.WriteMessage(websocket.TextMessage, s.out.Bytes())
}

// arrivals counts who received each timed change.
type arrivals struct {
	mu      sync.Mutex
	changes map[string]*arrival
	replies sync.WaitGroup
	events  int
}

type arrival struct {
	n    int
	last time.Time
	all  chan struct{}
	want int
}

func (a *arrivals) note(m *nsapi.SessionMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events++
	if m.Event == nil {
		return
	}
	if c := a.changes[m.Event.Name]; c != nil {
		c.n++
		c.last = time.Now()
		if c.n == c.want {
			close(c.all)
		}
	}
}

// Sessions opens cfg.Sessions sessions, measures the server while they
// heartbeat, then times changes reaching the audience of one directory.
func Sessions(cfg SessionsConfig, out io.Writer) (SessionsResult, error) {
	var res SessionsResult
	if min(cfg.Sessions, cfg.Leases, cfg.PerStream, cfg.Conns, cfg.Dirs, cfg.Changes) < 1 {
		return res, fmt.Errorf("bench sessions: --sessions, --leases-per-session, --per-stream, --conns, --dirs and --changes must be at least 1")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	api := client.New(cfg.URL)
	root := fmt.Sprintf("/bench-sessions/%d", time.Now().UnixNano())
	if err := api.Mkdir(ctx, root+"/hot", 0, true); err != nil {
		return res, err
	}
	for i := 0; i < cfg.Dirs; i++ {
		if err := api.Mkdir(ctx, fmt.Sprintf("%s/d%05d", root, i), 0, false); err != nil {
			return res, err
		}
	}
	conf, err := api.FusexConf(ctx)
	if err != nil {
		return res, err
	}
	res.Heartbeat = conf.Heartbeat
	res.RSSBefore = RSS(cfg.ServerPID)
	hcs := make([]*http.Client, cfg.Conns)
	for i := range hcs {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		p.SetHTTP2(true)
		hcs[i] = &http.Client{Transport: &http.Transport{Protocols: &p}}
	}
	arr := &arrivals{changes: map[string]*arrival{}}
	// The audience is spread over every stream (one session in stride),
	// as subscribers of one directory are spread over many clients.
	audience := min(cfg.Audience, cfg.Sessions)
	stride := max(cfg.Sessions/max(audience, 1), 1)
	var streams []*benchStream
	start := time.Now()
	for g := 0; g < cfg.Sessions; {
		st, err := openBenchStream(ctx, hcs[len(streams)%len(hcs)], cfg.URL, !cfg.HTTP2, arr)
		if err != nil {
			return res, fmt.Errorf("stream %d: %w", len(streams), err)
		}
		streams = append(streams, st)
		for k := 0; k < cfg.PerStream && g < cfg.Sessions; k, g = k+1, g+1 {
			var paths []string
			if g%stride == 0 && g/stride < audience {
				paths = append(paths, root+"/hot")
			}
			for j := len(paths); j < cfg.Leases; j++ {
				paths = append(paths, fmt.Sprintf("%s/d%05d", root, (g*cfg.Leases+j)%cfg.Dirs))
			}
			arr.replies.Add(2)
			_ = st.send(nsapi.SessionRequest{ID: 1, S: uint32(k), Op: nsapi.SessionOpen, Hello: &nsapi.SessionHello{Host: "bench", Version: "bench"}})
			_ = st.send(nsapi.SessionRequest{ID: 2, S: uint32(k), Op: nsapi.SessionSubscribe, Paths: paths})
			st.n++
		}
		if len(streams)%20 == 0 {
			arr.replies.Wait() // a window of streams at a time
		}
	}
	arr.replies.Wait()
	res.Open = time.Since(start)
	conns, kind := len(streams), "WebSocket"
	if cfg.HTTP2 {
		conns, kind = cfg.Conns, "HTTP/2"
	}
	fmt.Fprintf(out, "%d sessions open with %d leases each over %d %s streams and %d connections in %v\n",
		cfg.Sessions, cfg.Leases, len(streams), kind, conns, res.Open.Round(time.Millisecond))
	// Heartbeats: every stream sends one per session each heartbeat,
	// spread over the interval.
	for i, st := range streams {
		go func() {
			select {
			case <-time.After(time.Duration(i) * conf.Heartbeat / time.Duration(len(streams))):
			case <-ctx.Done():
				return
			}
			t := time.NewTicker(conf.Heartbeat)
			defer t.Stop()
			for {
				for k := 0; k < st.n; k++ {
					if st.send(nsapi.SessionRequest{S: uint32(k), Op: nsapi.SessionHeartbeat}) != nil {
						return
					}
				}
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	rss := SampleRSS(cfg.ServerPID)
	cpu0 := CPUTime(cfg.ServerPID)
	time.Sleep(cfg.Settle)
	res.CPU = (CPUTime(cfg.ServerPID) - cpu0).Seconds() / cfg.Settle.Seconds()
	res.RSS = rss.Stop()
	fmt.Fprintf(out, "namespace server while they heartbeat (every %v): %.3f cores, RSS %d MiB (%d MiB before)\n",
		conf.Heartbeat, res.CPU, res.RSS>>20, res.RSSBefore>>20)
	timeChanges := func(tag string) ([]time.Duration, error) {
		var ds []time.Duration
		for i := 0; i < cfg.Changes; i++ {
			name := fmt.Sprintf("c-%s-%04d", tag, i)
			a := &arrival{all: make(chan struct{}), want: audience}
			arr.mu.Lock()
			arr.changes[name] = a
			arr.mu.Unlock()
			t0 := time.Now()
			if err := api.Mkdir(ctx, root+"/hot/"+name, 0, false); err != nil {
				return nil, err
			}
			select {
			case <-a.all:
			case <-time.After(60 * time.Second):
				return nil, fmt.Errorf("change %s reached %d of %d sessions in 60 s", name, a.n, a.want)
			}
			arr.mu.Lock()
			ds = append(ds, a.last.Sub(t0))
			arr.mu.Unlock()
		}
		slices.Sort(ds)
		return ds, nil
	}
	if _, err := api.FusexConf(ctx, "broadcast.max-audience=0"); err != nil {
		return res, err
	}
	if res.Reach, err = timeChanges("plain"); err != nil {
		return res, err
	}
	if _, err := api.FusexConf(ctx, fmt.Sprintf("broadcast.max-audience=%d", max(cfg.Audience/4, 1))); err != nil {
		return res, err
	}
	res.ReachSuppressed, err = timeChanges("suppressed")
	if _, cerr := api.FusexConf(ctx, fmt.Sprintf("broadcast.max-audience=%d", conf.MaxAudience)); err == nil {
		err = cerr
	}
	arr.mu.Lock()
	res.Events = arr.events
	arr.mu.Unlock()
	for _, st := range streams {
		st.body.Close()
	}
	return res, err
}

func openBenchStream(ctx context.Context, hc *http.Client, base string, ws bool, arr *arrivals) (*benchStream, error) {
	if ws {
		u := "ws" + strings.TrimPrefix(strings.TrimRight(base, "/"), "http") + nsapi.SessionPath
		c, _, err := websocket.DefaultDialer.DialContext(ctx, u, nil)
		if err != nil {
			return nil, err
		}
		st := &benchStream{body: c, ws: c}
		st.enc = json.NewEncoder(&st.out)
		go readBenchStream(c, json.NewDecoder(&nsapi.MessageStream{Next: func() (io.Reader, error) {
			_, rd, err := c.NextReader()
			return rd, err
		}}), arr)
		return st, nil
	}
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+nsapi.SessionPath, pr)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	st := &benchStream{enc: json.NewEncoder(pw), body: pw}
	go readBenchStream(resp.Body, json.NewDecoder(resp.Body), arr)
	return st, nil
}

// readBenchStream notes what a stream receives until it ends.
func readBenchStream(c io.Closer, dec *json.Decoder, arr *arrivals) {
	defer c.Close()
	for {
		var m nsapi.SessionMessage
		if dec.Decode(&m) != nil {
			return
		}
		switch m.Kind {
		case nsapi.SessionReply:
			if m.Error != nil {
				fmt.Println("bench sessions: error:", m.Error.Message)
			}
			if m.ID == 1 || m.ID == 2 {
				arr.replies.Done()
			}
		default:
			arr.note(&m)
		}
	}
}

// PrintSessions writes the figures.
func PrintSessions(w io.Writer, cfg SessionsConfig, r SessionsResult) {
	q := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "-"
		}
		return fmt.Sprintf("median %v, p90 %v, max %v", Percentile(ds, 0.5).Round(10*time.Microsecond),
			Percentile(ds, 0.9).Round(10*time.Microsecond), ds[len(ds)-1].Round(10*time.Microsecond))
	}
	streams := "WebSocket streams, a connection each"
	if cfg.HTTP2 {
		streams = fmt.Sprintf("HTTP/2 streams over %d connections", cfg.Conns)
	}
	fmt.Fprintf(w, "sessions %d, leases %d each (%d in all), %d per stream, %s; load average %s\n",
		cfg.Sessions, cfg.Leases, cfg.Sessions*cfg.Leases, cfg.PerStream, streams, loadAvg())
	fmt.Fprintf(w, "  open + subscribe: %v\n", r.Open.Round(time.Millisecond))
	fmt.Fprintf(w, "  server: RSS %d MiB (before %d MiB: %.1f KiB per session), CPU %.3f cores with heartbeats every %v\n",
		r.RSS>>20, r.RSSBefore>>20, float64(r.RSS-r.RSSBefore)/1024/float64(cfg.Sessions), r.CPU, r.Heartbeat)
	fmt.Fprintf(w, "  a creation reaching all %d subscribers of its directory: %s\n", min(cfg.Audience, cfg.Sessions), q(r.Reach))
	fmt.Fprintf(w, "  ... with broadcast suppression on (max audience %d; creations are still pushed): %s\n", max(cfg.Audience/4, 1), q(r.ReachSuppressed))
}

// LocksConfig configures Locks.
type LocksConfig struct {
	URL    string
	Path   string // the file locked (created if missing)
	N      int    // acquire+release pairs per round
	Rounds int
}

// Locks times lock acquire+release round trips of one session (a write
// lock F_SETLK, then F_UNLCK: two requests, each answered), and returns
// every pair's duration, sorted.
func Locks(cfg LocksConfig) ([]time.Duration, error) {
	if cfg.N < 1 || cfg.Rounds < 1 {
		return nil, fmt.Errorf("bench locks: --n and --rounds must be at least 1")
	}
	ctx := context.Background()
	api := client.New(cfg.URL)
	if _, err := api.Stat(ctx, cfg.Path); err != nil {
		if err := api.Put(ctx, cfg.Path, strings.NewReader(""), 0); err != nil {
			return nil, err
		}
	}
	s, err := api.OpenSession(ctx, client.SessionOptions{Host: "bench"})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	req := nsapi.LockRequest{Path: cfg.Path, Type: nsapi.LockWrite, Owner: 1, Start: 0, Len: 4096}
	var ds []time.Duration
	for r := 0; r < cfg.Rounds; r++ {
		for i := 0; i < cfg.N; i++ {
			t := time.Now()
			if err := s.Lock(ctx, req); err != nil {
				return nil, err
			}
			if err := s.Unlock(ctx, req); err != nil {
				return nil, err
			}
			ds = append(ds, time.Since(t))
		}
	}
	slices.Sort(ds)
	return ds, nil
}

// PrintLocks writes the round trips' figures.
func PrintLocks(w io.Writer, cfg LocksConfig, ds []time.Duration) {
	fmt.Fprintf(w, "%d lock acquire+release round trips of one session (F_SETLK write, F_UNLCK) in %d rounds; load average %s\n", len(ds), cfg.Rounds, loadAvg())
	fmt.Fprintf(w, "  median %v, p90 %v, p99 %v, p99.9 %v, max %v\n", Percentile(ds, 0.5).Round(time.Microsecond), Percentile(ds, 0.9).Round(time.Microsecond),
		Percentile(ds, 0.99).Round(time.Microsecond), Percentile(ds, 0.999).Round(time.Microsecond), ds[len(ds)-1].Round(time.Microsecond))
}

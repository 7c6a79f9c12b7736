package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

// The session channel's candidate transports, measured on the same
// messages (nsapi.SessionMessage as JSON) over loopback, both ends in
// this process: gRPC (a bidirectional stream, JSON codec), HTTP/2
// streaming through net/http (a POST whose request and response bodies
// are streams of JSON values, h2c) and a WebSocket (gorilla/websocket,
// JSON values in messages, pushed ones gathered up to 32 KiB a message)
// — the last two what the namespace server's HTTP endpoint serves
// (docs/DESIGN-NOTES.md: why HTTP/2, then why the WebSocket).

// WireConfig configures SessionWire.
type WireConfig struct {
	Events int // pushed in one burst on one stream
	Trips  int // request → reply round trips, one at a time
	Idle   int // idle streams opened to measure what one costs
	Rounds int // of each measure, alternating transports
}

// WireResult is one transport's figures (medians over the rounds).
type WireResult struct {
	Transport         string
	EventsPerS        float64
	CPUPerEvent       time.Duration // both ends
	TripP50           time.Duration
	TripP99           time.Duration
	BytesPerIdle      float64 // heap per idle stream, both ends
	GoroutinesPerIdle float64
}

// wire is one transport: a server and a client of one stream at a time.
type wire interface {
	name() string
	open(ctx context.Context) (wireStream, error)
	close()
}

// wireStream is a client's stream: send a request, receive a message.
type wireStream interface {
	send(*nsapi.SessionRequest) error
	recv(*nsapi.SessionMessage) error
}

// wireServe is the server side of every transport: a "push" request is
// answered with Inos[0] events, any other request with a reply.
func wireServe(recv func(*nsapi.SessionRequest) error, send func(*nsapi.SessionMessage) error, flush func()) error {
	ev := &nsapi.Invalidation{Event: nsapi.Event{Term: 3, Kind: nsapi.EventCommitted, Ino: 1 << 40, Parent: 1 << 39, Name: "run-000123.root", Size: 1 << 30, MTime: time.Now().UnixNano()}, Lease: 1 << 39}
	for {
		var req nsapi.SessionRequest
		if err := recv(&req); err != nil {
			return err
		}
		if req.Op != "push" {
			if err := send(&nsapi.SessionMessage{Kind: nsapi.SessionReply, ID: req.ID}); err != nil {
				return err
			}
			flush()
			continue
		}
		for i := uint64(1); i <= req.Inos[0]; i++ {
			ev.Rev = i
			if err := send(&nsapi.SessionMessage{Kind: nsapi.SessionEvent, Seq: i, Term: 3, Event: ev}); err != nil {
				return err
			}
		}
		flush()
	}
}

// jsonCodec is gRPC's codec for the benchmark's messages.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (jsonCodec) Name() string                       { return "json" }

var _ encoding.Codec = jsonCodec{}

var wireDesc = grpc.ServiceDesc{
	ServiceName: "kaon.sessions.v1.Sessions",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, ClientStreams: true,
		Handler: func(_ any, st grpc.ServerStream) error {
			return wireServe(func(r *nsapi.SessionRequest) error { return st.RecvMsg(r) },
				func(m *nsapi.SessionMessage) error { return st.SendMsg(m) }, func() {})
		}}},
}

type grpcWire struct {
	srv  *grpc.Server
	conn *grpc.ClientConn
}

func newGRPCWire() (*grpcWire, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &grpcWire{srv: grpc.NewServer(grpc.ForceServerCodec(jsonCodec{}))}
	w.srv.RegisterService(&wireDesc, nil)
	go w.srv.Serve(l)
	w.conn, err = grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(jsonCodec{})))
	return w, err
}

func (w *grpcWire) name() string { return "gRPC" }
func (w *grpcWire) close()       { w.conn.Close(); w.srv.Stop() }

type grpcStream struct{ grpc.ClientStream }

func (s grpcStream) send(r *nsapi.SessionRequest) error { return s.SendMsg(r) }
func (s grpcStream) recv(m *nsapi.SessionMessage) error { return s.RecvMsg(m) }

func (w *grpcWire) open(ctx context.Context) (wireStream, error) {
	st, err := w.conn.NewStream(ctx, &wireDesc.Streams[0], "/kaon.sessions.v1.Sessions/Stream")
	return grpcStream{st}, err
}

type h2Wire struct {
	srv *http.Server
	hc  *http.Client
	url string
}

func newH2Wire() (*h2Wire, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	w := &h2Wire{url: "http://" + l.Addr().String() + "/s"}
	w.srv = &http.Server{Protocols: &p, HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 100000, MaxReadFrameSize: 16 << 10},
		Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			rw.WriteHeader(http.StatusOK)
			rc := http.NewResponseController(rw)
			rc.Flush()
			dec, enc := json.NewDecoder(r.Body), json.NewEncoder(rw)
			_ = wireServe(func(q *nsapi.SessionRequest) error { return dec.Decode(q) },
				func(m *nsapi.SessionMessage) error { return enc.Encode(m) }, func() { rc.Flush() })
		})}
	go w.srv.Serve(l)
	var cp http.Protocols
	cp.SetUnencryptedHTTP2(true)
	w.hc = &http.Client{Transport: &http.Transport{Protocols: &cp}}
	return w, nil
}

func (w *h2Wire) name() string { return "HTTP/2 (net/http, JSON stream)" }
func (w *h2Wire) close()       { w.hc.CloseIdleConnections(); w.srv.Close() }

type h2Stream struct {
	enc *json.Encoder
	dec *json.Decoder
}

func (s h2Stream) send(r *nsapi.SessionRequest) error { return s.enc.Encode(r) }
func (s h2Stream) recv(m *nsapi.SessionMessage) error { return s.dec.Decode(m) }

func (w *h2Wire) open(ctx context.Context) (wireStream, error) {
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, w.url, pr)
	resp, err := w.hc.Do(req)
	if err != nil {
		return nil, err
	}
	return h2Stream{enc: json.NewEncoder(pw), dec: json.NewDecoder(resp.Body)}, nil
}

type wsWire struct {
	srv *http.Server
	url string
}

func newWSWire() (*wsWire, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &wsWire{url: "ws://" + l.Addr().String() + "/s"}
	up := websocket.Upgrader{ReadBufferSize: 4 << 10, WriteBufferSize: 4 << 10}
	w.srv = &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(rw, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		flush := func() error {
			err := c.WriteMessage(websocket.TextMessage, buf.Bytes())
			buf.Reset()
			return err
		}
		_ = wireServe(func(q *nsapi.SessionRequest) error { return c.ReadJSON(q) },
			func(m *nsapi.SessionMessage) error {
				if err := enc.Encode(m); err != nil || buf.Len() < 32<<10 {
					return err
				}
				return flush()
			}, func() { flush() })
	})}
	go w.srv.Serve(l)
	return w, nil
}

func (w *wsWire) name() string { return "WebSocket (gorilla, JSON)" }
func (w *wsWire) close()       { w.srv.Close() }

type wsStream struct {
	c   *websocket.Conn
	dec *json.Decoder // of the message being read
}

func (s *wsStream) send(r *nsapi.SessionRequest) error { return s.c.WriteJSON(r) }

func (s *wsStream) recv(m *nsapi.SessionMessage) error {
	for {
		if s.dec != nil {
			err := s.dec.Decode(m)
			if err != io.EOF {
				return err
			}
		}
		_, rd, err := s.c.NextReader()
		if err != nil {
			return err
		}
		s.dec = json.NewDecoder(rd)
	}
}

func (w *wsWire) open(ctx context.Context) (wireStream, error) {
	c, _, err := websocket.DefaultDialer.DialContext(ctx, w.url, nil)
	if err != nil {
		return nil, err
	}
	return &wsStream{c: c}, nil
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// SessionWire measures the transports, alternating them each round.
func SessionWire(cfg WireConfig, out io.Writer) ([]WireResult, error) {
	makers := []func() (wire, error){
		func() (wire, error) { return newGRPCWire() },
		func() (wire, error) { return newH2Wire() },
		func() (wire, error) { return newWSWire() },
	}
	runs := make([][]WireResult, len(makers))
	for round := 0; round < cfg.Rounds; round++ {
		for i, mk := range makers {
			w, err := mk()
			if err != nil {
				return nil, err
			}
			r, err := measureWire(w, cfg)
			w.close()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", w.name(), err)
			}
			fmt.Fprintf(out, "round %d %-32s %9.0f events/s %6.2f µs CPU/event  trip p50 %v p99 %v  idle stream %5.0f B, %.1f goroutines\n",
				round+1, r.Transport, r.EventsPerS, float64(r.CPUPerEvent.Nanoseconds())/1000, r.TripP50, r.TripP99, r.BytesPerIdle, r.GoroutinesPerIdle)
			runs[i] = append(runs[i], r)
		}
	}
	var res []WireResult
	for _, rs := range runs {
		m := rs[0]
		med := func(f func(WireResult) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		m.EventsPerS = med(func(r WireResult) float64 { return r.EventsPerS })
		m.CPUPerEvent = time.Duration(med(func(r WireResult) float64 { return float64(r.CPUPerEvent) }))
		m.TripP50 = time.Duration(med(func(r WireResult) float64 { return float64(r.TripP50) }))
		m.TripP99 = time.Duration(med(func(r WireResult) float64 { return float64(r.TripP99) }))
		m.BytesPerIdle = med(func(r WireResult) float64 { return r.BytesPerIdle })
		m.GoroutinesPerIdle = med(func(r WireResult) float64 { return r.GoroutinesPerIdle })
		res = append(res, m)
	}
	return res, nil
}

func measureWire(w wire, cfg WireConfig) (WireResult, error) {
	r := WireResult{Transport: w.name()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := w.open(ctx)
	if err != nil {
		return r, err
	}
	// One burst of invalidations.
	cpu0, t0 := processCPU(), time.Now()
	if err := st.send(&nsapi.SessionRequest{Op: "push", Inos: []uint64{uint64(cfg.Events)}}); err != nil {
		return r, err
	}
	var m nsapi.SessionMessage
	for i := 1; i <= cfg.Events; i++ {
		m = nsapi.SessionMessage{}
		if err := st.recv(&m); err != nil {
			return r, err
		}
		if m.Seq != uint64(i) {
			return r, fmt.Errorf("event %d came as %d", i, m.Seq)
		}
	}
	wall, cpu := time.Since(t0), processCPU()-cpu0
	r.EventsPerS = float64(cfg.Events) / wall.Seconds()
	r.CPUPerEvent = cpu / time.Duration(cfg.Events)
	// Round trips, one at a time (a lock request and its reply).
	trips := make([]time.Duration, cfg.Trips)
	for i := range trips {
		t := time.Now()
		if err := st.send(&nsapi.SessionRequest{ID: uint64(i + 1), Op: nsapi.SessionLock}); err != nil {
			return r, err
		}
		if err := st.recv(&m); err != nil {
			return r, err
		}
		trips[i] = time.Since(t)
	}
	slices.Sort(trips)
	r.TripP50, r.TripP99 = Percentile(trips, 0.5), Percentile(trips, 0.99)
	// Idle streams: what each costs, both ends.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	var mu sync.Mutex
	var idle []wireStream
	for i := 0; i < cfg.Idle; i++ {
		s, err := w.open(ctx)
		if err != nil {
			return r, err
		}
		if err := s.send(&nsapi.SessionRequest{ID: 1, Op: nsapi.SessionHeartbeat}); err != nil {
			return r, err
		}
		if err := s.recv(&m); err != nil {
			return r, err
		}
		mu.Lock()
		idle = append(idle, s)
		mu.Unlock()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	r.BytesPerIdle = float64(int64(after.HeapInuse+after.StackInuse)-int64(before.HeapInuse+before.StackInuse)) / float64(cfg.Idle)
	r.GoroutinesPerIdle = float64(runtime.NumGoroutine()-g0) / float64(cfg.Idle)
	runtime.KeepAlive(idle)
	return r, nil
}

// PrintWire writes the medians and the ratios.
func PrintWire(w io.Writer, cfg WireConfig, res []WireResult) {
	fmt.Fprintf(w, "medians of %d rounds (load average %s):\n", cfg.Rounds, loadAvg())
	for _, r := range res {
		fmt.Fprintf(w, "  %-32s %9.0f events/s %6.2f µs CPU/event  trip p50 %v p99 %v  idle stream %5.0f B\n",
			r.Transport, r.EventsPerS, float64(r.CPUPerEvent.Nanoseconds())/1000, r.TripP50, r.TripP99, r.BytesPerIdle)
	}
	for _, r := range res[1:] {
		fmt.Fprintf(w, "%s / %s: events/s %.2f, CPU/event %.2f, trip p50 %.2f, idle stream %.2f\n", r.Transport, res[0].Transport, r.EventsPerS/res[0].EventsPerS,
			float64(r.CPUPerEvent)/float64(res[0].CPUPerEvent), float64(r.TripP50)/float64(res[0].TripP50), r.BytesPerIdle/res[0].BytesPerIdle)
	}
}

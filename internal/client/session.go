package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Sessions: a program (or the caching mount) that caches the namespace
// opens a Session, subscribes to the directories and files it caches
// (leases), and reads Invalidations: every change to what it subscribed
// to, made through any protocol, and Full invalidations when it must drop
// everything (its stream broke and reconnected, a sequence number was
// skipped, the namespace service is a new incarnation, the server said
// so). Locks (Lock, GetLk) are granted by the namespace service; a
// blocked Lock with Wait returns when the lock is granted or ctx ends.
//
// A Session heartbeats on its own and reconnects when its stream breaks
// (following a standby's redirect to the active server): it resumes the
// same session, or after a takeover reclaims its locks in the new active
// server's grace window. Locks that could not be kept are reported in
// Invalidation.LostLocks.
//
//	s, err := c.OpenSession(ctx, client.SessionOptions{Host: "node1"})
//	leases, err := s.Subscribe(ctx, "/data/run1")
//	for inv := range s.Invalidations() { ... }
//	err = s.Lock(ctx, nsapi.LockRequest{Path: "/data/run1/db", Type: nsapi.LockWrite, Owner: pid, Wait: true})
//	err = s.Unlock(ctx, nsapi.LockRequest{Path: "/data/run1/db", Owner: pid})
//	s.Close()

// SessionOptions configure a session.
type SessionOptions struct {
	Host    string // the client's host name (fusex ls)
	Version string // the client's version (fusex ls)
	// Servers are the other namespace servers of a replicated instance:
	// when the stream breaks and the server it went to does not answer,
	// the session reconnects through them (a standby sends it on to the
	// active server).
	Servers []string
	// Events is the capacity of the invalidation channel (default 4096);
	// when it is full, invalidations are dropped and a Full one follows
	// as soon as there is room.
	Events int
	// Unbatched frames each Stat, Create and Null on its own instead of
	// coalescing those made while a frame is in flight (`kaon bench ns
	// --unbatched`: what a frame per request costs).
	Unbatched bool
}

// Invalidation is what a session is told: a change under one of its
// leases, or (Full) that everything it caches is invalid.
type Invalidation struct {
	nsapi.Invalidation        // the change (zero when Full)
	Full               bool   // drop everything cached; re-subscribe what is still wanted
	Reason             string // why everything is invalid
	// LostLocks are locks the session held and no longer does (not
	// reclaimed after a takeover, or the session was evicted).
	LostLocks []nsapi.Lock
}

// Session is a client session with the namespace service; safe for
// concurrent use.
type Session struct {
	c    *Client
	opts SessionOptions
	hc   *http.Client
	inv  chan Invalidation

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	info      nsapi.SessionInfo
	base      string     // the server the stream goes to (the active one)
	h2        bool       // the server does not take WebSockets: streams are HTTP/2 requests
	conn      streamConn // the current stream (nil while reconnecting)
	nextID    uint64
	pending   map[uint64]chan nsapi.SessionMessage
	seq       uint64
	owed      *Invalidation // a Full invalidation owed (the channel was full), sent by payOwed
	owing     sync.WaitGroup
	held      map[lockKey][]nsapi.Lock // locks held, per file, kind and owner (to reclaim them)
	ready     chan struct{}            // closed while a stream is up; replaced when it breaks
	down      chan struct{}            // closed when the current stream breaks
	err       error                    // why the session ended
	openFiles int
	// Coalescing (Nagle's, without a delay): Stat, Create and Null made
	// while a frame of them is in flight (sessionFrames) queue, and go
	// in one frame (a batch) when its reply comes.
	queue  []nsapi.SessionRequest // waiting for a frame
	frames map[uint64][]uint64    // the frames in flight (by ID): the requests each carries
	sent   [2]int64               // frames sent, requests they carried
}

type lockKey struct {
	ino   uint64
	flock bool
	owner uint64
}

// OpenSession opens a session with the namespace service; it returns
// once the session is open.
func (c *Client) OpenSession(ctx context.Context, opts SessionOptions) (*Session, error) {
	if opts.Events <= 0 {
		opts.Events = 4096
	}
	s := &Session{c: c, opts: opts, hc: c.sessionHTTP(), inv: make(chan Invalidation, opts.Events), base: c.current(), h2: sessionsOverHTTP2,
		pending: map[uint64]chan nsapi.SessionMessage{}, frames: map[uint64][]uint64{}, held: map[lockKey][]nsapi.Lock{}, done: make(chan struct{}), ready: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.connect(ctx); err != nil {
		s.cancel()
		return nil, err
	}
	go s.run()
	return s, nil
}

// sessionHTTP is an HTTP client speaking only HTTP/2 (h2c for http://),
// with the client's TLS settings; one per Client, so its sessions share
// connections.
func (c *Client) sessionHTTP() *http.Client {
	c.h2once.Do(func() {
		t := c.transport().Clone()
		var p http.Protocols
		p.SetHTTP2(true)
		p.SetUnencryptedHTTP2(true)
		t.Protocols = &p
		t.HTTP2 = &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: 15 * time.Second}
		c.h2 = &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	})
	return c.h2
}

// transport is the client's HTTP transport, whose dialer, TLS settings
// and proxy the session streams use (http.DefaultTransport's when the
// client has another kind of RoundTripper).
func (c *Client) transport() *http.Transport {
	if t, ok := c.HTTP.Transport.(*http.Transport); ok && t != nil {
		return t
	}
	return http.DefaultTransport.(*http.Transport)
}

// ID is the session's id (as fusex ls shows it).
func (s *Session) ID() string { s.mu.Lock(); defer s.mu.Unlock(); return s.info.ID }

// Term is the incarnation of the namespace service the session is with.
func (s *Session) Term() uint64 { s.mu.Lock(); defer s.mu.Unlock(); return s.info.Term }

// Invalidations is the channel of what the session is told; it is closed
// when the session ends.
func (s *Session) Invalidations() <-chan Invalidation { return s.inv }

// SetOpenFiles sets the count of open files the heartbeats report.
func (s *Session) SetOpenFiles(n int) { s.mu.Lock(); s.openFiles = n; s.mu.Unlock() }

// sessionsOverHTTP2 makes sessions use HTTP/2 streams as they do with a
// server before the WebSocket (a test's switch).
var sessionsOverHTTP2 = false

// streamConn is a session stream: a WebSocket, or an HTTP/2 request
// and its response (servers before the WebSocket).
type streamConn interface {
	send(*nsapi.SessionRequest) error // one writer at a time (s.mu)
	decoder() *json.Decoder           // of the server's messages (one reader)
	ping() error                      // safe beside send
	close(error)
}

// connect opens a stream to the active server and opens (or resumes) the
// session on it.
func (s *Session) connect(ctx context.Context) error {
	for hops := 0; ; hops++ {
		s.mu.Lock()
		base, h2 := s.base, s.h2
		s.mu.Unlock()
		if !h2 {
			conn, active, err := s.dialWS(ctx, base)
			switch {
			case err == nil:
				return s.hello(ctx, conn)
			case active != "" && hops < 10:
				s.mu.Lock()
				s.base = strings.TrimRight(active, "/")
				s.mu.Unlock()
				continue
			case !errors.Is(err, errNoWebSocket):
				return err
			}
			s.mu.Lock()
			s.h2 = true
			s.mu.Unlock()
		}
		pr, pw := io.Pipe()
		req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, base+nsapi.SessionPath, pr)
		if err != nil {
			return kerr.Wrap(kerr.Invalid, "session", base, err)
		}
		req.Header.Set("Content-Type", "application/json")
		s.c.authorize(req)
		type answer struct {
			resp *http.Response
			err  error
		}
		got := make(chan answer, 1)
		go func() { r, err := s.hc.Do(req); got <- answer{r, err} }()
		var a answer
		select {
		case a = <-got:
		case <-ctx.Done():
			pw.CloseWithError(ctx.Err())
			return kerr.Wrap(kerr.Unavailable, "session", base, ctx.Err())
		}
		if a.err != nil {
			pw.Close()
			return &kerr.Error{Kind: kerr.Unavailable, Op: "session", Msg: "cannot reach Kaon at " + base, Err: a.err}
		}
		resp := a.resp
		if active := resp.Header.Get(nsapi.ActiveHeader); resp.StatusCode == http.StatusTemporaryRedirect && active != "" && hops < 10 {
			resp.Body.Close()
			pw.Close()
			s.mu.Lock()
			s.base = strings.TrimRight(active, "/")
			s.mu.Unlock()
			continue
		}
		if resp.StatusCode != http.StatusOK {
			defer resp.Body.Close()
			pw.Close()
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			var e nsapi.ErrorBody
			if json.Unmarshal(data, &e) == nil && e.Message != "" {
				return &kerr.Error{Kind: e.Kind, Msg: e.Message}
			}
			return &kerr.Error{Kind: kerr.KindOfHTTP(resp.StatusCode), Op: "session", Path: base, Msg: "HTTP " + resp.Status}
		}
		return s.hello(ctx, &h2Conn{enc: json.NewEncoder(pw), pw: pw, dec: json.NewDecoder(resp.Body), body: resp.Body})
	}
}

// errNoWebSocket: the server answered the WebSocket handshake as a
// server before them does.
var errNoWebSocket = errors.New("the server does not take the session channel as a WebSocket")

// dialWS opens a WebSocket stream to base with the client's credentials,
// connection settings (dialer, TLS) and proxy. A standby's redirect
// gives the active server instead.
func (s *Session) dialWS(ctx context.Context, base string) (streamConn, string, error) {
	u, err := url.Parse(base + nsapi.SessionPath)
	if err != nil {
		return nil, "", kerr.Wrap(kerr.Invalid, "session", base, err)
	}
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	req, _ := http.NewRequest(http.MethodGet, base+nsapi.SessionPath, nil)
	s.c.authorize(req)
	t := s.c.transport()
	d := websocket.Dialer{NetDialContext: t.DialContext, Proxy: t.Proxy, HandshakeTimeout: 30 * time.Second, ReadBufferSize: 4 << 10, WriteBufferSize: 4 << 10}
	if t.TLSClientConfig != nil {
		d.TLSClientConfig = t.TLSClientConfig.Clone()
		d.TLSClientConfig.NextProtos = nil // HTTP/1.1, which the upgrade is
	}
	conn, resp, err := d.DialContext(ctx, u.String(), req.Header)
	if err == nil {
		conn.SetReadLimit(wsMessageLimit)
		w := &wsConn{c: conn}
		w.enc = json.NewEncoder(&w.out)
		w.dec = json.NewDecoder(&nsapi.MessageStream{Next: func() (io.Reader, error) {
			_, rd, err := conn.NextReader()
			if err == nil {
				w.alive()
			}
			return rd, err
		}})
		conn.SetPongHandler(func(string) error { w.alive(); return nil })
		return w, "", nil
	}
	if resp == nil {
		return nil, "", &kerr.Error{Kind: kerr.Unavailable, Op: "session", Msg: "cannot reach Kaon at " + base, Err: err}
	}
	defer resp.Body.Close()
	if active := resp.Header.Get(nsapi.ActiveHeader); resp.StatusCode == http.StatusTemporaryRedirect && active != "" {
		return nil, active, err
	}
	if resp.StatusCode == http.StatusNotImplemented || resp.StatusCode == http.StatusMethodNotAllowed {
		// A server before the WebSocket: "the session channel is a
		// POST" (kerr.Unsupported).
		return nil, "", errNoWebSocket
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e nsapi.ErrorBody
	if json.Unmarshal(data, &e) == nil && e.Message != "" {
		return nil, "", &kerr.Error{Kind: e.Kind, Msg: e.Message}
	}
	return nil, "", &kerr.Error{Kind: kerr.KindOfHTTP(resp.StatusCode), Op: "session", Path: base, Msg: "HTTP " + resp.Status}
}

// wsMessageLimit bounds one message from the server.
const wsMessageLimit = 64 << 20

// wsConn is a WebSocket stream: one request per message; a message from
// the server holds one or more JSON values. Once pinged (every
// heartbeat), a stream on which nothing arrives for wsSilence is broken,
// as the HTTP/2 transport's pings end a silent connection.
type wsConn struct {
	c       *websocket.Conn
	out     bytes.Buffer  // the request being sent (send: one at a time)
	enc     *json.Encoder // to out
	dec     *json.Decoder // of the server's messages, read as one stream
	pinging atomic.Bool
}

// wsSilence is how long a pinged stream may be silent.
var wsSilence = 30 * time.Second

func (w *wsConn) send(r *nsapi.SessionRequest) error {
	w.out.Reset()
	if err := w.enc.Encode(r); err != nil {
		return err
	}
	return w.c.WriteMessage(websocket.TextMessage, w.out.Bytes())
}

func (w *wsConn) decoder() *json.Decoder { return w.dec }

// alive notes that the server was heard from.
func (w *wsConn) alive() {
	if w.pinging.Load() {
		w.c.SetReadDeadline(time.Now().Add(wsSilence))
	}
}

// ping asks for a pong (which the server's WebSocket answers, as it reads
// the stream); the first starts the silence's clock.
func (w *wsConn) ping() error {
	if !w.pinging.Swap(true) {
		w.alive()
	}
	return w.c.WriteControl(websocket.PingMessage, nil, time.Now().Add(10*time.Second))
}

func (w *wsConn) close(error) { w.c.Close() }

// h2Conn is an HTTP/2 stream: the request's body and the response's.
type h2Conn struct {
	enc  *json.Encoder
	pw   *io.PipeWriter
	dec  *json.Decoder
	body io.ReadCloser
}

func (h *h2Conn) send(r *nsapi.SessionRequest) error { return h.enc.Encode(r) }

func (h *h2Conn) decoder() *json.Decoder { return h.dec }

func (h *h2Conn) ping() error { return nil } // HTTP/2 pings (sessionHTTP)

func (h *h2Conn) close(err error) {
	h.pw.CloseWithError(err)
	h.body.Close()
}

// hello opens or resumes the session on a new stream.
func (s *Session) hello(ctx context.Context, conn streamConn) error {
	s.mu.Lock()
	hello := nsapi.SessionHello{Host: s.opts.Host, Version: s.opts.Version, Resume: s.info.ID, Key: s.info.Key, Term: s.info.Term}
	for _, ls := range s.held {
		hello.Locks = append(hello.Locks, ls...)
	}
	s.conn, s.seq = conn, 0
	reply := make(chan nsapi.SessionMessage, 1)
	s.nextID++
	id := s.nextID
	s.pending[id] = reply
	err := conn.send(&nsapi.SessionRequest{ID: id, Op: nsapi.SessionOpen, Hello: &hello})
	s.mu.Unlock()
	stream := make(chan error, 1)
	go func() { stream <- s.read(conn) }()
	var m nsapi.SessionMessage
	if err == nil {
		select {
		case m = <-reply:
		case err = <-stream:
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err == nil && m.Error != nil {
		err = &kerr.Error{Kind: m.Error.Kind, Msg: m.Error.Message}
	}
	if err != nil {
		s.mu.Lock()
		if s.conn == conn {
			s.conn = nil
		}
		delete(s.pending, id)
		s.mu.Unlock()
		conn.close(err)
		return kerr.Wrap(kerr.Unavailable, "session open", s.base, err)
	}
	s.mu.Lock()
	prev := s.info
	s.info = *m.Session
	lost := m.Session.Lost
	for _, l := range lost {
		delete(s.held, lockKey{l.Ino, l.Kind == nsapi.LockFlock, l.Owner})
	}
	down := make(chan struct{})
	s.down = down
	close(s.ready)
	s.mu.Unlock()
	if prev.ID != "" || len(lost) > 0 {
		why := "the session's stream was reconnected"
		switch {
		case prev.Term != m.Session.Term:
			why = fmt.Sprintf("the namespace service is a new incarnation (term %d, was %d)", m.Session.Term, prev.Term)
		case !m.Session.Resumed:
			why = "the session was evicted meanwhile: a new one was opened"
		}
		s.deliver(Invalidation{Full: true, Reason: why, LostLocks: lost})
	}
	go func() {
		err := <-stream
		s.broken(conn, err)
	}()
	return nil
}

// read reads the stream's messages until it ends.
func (s *Session) read(conn streamConn) error {
	defer conn.close(nil)
	dec := conn.decoder()
	for {
		var m nsapi.SessionMessage
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		switch m.Kind {
		case nsapi.SessionReply:
			s.mu.Lock()
			for _, r := range m.Batch {
				if ch := s.pending[r.ID]; ch != nil {
					ch <- r // buffered: never blocks
					delete(s.pending, r.ID)
				}
			}
			ch := s.pending[m.ID]
			delete(s.pending, m.ID)
			if carried, ok := s.frames[m.ID]; ok {
				delete(s.frames, m.ID)
				if m.Error != nil && m.Batch == nil && len(carried) > 1 {
					s.failLocked(carried, m.Error) // the batch itself was refused
				}
				s.flushLocked()
			}
			s.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		case nsapi.SessionEvent, nsapi.SessionFull, nsapi.SessionEvict:
			s.mu.Lock()
			gap := m.Seq != s.seq+1
			s.seq = m.Seq
			term := s.info.Term
			s.mu.Unlock()
			switch {
			case m.Kind == nsapi.SessionEvict:
				msg := "evicted"
				if m.Error != nil {
					msg = m.Error.Message
				}
				s.mu.Lock()
				var lost []nsapi.Lock
				for _, ls := range s.held {
					lost = append(lost, ls...)
				}
				clear(s.held)
				s.info.ID, s.info.Key = "", "" // a new session next time
				s.mu.Unlock()
				s.deliver(Invalidation{Full: true, Reason: msg, LostLocks: lost})
				return errors.New(msg)
			case gap:
				s.deliver(Invalidation{Full: true, Reason: fmt.Sprintf("message %d came after %d: messages were lost", m.Seq, m.Seq-1)})
			case m.Term != term:
				s.deliver(Invalidation{Full: true, Reason: fmt.Sprintf("an event of term %d, the session's is %d", m.Term, term)})
			case m.Kind == nsapi.SessionFull:
				s.deliver(Invalidation{Full: true, Reason: "the server lost events for this session"})
			default:
				s.deliver(Invalidation{Invalidation: *m.Event})
			}
		}
	}
}

// deliver queues inv on the invalidation channel without blocking. When
// it is full, inv and what follows are dropped and a Full invalidation is
// owed: it is sent as soon as the application makes room, and events
// queue again after it.
func (s *Session) deliver(inv Invalidation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	if s.owed == nil {
		select {
		case s.inv <- inv:
			return
		default:
		}
		s.owed = &Invalidation{Full: true, Reason: "invalidations were dropped: the application did not read them fast enough"}
		s.owing.Add(1)
		go s.payOwed()
	}
	s.owed.LostLocks = append(s.owed.LostLocks, inv.LostLocks...)
}

// payOwed sends the Full invalidation owed once the channel has room.
func (s *Session) payOwed() {
	defer s.owing.Done()
	for {
		s.mu.Lock()
		full := *s.owed
		s.mu.Unlock()
		select {
		case s.inv <- full:
		case <-s.ctx.Done():
			return
		}
		s.mu.Lock()
		if len(s.owed.LostLocks) == len(full.LostLocks) {
			s.owed = nil
			s.mu.Unlock()
			return
		}
		// More locks were lost meanwhile: tell those too.
		s.owed.LostLocks = s.owed.LostLocks[len(full.LostLocks):]
		s.mu.Unlock()
	}
}

// broken handles the end of a stream: requests waiting for a reply fail,
// and the session reconnects (run).
func (s *Session) broken(conn streamConn, err error) {
	conn.close(err)
	s.mu.Lock()
	if s.conn == conn {
		s.conn = nil
		for id, ch := range s.pending {
			ch <- nsapi.SessionMessage{Kind: nsapi.SessionReply, ID: id, Error: &nsapi.ErrorBody{Kind: kerr.Unavailable, Message: "the session's stream broke: " + err.Error()}}
			delete(s.pending, id)
		}
		s.queue = nil // their requests were pending: failed above
		clear(s.frames)
		s.ready = make(chan struct{})
		close(s.down)
	}
	s.mu.Unlock()
}

// run heartbeats and reconnects until the session is closed.
func (s *Session) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		down, hb, conn := s.down, s.info.Heartbeat, s.conn
		s.mu.Unlock()
		up := conn != nil
		if !up {
			backoff := 100 * time.Millisecond
			servers := append([]string{s.base, s.c.Base}, s.opts.Servers...)
			for try := 1; s.connect(s.ctx) != nil; try++ {
				select {
				case <-time.After(backoff + rand.N(backoff/2)):
				case <-s.ctx.Done():
					return
				}
				backoff = min(2*backoff, 2*time.Second)
				s.mu.Lock()
				s.base = strings.TrimRight(servers[try%len(servers)], "/")
				s.mu.Unlock()
			}
			continue
		}
		select {
		case <-time.After(hb):
			s.mu.Lock()
			open := s.openFiles
			s.mu.Unlock()
			_ = s.send(nsapi.SessionRequest{Op: nsapi.SessionHeartbeat, Open: open})
			_ = conn.ping()
		case <-down:
		case <-s.ctx.Done():
			return
		}
	}
}

// send writes req on the current stream.
func (s *Session) send(req nsapi.SessionRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return &kerr.Error{Kind: kerr.Unavailable, Op: "session " + req.Op, Msg: "the session is reconnecting"}
	}
	return s.conn.send(&req)
}

// call sends req and waits for its reply; ctx ending gives up waiting
// (a lock request is withdrawn then).
func (s *Session) call(ctx context.Context, req nsapi.SessionRequest) (nsapi.SessionMessage, error) {
	return s.roundTrip(ctx, req, false)
}

// roundTrip is call; coalesce queues req behind the frame in flight (a
// stat, create or null), when the server takes batches.
func (s *Session) roundTrip(ctx context.Context, req nsapi.SessionRequest, coalesce bool) (nsapi.SessionMessage, error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nsapi.SessionMessage{}, s.err
	}
	ready := s.ready
	s.mu.Unlock()
	select { // wait for a stream while reconnecting
	case <-ready:
	case <-ctx.Done():
		return nsapi.SessionMessage{}, kerr.Wrap(kerr.Unavailable, "session "+req.Op, "", ctx.Err())
	case <-s.ctx.Done():
		return nsapi.SessionMessage{}, kerr.New(kerr.Unavailable, "session "+req.Op, "", "the session is closed")
	}
	s.mu.Lock()
	if s.conn == nil {
		s.mu.Unlock()
		return nsapi.SessionMessage{}, &kerr.Error{Kind: kerr.Unavailable, Op: "session " + req.Op, Msg: "the session is reconnecting"}
	}
	s.nextID++
	req.ID = s.nextID
	ch := make(chan nsapi.SessionMessage, 1)
	s.pending[req.ID] = ch
	var err error
	if coalesce && s.info.Batch && !s.opts.Unbatched {
		s.queue = append(s.queue, req)
		s.flushLocked()
	} else {
		err = s.conn.send(&req)
	}
	s.mu.Unlock()
	if err != nil {
		s.mu.Lock()
		delete(s.pending, req.ID)
		s.mu.Unlock()
		return nsapi.SessionMessage{}, &kerr.Error{Kind: kerr.Unavailable, Op: "session " + req.Op, Msg: "the session's stream broke", Err: err}
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return m, &kerr.Error{Kind: m.Error.Kind, Msg: m.Error.Message}
		}
		return m, nil
	case <-ctx.Done():
		if req.Op == nsapi.SessionLock {
			_ = s.send(nsapi.SessionRequest{Op: nsapi.SessionCancel, Cancel: req.ID})
		}
		return nsapi.SessionMessage{}, kerr.Wrap(kerr.Aborted, "session "+req.Op, "", ctx.Err())
	}
}

// sessionFrames is how many frames of coalesced requests may be in
// flight: one (Nagle's). Two, so that the server would work on one
// while the next fills, made smaller batches and cost more CPU per
// request on two loaded cores (docs/DESIGN-NOTES.md).
const sessionFrames = 1

// Coalesced returns how many frames carried the coalesced requests
// (Stat, Create, Null) so far, and how many requests they carried.
func (s *Session) Coalesced() (frames, requests int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[0], s.sent[1]
}

// flushLocked sends what is queued (up to nsapi.MaxSessionBatch
// requests) when fewer than sessionFrames frames are in flight: one
// request alone, more as a batch. A frame that cannot be sent fails its
// requests. Caller holds s.mu.
func (s *Session) flushLocked() {
	for len(s.queue) > 0 && len(s.frames) < sessionFrames && s.conn != nil {
		n := min(len(s.queue), nsapi.MaxSessionBatch)
		q := s.queue[:n:n]
		s.queue = s.queue[n:]
		if len(s.queue) == 0 {
			s.queue = nil
		}
		frame := q[0]
		if n > 1 {
			s.nextID++
			frame = nsapi.SessionRequest{ID: s.nextID, Op: nsapi.SessionBatch, Batch: q}
		}
		carried := make([]uint64, n)
		for i, r := range q {
			carried[i] = r.ID
		}
		if err := s.conn.send(&frame); err != nil {
			s.failLocked(carried, &nsapi.ErrorBody{Kind: kerr.Unavailable, Message: "the session's stream broke: " + err.Error()})
			continue
		}
		s.frames[frame.ID] = carried
		s.sent[0]++
		s.sent[1] += int64(n)
	}
}

// failLocked answers the requests ids with e. Caller holds s.mu.
func (s *Session) failLocked(ids []uint64, e *nsapi.ErrorBody) {
	for _, id := range ids {
		if ch := s.pending[id]; ch != nil {
			ch <- nsapi.SessionMessage{Kind: nsapi.SessionReply, ID: id, Error: e}
			delete(s.pending, id)
		}
	}
}

// Subscribe takes (or renews) leases on paths: directories (their
// entries and their attributes) and files (their attributes and data).
// A path that cannot be subscribed has the reason in its Lease.
func (s *Session) Subscribe(ctx context.Context, paths ...string) ([]nsapi.Lease, error) {
	m, err := s.call(ctx, nsapi.SessionRequest{Op: nsapi.SessionSubscribe, Paths: paths})
	return m.Leases, err
}

// SubscribeList subscribes directories as Subscribe does and lists each
// (up to nsapi.MaxLeaseListing entries) after its lease was granted, in
// the same round trip: Lease.Listed says which were.
func (s *Session) SubscribeList(ctx context.Context, paths ...string) ([]nsapi.Lease, error) {
	m, err := s.call(ctx, nsapi.SessionRequest{Op: nsapi.SessionSubscribe, Paths: paths, List: true})
	return m.Leases, err
}

// Stat returns the entry at path as Client.Stat does, as a request
// framed on the session's stream instead of an HTTP request of its own,
// authorized as the session's identity. Stats, creates and nulls made
// while a frame of them is in flight go together in the next frame.
func (s *Session) Stat(ctx context.Context, path string) (nsapi.Entry, error) {
	return s.entry(ctx, nsapi.SessionRequest{Op: nsapi.SessionStat, Paths: []string{path}})
}

// Create makes an empty file at path (replacing a file unless
// exclusive; mode 0: 0644) as Client.Touch does, framed on the
// session's stream as Stat is. A server before batches does not take it
// (kerr.Unsupported).
func (s *Session) Create(ctx context.Context, path string, exclusive bool, mode uint32) (nsapi.Entry, error) {
	return s.entry(ctx, nsapi.SessionRequest{Op: nsapi.SessionCreate, Paths: []string{path}, Exclusive: exclusive, Mode: mode})
}

// Null makes a round trip that does nothing (what the channel costs).
func (s *Session) Null(ctx context.Context) error {
	_, err := s.roundTrip(ctx, nsapi.SessionRequest{Op: nsapi.SessionNull}, true)
	return kerr.WithOp(err, "session null")
}

// entry makes a stat or a create and returns the entry it answers.
func (s *Session) entry(ctx context.Context, req nsapi.SessionRequest) (nsapi.Entry, error) {
	m, err := s.roundTrip(ctx, req, true)
	if err != nil {
		return nsapi.Entry{}, kerr.WithOp(err, req.Op)
	}
	if m.Entry == nil {
		return nsapi.Entry{}, kerr.New(kerr.Unsupported, req.Op, req.Paths[0], "the server does not answer "+req.Op+" on the session stream")
	}
	return *m.Entry, nil
}

// Renew renews leases by inode.
func (s *Session) Renew(ctx context.Context, inos ...uint64) ([]nsapi.Lease, error) {
	m, err := s.call(ctx, nsapi.SessionRequest{Op: nsapi.SessionRenew, Inos: inos})
	return m.Leases, err
}

// Unsubscribe drops leases by inode.
func (s *Session) Unsubscribe(ctx context.Context, inos ...uint64) error {
	_, err := s.call(ctx, nsapi.SessionRequest{Op: nsapi.SessionUnsubscribe, Inos: inos})
	return err
}

// Lock sets a lock (or releases one: Type unlock). Without Wait a lock
// in the way fails it with kerr.Locked (EAGAIN); with Wait it returns
// once granted, or fails with kerr.Deadlock, or when ctx ends (the
// request is withdrawn).
func (s *Session) Lock(ctx context.Context, req nsapi.LockRequest) error {
	m, err := s.call(ctx, nsapi.SessionRequest{Op: nsapi.SessionLock, Lock: &req})
	if err != nil {
		return err
	}
	s.noteHeld(req, m.Held)
	return nil
}

func (s *Session) noteHeld(req nsapi.LockRequest, held []nsapi.Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ino uint64
	if len(held) > 0 {
		ino = held[0].Ino
	} else {
		// Released everything: forget the owner's locks on the file,
		// whatever its inode.
		for k, ls := range s.held {
			if k.flock == (req.Kind == nsapi.LockFlock) && k.owner == req.Owner && len(ls) > 0 && ls[0].Path == req.Path {
				delete(s.held, k)
			}
		}
		return
	}
	for i := range held {
		held[i].Path = req.Path
	}
	s.held[lockKey{ino, req.Kind == nsapi.LockFlock, req.Owner}] = held
}

// Unlock releases req's range (F_UNLCK, LOCK_UN).
func (s *Session) Unlock(ctx context.Context, req nsapi.LockRequest) error {
	req.Type, req.Wait = nsapi.LockUnlock, false
	return s.Lock(ctx, req)
}

// GetLk returns the lock in the way of req (F_GETLK), nil when none is.
func (s *Session) GetLk(ctx context.Context, req nsapi.LockRequest) (*nsapi.Lock, error) {
	m, err := s.call(ctx, nsapi.SessionRequest{Op: nsapi.SessionGetLk, Lock: &req})
	return m.Lock, err
}

// Close ends the session: the server releases its leases and locks.
func (s *Session) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.mu.Lock()
	up := s.conn != nil
	s.mu.Unlock()
	var err error
	if up {
		_, err = s.call(ctx, nsapi.SessionRequest{Op: nsapi.SessionClose})
	}
	s.cancel()
	<-s.done
	s.owing.Wait()
	s.mu.Lock()
	if s.conn != nil {
		s.conn.close(io.EOF)
	}
	s.err = kerr.New(kerr.Unavailable, "session", s.info.ID, "the session is closed")
	close(s.inv)
	s.mu.Unlock()
	return err
}

package httpfront

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/gorilla/websocket"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/nsserver"
)

// The session channel (nsapi.SessionPath): a WebSocket (RFC 6455,
// gorilla/websocket) whose messages carry, as JSON values, the client's
// nsapi.SessionRequests and the service's nsapi.SessionMessages (one
// request a message; a message of the service's may hold several, read
// as one stream: nsapi.MessageStream); or one HTTP/2 request whose body is
// the client's stream of requests and whose response is the service's
// stream of messages (clients before the WebSocket; net/http's HTTP/2
// hands a request over between goroutines ~11 times, the WebSocket once:
// docs/DESIGN-NOTES.md). The
// client is authenticated as every request of this endpoint is (the
// connection's unix peer or certificate, or the request's bearer token);
// what its sessions ask is authorized by the service. A standby answers
// it, as every request, with a redirect to the active server. A
// WebSocket handshake that names an Origin (a browser's page) is refused:
// a page must not open a session with its user's loopback identity.
//
// Requests are served, and their replies written, by the goroutine that
// reads the stream (a blocked lock request waits in a goroutine of its
// own); pushed messages go through a queue per stream, written by one
// goroutine that takes what is queued, writes it and flushes: pushing
// never waits (nsserver.SessionSink), and a message the queue cannot take
// is lost, which the client sees as a gap in its session's sequence
// numbers. The queue grows as messages come (an idle stream holds none: a
// channel of sessionQueue messages held 512 KiB per stream, one stream
// per mount).

// sessionQueue is how many messages a stream holds before pushed ones
// are lost.
const sessionQueue = 4096

var errStreamEnded = errors.New("the session stream ended")

// sessionStream is one client's stream and the sessions it carries.
type sessionStream struct {
	qmu    sync.Mutex
	queue  []nsapi.SessionMessage // pushed, to write
	queued chan struct{}          // signalled when queue becomes non-empty

	wmu   sync.Mutex // the response: enc, flush, ws, wrong
	enc   *json.Encoder
	flush func() error
	ws    *wsOut // the WebSocket's pending message (nil on HTTP/2)
	wrong error  // writing failed, or the handler is done: nothing more is written

	mu       sync.Mutex
	sessions map[uint32]*nsserver.Session
	waits    map[uint64]context.CancelFunc // blocked lock requests by ID
}

// Push implements nsserver.SessionSink: never blocks.
func (st *sessionStream) Push(m nsapi.SessionMessage) bool {
	st.qmu.Lock()
	defer st.qmu.Unlock()
	if len(st.queue) >= sessionQueue {
		return false
	}
	st.queue = append(st.queue, m)
	if len(st.queue) == 1 {
		select {
		case st.queued <- struct{}{}:
		default:
		}
	}
	return true
}

// take returns what is queued and empties the queue.
func (st *sessionStream) take() []nsapi.SessionMessage {
	st.qmu.Lock()
	defer st.qmu.Unlock()
	q := st.queue
	st.queue = nil
	return q
}

// reply writes a reply at once.
func (st *sessionStream) reply(m nsapi.SessionMessage) {
	m.Kind = nsapi.SessionReply
	st.write(m, true)
}

// write writes m to the response, then flushes it if asked to; false
// once writing failed.
func (st *sessionStream) write(m nsapi.SessionMessage, flush bool) bool {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.wrong == nil {
		st.wrong = st.enc.Encode(m)
	}
	if st.wrong == nil && (flush || st.ws != nil && st.ws.Len() >= wsMessage) {
		st.wrong = st.flush()
	}
	return st.wrong == nil
}

// wsMessage is the size past which pushed messages queued for a
// WebSocket are sent without waiting for the end of the queue.
const wsMessage = 32 << 10

// wsOut collects the JSON values of one WebSocket message, in a buffer
// from wsBufs while it has any: an idle stream (one per mount) holds none.
type wsOut struct {
	c   *websocket.Conn
	buf *bytes.Buffer
}

var wsBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func (o *wsOut) Write(p []byte) (int, error) {
	if o.buf == nil {
		o.buf = wsBufs.Get().(*bytes.Buffer)
	}
	return o.buf.Write(p)
}

// Len is the size of the message collected.
func (o *wsOut) Len() int {
	if o.buf == nil {
		return 0
	}
	return o.buf.Len()
}

// Flush sends what was collected as one message.
func (o *wsOut) Flush() error {
	if o.Len() == 0 {
		return nil
	}
	err := o.c.WriteMessage(websocket.TextMessage, o.buf.Bytes())
	if o.buf.Cap() <= 8*wsMessage {
		o.buf.Reset()
		wsBufs.Put(o.buf)
	}
	o.buf = nil
	return err
}

// wsRequestLimit bounds one WebSocket message from a client.
const wsRequestLimit = 16 << 20

var sessionUpgrader = websocket.Upgrader{
	ReadBufferSize:  4 << 10,
	WriteBufferSize: 4 << 10,
	// Write buffers are taken from a pool for each message: an idle
	// stream (one per mount) holds none.
	WriteBufferPool: &sync.Pool{},
	// No Origin: a program. A browser's page names its origin, and
	// would open a session as the loopback user running the browser
	// (serveSession refuses it before, saying why).
	CheckOrigin: func(r *http.Request) bool { return r.Header.Get("Origin") == "" },
}

// hijacker lets the upgrade take the connection through wrappers of the
// ResponseWriter (http.ResponseController unwraps them).
type hijacker struct{ http.ResponseWriter }

func (h hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(h.ResponseWriter).Hijack()
}

func (st *sessionStream) fail(req nsapi.SessionRequest, err error) {
	st.reply(nsapi.SessionMessage{ID: req.ID, S: req.S, Error: &nsapi.ErrorBody{Kind: kerr.KindOf(err), Message: err.Error()}})
}

func (f *Namespace) serveSession(w http.ResponseWriter, r *http.Request) {
	ws := websocket.IsWebSocketUpgrade(r)
	switch {
	case ws && r.Method != http.MethodGet:
		writeJSONError(w, kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "a WebSocket session channel is opened with a GET"))
		return
	case !ws && r.Method != http.MethodPost:
		writeJSONError(w, kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "the session channel is a WebSocket or an HTTP/2 POST"))
		return
	case !ws && r.ProtoMajor != 2:
		w.Header().Set("Upgrade", "h2c")
		writeJSONError(w, kerr.New(kerr.Unsupported, "session", r.URL.Path, "the session channel is a WebSocket or needs HTTP/2 (h2c, or TLS with ALPN h2); this request came over "+r.Proto))
		return
	}
	p, err := f.principal(r)
	if err != nil {
		writeJSONError(w, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := &sessionStream{queued: make(chan struct{}, 1),
		sessions: map[uint32]*nsserver.Session{}, waits: map[uint64]context.CancelFunc{}}
	var dec *json.Decoder // of the client's requests
	if ws {
		if r.Header.Get("Origin") != "" {
			writeJSONError(w, kerr.New(kerr.Permission, "session", r.URL.Path, "a WebSocket session channel is not opened from a web page (the handshake names an Origin)"))
			return
		}
		conn, err := sessionUpgrader.Upgrade(hijacker{w}, r, nil)
		if err != nil {
			return // the upgrader answered
		}
		defer conn.Close()
		defer f.trackStream(conn)()
		conn.SetReadLimit(wsRequestLimit)
		st.ws = &wsOut{c: conn}
		st.enc, st.flush = json.NewEncoder(st.ws), st.ws.Flush
		dec = json.NewDecoder(&nsapi.MessageStream{Next: func() (io.Reader, error) {
			_, rd, err := conn.NextReader()
			return rd, err
		}})
	} else {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		if err := rc.Flush(); err != nil {
			return
		}
		st.enc, st.flush = json.NewEncoder(w), rc.Flush
		dec = json.NewDecoder(r.Body)
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		defer cancel()
		if st.ws != nil {
			// The reader waits on the connection, not on ctx.
			defer st.ws.c.Close()
		}
		for {
			select {
			case <-st.queued:
				q := st.take()
				for i, m := range q {
					if !st.write(m, i == len(q)-1) {
						return
					}
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	for ctx.Err() == nil {
		var req nsapi.SessionRequest
		if err := dec.Decode(&req); err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil && !websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
				f.Log.Debug("session stream ended", "err", err)
			}
			break
		}
		f.sessionRequest(ctx, p, st, req)
	}
	cancel()
	<-written
	// Blocked lock requests withdrawn by cancel may still answer: not on
	// a response whose handler has returned.
	st.wmu.Lock()
	st.wrong = errStreamEnded
	st.wmu.Unlock()
	st.mu.Lock()
	for _, ss := range st.sessions {
		f.NS.DetachSession(ss, st)
	}
	st.mu.Unlock()
}

// sessionRequest serves one request of a stream. Blocking lock requests
// wait in their own goroutine, so the stream goes on being read.
func (f *Namespace) sessionRequest(ctx context.Context, p auth.Principal, st *sessionStream, req nsapi.SessionRequest) {
	st.mu.Lock()
	ss := st.sessions[req.S]
	st.mu.Unlock()
	if req.Op == nsapi.SessionOpen {
		if ss != nil {
			st.fail(req, kerr.New(kerr.Exists, "session open", "", "this stream already carries a session with this index"))
			return
		}
		var hello nsapi.SessionHello
		if req.Hello != nil {
			hello = *req.Hello
		}
		ss, info, err := f.NS.OpenSession(ctx, p, hello, st, req.S)
		if err != nil {
			st.fail(req, err)
			return
		}
		st.mu.Lock()
		st.sessions[req.S] = ss
		st.mu.Unlock()
		st.reply(nsapi.SessionMessage{ID: req.ID, S: req.S, Session: &info})
		return
	}
	if ss == nil {
		st.fail(req, kerr.New(kerr.Invalid, "session "+req.Op, "", "no session is open on this stream with this index (open one first)"))
		return
	}
	answer := func(m nsapi.SessionMessage, err error) {
		switch {
		case err != nil:
			st.fail(req, err)
		case req.ID != 0:
			m.ID, m.S = req.ID, req.S
			st.reply(m)
		}
	}
	switch req.Op {
	case nsapi.SessionHeartbeat:
		answer(nsapi.SessionMessage{}, f.NS.SessionHeartbeat(ss, req.Open))
	case nsapi.SessionSubscribe:
		answer(nsapi.SessionMessage{Leases: f.NS.Subscribe(ctx, p, ss, req.Paths, req.List)}, nil)
	case nsapi.SessionStat:
		if len(req.Paths) != 1 {
			st.fail(req, kerr.New(kerr.Invalid, "session stat", "", "one path is required"))
			return
		}
		e, err := f.NS.Stat(ctx, p, req.Paths[0])
		answer(nsapi.SessionMessage{Entry: &e}, err)
	case nsapi.SessionRenew:
		l, err := f.NS.RenewLeases(ss, req.Inos)
		answer(nsapi.SessionMessage{Leases: l}, err)
	case nsapi.SessionUnsubscribe:
		answer(nsapi.SessionMessage{}, f.NS.Unsubscribe(ss, req.Inos))
	case nsapi.SessionGetLk:
		if req.Lock == nil {
			st.fail(req, kerr.New(kerr.Invalid, "getlk", "", "no lock given"))
			return
		}
		l, err := f.NS.SessionGetLk(ctx, p, ss, *req.Lock)
		answer(nsapi.SessionMessage{Lock: l}, err)
	case nsapi.SessionLock:
		if req.Lock == nil {
			st.fail(req, kerr.New(kerr.Invalid, "lock", "", "no lock given"))
			return
		}
		if !req.Lock.Wait {
			held, err := f.NS.SessionLock(ctx, p, ss, *req.Lock)
			answer(nsapi.SessionMessage{Held: held}, err)
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		st.mu.Lock()
		st.waits[req.ID] = cancel
		st.mu.Unlock()
		go func() {
			defer cancel()
			held, err := f.NS.SessionLock(wctx, p, ss, *req.Lock)
			st.mu.Lock()
			delete(st.waits, req.ID)
			st.mu.Unlock()
			answer(nsapi.SessionMessage{Held: held}, err)
		}()
	case nsapi.SessionCancel:
		st.mu.Lock()
		if c := st.waits[req.Cancel]; c != nil {
			c()
		}
		st.mu.Unlock()
		answer(nsapi.SessionMessage{}, nil)
	case nsapi.SessionClose:
		f.NS.CloseSession(ss)
		st.mu.Lock()
		delete(st.sessions, req.S)
		st.mu.Unlock()
		answer(nsapi.SessionMessage{}, nil)
	default:
		st.fail(req, kerr.New(kerr.Unsupported, "session", req.Op, "unknown session operation"))
	}
}

package httpfront

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

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
// own; stats, creates, nulls and batches of them are served by
// sessionWorkers, at most sessionCalls of a stream at once); pushed messages go through a queue per stream, written by one
// goroutine that takes what is queued, writes it and flushes: pushing
// never waits (nsserver.SessionSink), and a message the queue cannot take
// is lost, which the client sees as a gap in its session's sequence
// numbers. The queue grows as messages come (an idle stream holds none: a
// channel of sessionQueue messages held 512 KiB per stream, one stream
// per mount).

// sessionCalls bounds the stats, creates, nulls and batches of one
// stream served at once: past it, the stream is not read until one ends.
const sessionCalls = 64

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
	calls    chan struct{}                 // stats, creates, nulls and batches being served (bounded)
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
		sessions: map[uint32]*nsserver.Session{}, waits: map[uint64]context.CancelFunc{},
		calls: make(chan struct{}, sessionCalls)}
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
		info.Batch = true
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
	case nsapi.SessionStat, nsapi.SessionCreate, nsapi.SessionNull, nsapi.SessionBatch:
		if len(req.Batch) > nsapi.MaxSessionBatch {
			st.fail(req, kerr.New(kerr.Invalid, "session batch", "", fmt.Sprintf("%d requests: a batch holds at most %d", len(req.Batch), nsapi.MaxSessionBatch)))
			return
		}
		// Served beside the stream's reading, as a client's requests
		// in flight together are (their order is the client's to keep,
		// by waiting for a reply before what must follow it).
		st.calls <- struct{}{}
		if req.Op == nsapi.SessionBatch {
			go func() { // waits for its requests, served by sessionWorkers
				defer func() { <-st.calls }()
				answer(nsapi.SessionMessage{Batch: f.sessionBatch(ctx, p, req)}, nil)
			}()
			return
		}
		sessionWorkers.do(func() {
			defer func() { <-st.calls }()
			if m := f.sessionCall(ctx, p, req); m.Error != nil || req.ID != 0 {
				st.reply(m)
			}
		})
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

// sessionCall serves a namespace request framed on the session stream
// (stat, create, null) as the stream's principal, as its HTTP request
// would be served, and returns its reply.
func (f *Namespace) sessionCall(ctx context.Context, p auth.Principal, req nsapi.SessionRequest) nsapi.SessionMessage {
	m := nsapi.SessionMessage{Kind: nsapi.SessionReply, ID: req.ID, S: req.S}
	var err error
	switch req.Op {
	case nsapi.SessionNull:
		return m
	case nsapi.SessionStat, nsapi.SessionCreate:
		if len(req.Paths) != 1 {
			err = kerr.New(kerr.Invalid, "session "+req.Op, "", "one path is required")
			break
		}
		var e nsapi.Entry
		if req.Op == nsapi.SessionStat {
			e, err = f.NS.Stat(ctx, p, req.Paths[0])
		} else {
			e, err = f.NS.Touch(ctx, p, req.Paths[0], req.Exclusive, req.Mode)
		}
		if err == nil {
			m.Entry = &e
		}
	default:
		err = kerr.New(kerr.Unsupported, "session batch", req.Op, "not an operation a batch carries (stat, create, null)")
	}
	if err != nil {
		m.Error = &nsapi.ErrorBody{Kind: kerr.KindOf(err), Message: err.Error()}
	}
	return m
}

// sessionBatch serves the requests of a batch and returns their replies
// in order. Requests run concurrently (creates share the namespace's
// group commit, stats use every core) until one touches what an
// earlier request of the run touches: the run is waited for first, so
// the batch reads as if served one request after the other.
func (f *Namespace) sessionBatch(ctx context.Context, p auth.Principal, req nsapi.SessionRequest) []nsapi.SessionMessage {
	out := make([]nsapi.SessionMessage, len(req.Batch))
	var run batchRun
	var todo []int // the run's requests (indices)
	serve := func() {
		f.sessionRun(ctx, p, req, todo, out)
		todo, run = todo[:0], batchRun{}
	}
	for i, r := range req.Batch {
		if run.conflicts(r) {
			serve()
		}
		run.add(r)
		todo = append(todo, i)
	}
	serve()
	return out
}

// sessionRun serves the requests todo of a batch concurrently: each
// create on a worker of its own (their commits wait for the disk
// together), the others spread over as many workers as there are CPUs
// (a handover per stat cost as much as the stat).
func (f *Namespace) sessionRun(ctx context.Context, p auth.Principal, req nsapi.SessionRequest, todo []int, out []nsapi.SessionMessage) {
	var wg sync.WaitGroup
	call := func(i int) {
		r := req.Batch[i]
		r.S = req.S
		out[i] = f.sessionCall(ctx, p, r)
	}
	var rest []int
	for _, i := range todo {
		if req.Batch[i].Op != nsapi.SessionCreate {
			rest = append(rest, i)
			continue
		}
		wg.Add(1)
		sessionWorkers.do(func() { defer wg.Done(); call(i) })
	}
	per := (len(rest) + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0)
	for len(rest) > 0 {
		chunk := rest[:min(per, len(rest))]
		rest = rest[len(chunk):]
		wg.Add(1)
		sessionWorkers.do(func() {
			defer wg.Done()
			for _, i := range chunk {
				call(i)
			}
		})
	}
	wg.Wait()
}

// batchRun is what the requests running concurrently in a batch touch:
// a create writes its path and changes its directory, a stat reads its
// path. Creates in one directory run together.
type batchRun struct {
	read, written, dirs map[string]bool
}

// pathsOf is the path a request names and its directory (cleaned).
func pathsOf(r nsapi.SessionRequest) (p, dir string) {
	if len(r.Paths) != 1 {
		return "", ""
	}
	p = path.Clean("/" + r.Paths[0])
	return p, path.Dir(p)
}

func (b *batchRun) conflicts(r nsapi.SessionRequest) bool {
	p, dir := pathsOf(r)
	switch r.Op {
	case nsapi.SessionStat:
		return b.written[p] || b.dirs[p]
	case nsapi.SessionCreate:
		return b.written[p] || b.read[p] || b.read[dir]
	}
	return false
}

func (b *batchRun) add(r nsapi.SessionRequest) {
	if b.read == nil {
		b.read, b.written, b.dirs = map[string]bool{}, map[string]bool{}, map[string]bool{}
	}
	p, dir := pathsOf(r)
	switch r.Op {
	case nsapi.SessionStat:
		b.read[p] = true
	case nsapi.SessionCreate:
		b.written[p], b.dirs[dir] = true, true
	}
}

// sessionWorkers serve the namespace requests of session streams. A
// goroutine of its own per request grew its stack through the
// namespace's store (Pebble) each time: a third of the server's CPU
// serving batched stats went to runtime.copystack (docs/DESIGN-NOTES.md).
var sessionWorkers = &workers{max: 64, idle: 10 * time.Second, work: make(chan func())}

// workers runs functions on up to max goroutines, which stay while
// there is work and end after idle without any. Functions run by it
// must not wait for other functions run by it.
type workers struct {
	max  int32
	idle time.Duration
	work chan func()
	n    atomic.Int32
}

// do runs fn on a worker: an idle one, a new one while there are fewer
// than max, else the first to be free.
func (w *workers) do(fn func()) {
	select {
	case w.work <- fn:
		return
	default:
	}
	if w.n.Add(1) <= w.max {
		go w.loop(fn)
		return
	}
	w.n.Add(-1)
	w.work <- fn
}

func (w *workers) loop(fn func()) {
	defer w.n.Add(-1)
	t := time.NewTimer(w.idle)
	defer t.Stop()
	for {
		fn()
		t.Reset(w.idle)
		select {
		case fn = <-w.work:
		case <-t.C:
			select { // a sender that found every worker busy
			case fn = <-w.work:
			default:
				return
			}
		}
	}
}

// Package xrootd serves the XRootD protocol v5 (root://) as the 5.5 clients
// (xrdcp, xrdfs, Python XRootD) speak it, in front of two small interfaces:
// a Namespace (manager listener: metadata, and open answered by a redirect
// carrying a capability) and a DataStore (storage-server listener: bytes).
//
// Behaviour worth knowing:
//   - Namespace requests reaching a data listener, and opens there without
//     a capability, are redirected to Config.Manager.
//   - Creating a file implies kXR_mkpath, as xrootd does (xrdcp without -p
//     relies on it).
//   - kXR_pgwrite (what xrdcp uploads with) is always served and its page
//     CRCs verified; kXR_pgread is served, but only advertised (and so used
//     by clients for downloads) with Config.PageChecksums.
//   - Files still open for writing when their session ends are aborted.
//   - Every request body is bounded (Config.MaxFrame) except kXR_write,
//     which is streamed to the file in chunks; buffers in flight are bounded
//     per connection and per server.
package xrootd

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net"
	"os/user"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

const (
	writeTimeout   = 2 * time.Minute // a client that stops reading is dropped
	requestTimeout = 10 * time.Minute
	readChunk      = 8 << 20 // largest single read response; larger reads use kXR_oksofar
)

// Server is one XRootD endpoint (manager, data, or both).
type Server struct {
	cfg    Config
	log    *slog.Logger
	global *budget
	start  time.Time

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	sessions  map[[16]byte]*session
	closed    bool
	wg        sync.WaitGroup

	idCache sync.Map // user -> Identity (uid/gid)
	tpc     tpcRegistry

	nConns, nReqs, nErrs, nRedirs atomic.Int64
	bytesIn, bytesOut             atomic.Int64
}

// NewServer returns a server; call Serve for each listener.
func NewServer(cfg Config) *Server {
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = 16<<20 + 64<<10
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 4096
	}
	if cfg.MaxOpenFiles <= 0 {
		cfg.MaxOpenFiles = 16384
	}
	if cfg.ConnBudget <= 0 {
		cfg.ConnBudget = 64 << 20
	}
	if cfg.GlobalBudget <= 0 {
		cfg.GlobalBudget = 1 << 30
	}
	if cfg.CapabilityOpaque == "" {
		cfg.CapabilityOpaque = "kaon.cap"
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 30 * time.Minute
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 64
	}
	if cfg.ConnBudget < int64(cfg.MaxFrame) {
		cfg.ConnBudget = int64(cfg.MaxFrame)
	}
	if cfg.GlobalBudget < cfg.ConnBudget {
		cfg.GlobalBudget = cfg.ConnBudget
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Server{
		cfg:       cfg,
		log:       lg,
		global:    newBudget(cfg.GlobalBudget),
		start:     time.Now(),
		listeners: map[net.Listener]struct{}{},
		conns:     map[*conn]struct{}{},
		sessions:  map[[16]byte]*session{},
	}
}

// Serve accepts connections on l until Close.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return net.ErrClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := s.newConn(nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
		}()
	}
}

// Close stops all listeners and connections; open uploads are aborted.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// identifyConn maps a login on connection c to an Identity.
func (s *Server) identifyConn(name string, c *conn) Identity {
	if s.cfg.IdentifyConn != nil {
		id := s.cfg.IdentifyConn(name, c.nc.RemoteAddr(), c.nc.LocalAddr())
		id.Host = c.host
		return id
	}
	return s.identify(name, c.host)
}

// identify maps a login to an Identity.
func (s *Server) identify(name, host string) Identity {
	if s.cfg.Identify != nil {
		return s.cfg.Identify(name, host)
	}
	if v, ok := s.idCache.Load(name); ok {
		id := v.(Identity)
		id.Host = host
		return id
	}
	id := Identity{User: name, UID: 65534, GID: 65534}
	if u, err := user.Lookup(name); err == nil {
		if n, err := strconv.ParseUint(u.Uid, 10, 32); err == nil {
			id.UID = uint32(n)
		}
		if n, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
			id.GID = uint32(n)
		}
	}
	s.idCache.Store(name, id)
	id.Host = host
	return id
}

// session is the state shared by a login connection and the connections
// later bound to it with kXR_bind (xrdcp -S): identity and open files.
type session struct {
	id    [16]byte
	ident Identity
	host  string // client address seen at login; kXR_bind must come from it
	srv   *Server

	mu     sync.Mutex
	files  map[uint32]*openFile
	nextFH uint32
	paths  []*conn // index is the path id; [0] is the login connection
	ended  bool
	// pending: the login asked for kXR_auth, which has not succeeded yet;
	// the session may do nothing else and cannot be bound.
	pending atomic.Bool
}

func (s *Server) newSession(c *conn, ident Identity) (*session, error) {
	ss := &session{ident: ident, host: c.host, srv: s, files: map[uint32]*openFile{}, paths: []*conn{c}}
	if _, err := rand.Read(ss.id[:]); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sessions) >= s.cfg.MaxSessions {
		return nil, errors.New("too many sessions")
	}
	s.sessions[ss.id] = ss
	return ss, nil
}

func (s *Server) findSession(id [16]byte) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id]
}

// end tears the session down: files still open for writing were never
// closed by the client, so the upload is abandoned and aborted.
func (ss *session) end() {
	ss.srv.mu.Lock()
	delete(ss.srv.sessions, ss.id)
	ss.srv.mu.Unlock()
	ss.mu.Lock()
	if ss.ended {
		ss.mu.Unlock()
		return
	}
	ss.ended = true
	files := ss.files
	ss.files = map[uint32]*openFile{}
	paths := append([]*conn(nil), ss.paths...) // unbind edits ss.paths in place
	ss.mu.Unlock()
	for _, pc := range paths[1:] {
		if pc != nil {
			pc.nc.Close()
		}
	}
	for _, f := range files {
		f.waitIdle()
		var err error
		if f.write {
			err = f.df.Abort()
		} else {
			err = f.df.Close()
		}
		if err != nil {
			ss.srv.log.Warn("xrootd: closing file of ended session", "path", f.path, "err", err)
		}
	}
}

func (ss *session) addFile(f *openFile, max int) (uint32, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended || len(ss.files) >= max {
		return 0, false
	}
	for {
		ss.nextFH++
		if _, busy := ss.files[ss.nextFH]; !busy {
			break
		}
	}
	f.h = ss.nextFH
	ss.files[f.h] = f
	return f.h, true
}

// file returns the open file for h with one operation registered on it
// (its sequence number); the caller must call f.done(seq).
func (ss *session) file(h fhandle) (*openFile, uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	f := ss.files[h.id()]
	if f == nil {
		return nil, 0
	}
	return f, f.begin()
}

// take removes h from the table (close): later requests on h fail at once.
func (ss *session) take(h fhandle) *openFile {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	f := ss.files[h.id()]
	delete(ss.files, h.id())
	return f
}

// pathConn is the connection for path id p (responses of reads go there).
func (ss *session) pathConn(p byte, dflt *conn) *conn {
	if p == 0 {
		return dflt
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if int(p) < len(ss.paths) && ss.paths[p] != nil && !ss.paths[p].dead.Load() {
		return ss.paths[p]
	}
	return dflt
}

func (ss *session) bind(c *conn) (byte, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ended {
		return 0, false
	}
	for i := 1; i < len(ss.paths); i++ {
		if ss.paths[i] == nil {
			ss.paths[i] = c
			return byte(i), true
		}
	}
	if len(ss.paths) >= 256 {
		return 0, false
	}
	ss.paths = append(ss.paths, c)
	return byte(len(ss.paths) - 1), true
}

func (ss *session) unbind(c *conn) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i := 1; i < len(ss.paths); i++ {
		if ss.paths[i] == c {
			ss.paths[i] = nil
		}
	}
}

// openFile is one handle. Operations are numbered in arrival order so that
// sync, truncate and close run only after every request sent before them
// has finished (and close also after a pending sync/truncate).
type openFile struct {
	h     uint32
	path  string
	df    DataFile
	write bool

	mu       sync.Mutex
	cond     *sync.Cond
	next     uint64
	inflight map[uint64]struct{}
}

func newOpenFile(path string, df DataFile, write bool) *openFile {
	f := &openFile{path: path, df: df, write: write, inflight: map[uint64]struct{}{}}
	f.cond = sync.NewCond(&f.mu)
	return f
}

func (f *openFile) begin() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	f.inflight[f.next] = struct{}{}
	return f.next
}

func (f *openFile) done(seq uint64) {
	f.mu.Lock()
	delete(f.inflight, seq)
	f.mu.Unlock()
	f.cond.Broadcast()
}

// waitBefore waits until every operation registered before seq is done.
func (f *openFile) waitBefore(seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		earlier := false
		for s := range f.inflight {
			if s < seq {
				earlier = true
				break
			}
		}
		if !earlier {
			return
		}
		f.cond.Wait()
	}
}

// waitIdle waits until no operation is in flight.
func (f *openFile) waitIdle() { f.waitBefore(^uint64(0)) }

// conn is one TCP connection: a reader goroutine decodes frames and hands
// requests to goroutines (bounded by inflight slots and byte budgets); a
// mutex keeps each response frame contiguous on the wire.
type conn struct {
	srv    *Server
	nc     net.Conn
	br     *bufio.Reader
	host   string
	budget *budget
	slots  chan struct{}
	ctx    context.Context
	cancel context.CancelFunc

	wmu  sync.Mutex
	bw   *bufio.Writer // frames of a TLS connection (tlsio.go); nil in plaintext
	wire *tlsWire      // the TCP side of a TLS connection (tlsio.go)
	// tlsData: frames go over TLS (set with bw; read without wmu, which
	// a frame holds while it is written)
	tlsData atomic.Bool
	dead    atomic.Bool

	sess *session // set by login or bind; only the reader goroutine writes it
	tls  bool     // switched to TLS (reader goroutine)
	// authFailed is why kXR_auth was refused; later ones fail the same way.
	authFailed string
	// secExch is the security exchange under way (several kXR_auth
	// rounds), of protocol secName.
	secExch SecExchange
	secName string
	pathID  byte
	wg      sync.WaitGroup

	loginPID int32 // the client's pid from kXR_login (names it in tpc.org)
}

func (s *Server) newConn(nc net.Conn) *conn {
	host := nc.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{
		srv:    s,
		nc:     nc,
		br:     bufio.NewReaderSize(nc, 32<<10), // large bodies bypass it
		host:   host,
		budget: newBudget(s.cfg.ConnBudget),
		slots:  make(chan struct{}, s.cfg.MaxInflight),
		ctx:    ctx,
		cancel: cancel,
	}
}

func (c *conn) serve() {
	c.srv.nConns.Add(1)
	defer func() {
		c.dead.Store(true)
		c.cancel()
		c.nc.Close()
		c.budget.close()
		c.wg.Wait()
		if c.sess != nil {
			if c.pathID == 0 {
				c.sess.end()
			} else {
				c.sess.unbind(c)
			}
		}
		c.srv.mu.Lock()
		delete(c.srv.conns, c)
		c.srv.mu.Unlock()
		c.srv.nConns.Add(-1)
	}()
	var hs [handshakeLen]byte
	c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c.br, hs[:]); err != nil {
		return
	}
	if err := checkHandshake(hs[:]); err != nil {
		c.srv.log.Debug("xrootd: bad handshake", "client", c.host)
		return
	}
	var body [8]byte
	putU32(body[0:], protocolVersion)
	putU32(body[4:], 1) // kXR_DataServer
	if c.send([2]byte{}, kXR_ok, body[:]) != nil {
		return
	}
	var hdr [reqHeaderLen]byte
	for {
		var taken, gtaken int64
		alloc := func(n int) []byte {
			taken = c.budget.acquire(int64(n))
			if taken < 0 {
				return make([]byte, 0) // connection dying; ReadFull fails fast below
			}
			gtaken = c.srv.global.acquire(int64(n))
			return getBuf(n)
		}
		// Bound connections (kXR_bind) may only carry answers for a long
		// time; they live and die with their session instead.
		if c.pathID == 0 {
			c.nc.SetReadDeadline(time.Now().Add(c.srv.cfg.IdleTimeout))
		} else {
			c.nc.SetReadDeadline(time.Time{})
		}
		if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
			return
		}
		h := parseReqHeader(hdr[:])
		if h.ReqID == kXR_write && c.sess != nil && (int(h.Dlen) > c.srv.cfg.MaxFrame ||
			c.tls && int64(h.Dlen) > tlsChunk && !c.sess.pending.Load() && c.sess.ident.Err == nil) {
			// Clients send a big buffer as one kXR_write (Python's
			// File.write); stream it to the file instead of holding it.
			// Over TLS every large write streams (tlsio.go).
			if !c.streamWrite(&h) {
				return
			}
			continue
		}
		b, err := readBody(c.br, &h, c.srv.cfg.MaxFrame, alloc)
		release := func() {
			if b != nil {
				putBuf(b)
			}
			c.budget.release(taken)
			c.srv.global.release(gtaken)
		}
		if err != nil {
			release()
			if err == errFrameTooLarge {
				c.sendErr(h.StreamID, kXR_ArgTooLong, "request "+reqName(h.ReqID)+" body of "+
					strconv.Itoa(int(h.Dlen))+" bytes exceeds the limit of "+strconv.Itoa(c.srv.cfg.MaxFrame))
			}
			return
		}
		if taken < 0 {
			return
		}
		c.srv.nReqs.Add(1)
		c.srv.bytesIn.Add(int64(reqHeaderLen + len(b)))
		if !c.dispatch(&h, b, release) {
			return
		}
	}
}

// send writes one response frame: header and body parts in a single
// vectored write.
func (c *conn) send(sid [2]byte, status uint16, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	var hb [respHeaderLen]byte
	bufs := make(net.Buffers, 0, 1+len(parts))
	bufs = append(bufs, respHeader(hb[:], sid, status, n))
	for _, p := range parts {
		if len(p) > 0 {
			bufs = append(bufs, p)
		}
	}
	if err := c.write(bufs); err != nil {
		return err
	}
	c.srv.bytesOut.Add(int64(respHeaderLen + n))
	return nil
}

func (c *conn) sendErr(sid [2]byte, code uint32, msg string) error {
	c.srv.nErrs.Add(1)
	b := make([]byte, 4, 4+len(msg)+1)
	putU32(b, code)
	b = append(b, msg...)
	b = append(b, 0)
	return c.send(sid, kXR_error, b)
}

// sendWait asks the client to retry after secs seconds.
func (c *conn) sendWait(sid [2]byte, secs int, msg string) error {
	b := make([]byte, 4, 4+len(msg)+1)
	putU32(b, uint32(secs))
	b = append(b, msg...)
	b = append(b, 0)
	return c.send(sid, kXR_wait, b)
}

// sendRedirect sends the client to host:port; opaque (without '?') is
// appended by the client to the path it re-sends.
func (c *conn) sendRedirect(sid [2]byte, host string, port int, opaque string) error {
	c.srv.nRedirs.Add(1)
	b := make([]byte, 4, 4+len(host)+len(opaque)+1)
	putU32(b, uint32(int32(port)))
	b = append(b, host...)
	if opaque != "" {
		b = append(b, '?')
		b = append(b, opaque...)
	}
	return c.send(sid, kXR_redirect, b)
}

func putU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

func putU64(b []byte, v uint64) {
	putU32(b, uint32(v>>32))
	putU32(b[4:], uint32(v))
}

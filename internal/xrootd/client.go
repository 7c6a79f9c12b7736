package xrootd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Client is a small root:// client for reading one file at a time: what
// a storage server needs to pull a third-party copy. It logs in with the
// security protocols the server offers that it has credentials for
// (ClientConfig.Auth: gsi), else as unix; follows redirects and kXR_wait;
// and runs requests concurrently on one connection (responses are matched
// by stream id).
type Client struct {
	cfg  ClientConfig
	host string // the name the server was reached by (certificates name it)
	nc   net.Conn

	wmu sync.Mutex // one request frame at a time

	mu      sync.Mutex
	pending map[uint16]*waiter
	nextSID uint16
	err     error // the connection's end
}

// waiter is a request waiting for its answers; gone is closed when it
// stops waiting.
type waiter struct {
	ch   chan clientResp
	gone chan struct{}
}

// ClientConfig says how a Client connects and authenticates.
type ClientConfig struct {
	User string // login name (default "kaon")
	// Dial connects to host:port (a policy may check and resolve it);
	// default: a TCP dial.
	Dial func(ctx context.Context, hostport string) (net.Conn, error)
	// Auth are the security protocols the client can speak, by name.
	Auth []ClientAuth
}

// ClientAuth is one security protocol on the client's side.
type ClientAuth interface {
	Name() string
	// Begin starts a login's authentication, given the protocol's login
	// parameters and the server's host name; it returns the first
	// credentials.
	Begin(params, host string) (ClientAuthExchange, []byte, error)
}

// ClientAuthExchange takes a kXR_authmore answer and returns the next
// credentials.
type ClientAuthExchange interface {
	Next(more []byte) ([]byte, error)
}

type clientResp struct {
	status uint16
	body   []byte
}

// ServerError is an error a server answered (kXR_error).
type ServerError struct {
	Code uint32 // kXR_NotFound, kXR_NotAuthorized, ...
	Msg  string
}

func (e *ServerError) Error() string { return fmt.Sprintf("[%d] %s", e.Code, e.Msg) }

// Not found and not authorized answers, as a caller maps them.
func (e *ServerError) NotFound() bool      { return e.Code == kXR_NotFound }
func (e *ServerError) NotAuthorized() bool { return e.Code == kXR_NotAuthorized }

const (
	maxRedirects = 10
	maxWait      = 5 * time.Minute // total kXR_wait a request accepts
	clientIO     = 2 * time.Minute // no answer for this long: the connection is dead
)

// Dial connects to hostport ([user@]host:port), logs in and authenticates.
func Dial(ctx context.Context, hostport string, cfg ClientConfig) (*Client, error) {
	if i := strings.LastIndexByte(hostport, '@'); i >= 0 {
		hostport = hostport[i+1:]
	}
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("root://%s: %w", hostport, err)
	}
	if cfg.User == "" {
		cfg.User = "kaon"
	}
	if cfg.Dial == nil {
		cfg.Dial = func(ctx context.Context, hp string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", hp)
		}
	}
	nc, err := cfg.Dial(ctx, hostport)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, host: host, nc: nc, pending: map[uint16]*waiter{}}
	if err := c.start(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("root://%s: %w", hostport, err)
	}
	return c, nil
}

// Close ends the connection.
func (c *Client) Close() error { return c.nc.Close() }

// start runs the handshake, kXR_protocol, kXR_login and kXR_auth.
func (c *Client) start(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok {
		c.nc.SetDeadline(dl)
	} else {
		c.nc.SetDeadline(time.Now().Add(clientIO))
	}
	hs := make([]byte, handshakeLen)
	binary.BigEndian.PutUint32(hs[12:], 4)
	binary.BigEndian.PutUint32(hs[16:], 2012)
	if _, err := c.nc.Write(hs); err != nil {
		return err
	}
	var rh [respHeaderLen]byte
	if _, err := io.ReadFull(c.nc, rh[:]); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if n := binary.BigEndian.Uint32(rh[4:]); n != 8 || binary.BigEndian.Uint16(rh[2:]) != kXR_ok {
		return errors.New("handshake: not an XRootD server")
	}
	if _, err := io.ReadFull(c.nc, make([]byte, 8)); err != nil {
		return err
	}
	c.nc.SetDeadline(time.Time{})
	go c.readLoop()
	var p [16]byte
	binary.BigEndian.PutUint32(p[0:], protocolVersion)
	p[5] = 0x03 // kXR_ExpLogin | kXR_ExpBind: the server's flags
	if _, err := c.call(ctx, kXR_protocol, p, nil); err != nil {
		return fmt.Errorf("protocol: %w", err)
	}
	p = [16]byte{}
	binary.BigEndian.PutUint32(p[0:], uint32(os.Getpid()))
	copy(p[4:12], c.cfg.User)
	p[14] = 5 // capver: kXR_ver005
	r, err := c.call(ctx, kXR_login, p, nil)
	if err != nil {
		return fmt.Errorf("login: %w", err)
	}
	if len(r) <= 16 {
		return nil // no authentication asked for
	}
	return c.authenticate(ctx, strings.TrimRight(string(r[16:]), "\x00"))
}

// authenticate tries the offered protocols in the server's order.
func (c *Client) authenticate(ctx context.Context, sec string) error {
	var errs []string
	for _, offer := range strings.Split(sec, "&P=")[1:] {
		name, params, _ := strings.Cut(offer, ",")
		var cred []byte
		var x ClientAuthExchange
		switch {
		case name == "unix":
			cred = []byte("unix\x00" + c.cfg.User + " nogroup\x00")
		default:
			for _, a := range c.cfg.Auth {
				if a.Name() == name {
					var err error
					if x, cred, err = a.Begin(params, c.host); err != nil {
						errs = append(errs, name+": "+err.Error())
						cred = nil
					}
				}
			}
		}
		if cred == nil {
			continue
		}
		err := c.authRounds(ctx, name, x, cred)
		if err == nil {
			return nil
		}
		errs = append(errs, name+": "+err.Error())
		var se *ServerError
		if !errors.As(err, &se) { // a broken exchange: no other protocol on this connection
			break
		}
	}
	if len(errs) == 0 {
		errs = append(errs, "the server offers no protocol this client has credentials for ("+sec+")")
	}
	return errors.New("authentication failed: " + strings.Join(errs, "; "))
}

func (c *Client) authRounds(ctx context.Context, name string, x ClientAuthExchange, cred []byte) error {
	var p [16]byte
	copy(p[12:], name)
	for i := 0; ; i++ {
		status, body, err := c.exchange(ctx, kXR_auth, p, cred)
		if err != nil {
			return err
		}
		if status == kXR_ok {
			return nil
		}
		if status != kXR_authmore || x == nil || i > 8 {
			return fmt.Errorf("unexpected answer %d", status)
		}
		if cred, err = x.Next(body); err != nil {
			return err
		}
	}
}

// readLoop hands every response to the request it answers.
func (c *Client) readLoop() {
	var rh [respHeaderLen]byte
	for {
		_, err := io.ReadFull(c.nc, rh[:])
		var body []byte
		if err == nil {
			body = make([]byte, binary.BigEndian.Uint32(rh[4:]))
			_, err = io.ReadFull(c.nc, body)
		}
		if err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("connection lost: %w", err)
			for _, w := range c.pending {
				close(w.ch)
			}
			c.pending = map[uint16]*waiter{}
			c.mu.Unlock()
			return
		}
		sid := binary.BigEndian.Uint16(rh[0:])
		c.mu.Lock()
		w := c.pending[sid]
		c.mu.Unlock()
		if w != nil {
			select {
			case w.ch <- clientResp{binary.BigEndian.Uint16(rh[2:]), body}:
			case <-w.gone:
			}
		}
	}
}

// exchange sends one request and returns its final answer (kXR_oksofar
// parts joined; kXR_wait waited out and the request sent again).
func (c *Client) exchange(ctx context.Context, req uint16, params [16]byte, body []byte) (uint16, []byte, error) {
	waited := time.Duration(0)
	for {
		w := &waiter{ch: make(chan clientResp, 4), gone: make(chan struct{})}
		ch := w.ch
		c.mu.Lock()
		if c.err != nil {
			c.mu.Unlock()
			return 0, nil, c.err
		}
		c.nextSID++
		sid := c.nextSID
		c.pending[sid] = w
		c.mu.Unlock()
		done := func() {
			c.mu.Lock()
			delete(c.pending, sid)
			c.mu.Unlock()
			close(w.gone)
		}
		frame := make([]byte, reqHeaderLen, reqHeaderLen+len(body))
		binary.BigEndian.PutUint16(frame[0:], sid)
		binary.BigEndian.PutUint16(frame[2:], req)
		copy(frame[4:20], params[:])
		binary.BigEndian.PutUint32(frame[20:], uint32(len(body)))
		frame = append(frame, body...)
		c.wmu.Lock()
		c.nc.SetWriteDeadline(time.Now().Add(clientIO))
		_, err := c.nc.Write(frame)
		c.wmu.Unlock()
		if err != nil {
			done()
			return 0, nil, err
		}
		var out []byte
		var r clientResp
		for more := true; more; {
			select {
			case <-ctx.Done():
				done()
				return 0, nil, ctx.Err()
			case <-time.After(clientIO):
				done()
				c.nc.Close()
				return 0, nil, fmt.Errorf("no answer within %v", clientIO)
			case resp, ok := <-ch:
				if !ok {
					c.mu.Lock()
					err := c.err
					c.mu.Unlock()
					return 0, nil, err
				}
				r = resp
				if r.status == kXR_oksofar {
					out = append(out, r.body...)
					continue
				}
				more = false
			}
		}
		done()
		switch r.status {
		case kXR_error:
			if len(r.body) < 4 {
				return 0, nil, &ServerError{Code: kXR_ServerError, Msg: "malformed error"}
			}
			return 0, nil, &ServerError{Code: binary.BigEndian.Uint32(r.body), Msg: strings.TrimRight(string(r.body[4:]), "\x00")}
		case kXR_wait:
			secs := 1
			if len(r.body) >= 4 {
				secs = max(1, min(int(binary.BigEndian.Uint32(r.body)), 30))
			}
			if waited += time.Duration(secs) * time.Second; waited > maxWait {
				return 0, nil, fmt.Errorf("the server kept asking to wait for %v", maxWait)
			}
			select {
			case <-ctx.Done():
				return 0, nil, ctx.Err()
			case <-time.After(time.Duration(secs) * time.Second):
			}
			continue
		}
		return r.status, append(out, r.body...), nil
	}
}

// call is exchange for requests whose answer is kXR_ok.
func (c *Client) call(ctx context.Context, req uint16, params [16]byte, body []byte) ([]byte, error) {
	status, b, err := c.exchange(ctx, req, params, body)
	if err != nil {
		return nil, err
	}
	if status != kXR_ok {
		return nil, fmt.Errorf("unexpected answer %d to request %d", status, req)
	}
	return b, nil
}

// RemoteFile is a file open for reading or writing.
type RemoteFile struct {
	c    *Client
	fh   [4]byte
	Size int64 // at open (reads only)
}

// OpenRead opens path (with "?opaque" if any) for reading, following
// redirects (each to a new connection, the file's Conn, which the caller
// closes after the file). The file's size comes with the open.
func (c *Client) OpenRead(ctx context.Context, path string) (*RemoteFile, error) {
	f, st, err := c.open(ctx, path, kXR_open_read|kXR_retstat, 0)
	if err != nil {
		return nil, err
	}
	fields := strings.Fields(st)
	if len(fields) < 2 {
		f.abandon(ctx, c)
		return nil, errors.New("open: the server did not return the file's size")
	}
	if f.Size, err = strconv.ParseInt(fields[1], 10, 64); err != nil {
		f.abandon(ctx, c)
		return nil, errors.New("open: malformed stat answer")
	}
	return f, nil
}

// Create opens path for writing as a new file, replacing any file there
// and making missing parent directories (xrdcp -f -p), with permissions
// mode (0: the server's default).
func (c *Client) Create(ctx context.Context, path string, mode uint32) (*RemoteFile, error) {
	f, _, err := c.open(ctx, path, kXR_delete|kXR_mkpath, uint16(mode&0o7777))
	return f, err
}

// OpenUpdate opens the existing file at path for reading and writing in
// place.
func (c *Client) OpenUpdate(ctx context.Context, path string) (*RemoteFile, error) {
	f, _, err := c.open(ctx, path, kXR_open_updt, 0)
	return f, err
}

// open sends kXR_open with options and mode, following redirects; it
// returns the file and the stat line that came with it (kXR_retstat).
func (c *Client) open(ctx context.Context, path string, options, mode uint16) (*RemoteFile, string, error) {
	var p [16]byte
	binary.BigEndian.PutUint16(p[0:], mode)
	binary.BigEndian.PutUint16(p[2:], options)
	cur, b, err := c.follow(ctx, kXR_open, p, path)
	if err != nil {
		return nil, "", err
	}
	if len(b) < 4 {
		cur.closeIfNot(c)
		return nil, "", fmt.Errorf("open %s: short answer", stripOpaque(path))
	}
	f := &RemoteFile{c: cur}
	copy(f.fh[:], b[:4])
	st := ""
	if len(b) > 12 {
		st = strings.TrimRight(string(b[12:]), "\x00")
	}
	return f, st, nil
}

// abandon closes a file opened on c that the caller will not get, and
// the connection a redirect opened for it.
func (f *RemoteFile) abandon(ctx context.Context, c *Client) {
	f.Close(ctx)
	f.c.closeIfNot(c)
}

// follow sends a request on a path (body: the path, with "?opaque" if
// any), following redirects (each to a new connection; the opaque of a
// redirect replaces the path's). It returns the connection that answered
// kXR_ok (c, or a new one the caller closes) and the answer.
func (c *Client) follow(ctx context.Context, req uint16, params [16]byte, path string) (*Client, []byte, error) {
	cur := c
	for hops := 0; ; hops++ {
		status, b, err := cur.exchange(ctx, req, params, []byte(path))
		if err != nil {
			cur.closeIfNot(c)
			return nil, nil, err
		}
		switch status {
		case kXR_ok:
			return cur, b, nil
		case kXR_redirect:
			if hops >= maxRedirects || len(b) < 4 {
				cur.closeIfNot(c)
				return nil, nil, errors.New("too many redirects")
			}
			port := int(int32(binary.BigEndian.Uint32(b)))
			target, opaque, _ := strings.Cut(string(b[4:]), "?")
			// An IPv6 literal comes bracketed (RedirectHost).
			target = strings.TrimSuffix(strings.TrimPrefix(target, "["), "]")
			if i := strings.IndexByte(opaque, '?'); i >= 0 { // "?cgi?token"
				opaque = opaque[:i]
			}
			next, err := Dial(ctx, net.JoinHostPort(target, strconv.Itoa(port)), cur.cfg)
			cur.closeIfNot(c)
			if err != nil {
				return nil, nil, err
			}
			cur = next
			if opaque != "" {
				path = stripOpaque(path) + "?" + opaque
			}
		default:
			cur.closeIfNot(c)
			return nil, nil, fmt.Errorf("unexpected answer %d", status)
		}
	}
}

// pathCall sends a request on a path and closes the connection a
// redirect opened for it. A server's refusal (ServerError) names the
// operation and the path itself.
func (c *Client) pathCall(ctx context.Context, req uint16, params [16]byte, path string) ([]byte, error) {
	cur, b, err := c.follow(ctx, req, params, path)
	if err != nil {
		return nil, err
	}
	cur.closeIfNot(c)
	return b, nil
}

func stripOpaque(path string) string {
	p, _, _ := strings.Cut(path, "?")
	return p
}

// StatInfo is what kXR_stat tells about a path.
type StatInfo struct {
	ID    uint64
	Size  int64
	Flags int // kXR_isDir, kXR_readable, ...
	MTime time.Time
}

// IsDir says whether the path is a directory.
func (s StatInfo) IsDir() bool { return s.Flags&kXR_isDir != 0 }

// Stat returns what the server knows of path.
func (c *Client) Stat(ctx context.Context, path string) (StatInfo, error) {
	b, err := c.pathCall(ctx, kXR_stat, [16]byte{}, path)
	if err != nil {
		return StatInfo{}, err
	}
	// "id size flags mtime ..."
	f := strings.Fields(strings.TrimRight(string(b), "\x00"))
	var st StatInfo
	var errs [4]error
	if len(f) >= 4 {
		st.ID, errs[0] = strconv.ParseUint(f[0], 10, 64)
		st.Size, errs[1] = strconv.ParseInt(f[1], 10, 64)
		st.Flags, errs[2] = strconv.Atoi(f[2])
		var mt int64
		mt, errs[3] = strconv.ParseInt(f[3], 10, 64)
		st.MTime = time.Unix(mt, 0)
	}
	if len(f) < 4 || errors.Join(errs[:]...) != nil {
		return StatInfo{}, fmt.Errorf("stat %s: malformed answer %q", stripOpaque(path), b)
	}
	return st, nil
}

// Dirlist returns the names in the directory path.
func (c *Client) Dirlist(ctx context.Context, path string) ([]string, error) {
	b, err := c.pathCall(ctx, kXR_dirlist, [16]byte{}, path)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range strings.Split(strings.TrimRight(string(b), "\x00\n"), "\n") {
		if n != "" {
			names = append(names, n)
		}
	}
	return names, nil
}

// Mkdir makes the directory path with permissions mode (0: the server's
// default), and its missing parents if parents is set.
func (c *Client) Mkdir(ctx context.Context, path string, mode uint32, parents bool) error {
	var p [16]byte
	if parents {
		p[0] = kXR_mkdirpath
	}
	binary.BigEndian.PutUint16(p[14:], uint16(mode&0o7777))
	_, err := c.pathCall(ctx, kXR_mkdir, p, path)
	return err
}

// Mv renames from to to.
func (c *Client) Mv(ctx context.Context, from, to string) error {
	var p [16]byte
	binary.BigEndian.PutUint16(p[14:], uint16(len(from)))
	_, err := c.pathCall(ctx, kXR_mv, p, from+" "+to)
	return err
}

// Rm removes the file path.
func (c *Client) Rm(ctx context.Context, path string) error {
	_, err := c.pathCall(ctx, kXR_rm, [16]byte{}, path)
	return err
}

// Rmdir removes the empty directory path.
func (c *Client) Rmdir(ctx context.Context, path string) error {
	_, err := c.pathCall(ctx, kXR_rmdir, [16]byte{}, path)
	return err
}

// Checksum returns the file's checksum of type algo ("adler32", ...) as
// the server renders it (hex for adler32).
func (c *Client) Checksum(ctx context.Context, path, algo string) (string, error) {
	var p [16]byte
	binary.BigEndian.PutUint16(p[0:], kXR_Qcksum)
	b, err := c.pathCall(ctx, kXR_query, p, stripOpaque(path)+"?cks.type="+algo)
	if err != nil {
		return "", err
	}
	// "<algo> <value>"
	f := strings.Fields(strings.TrimRight(string(b), "\x00\n "))
	if len(f) != 2 {
		return "", fmt.Errorf("query checksum %s: malformed answer %q", stripOpaque(path), b)
	}
	return f[1], nil
}

func (c *Client) closeIfNot(keep *Client) {
	if c != keep {
		c.Close()
	}
}

// ReadAt reads len(p) bytes at off (fewer only at the end of the file).
func (f *RemoteFile) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	var params [16]byte
	copy(params[0:4], f.fh[:])
	binary.BigEndian.PutUint64(params[4:], uint64(off))
	binary.BigEndian.PutUint32(params[12:], uint32(len(p)))
	b, err := f.c.call(ctx, kXR_read, params, nil)
	if err != nil {
		return 0, err
	}
	n := copy(p, b)
	if n < len(p) && off+int64(n) < f.Size {
		return n, io.ErrUnexpectedEOF
	}
	return n, nil
}

// writeChunk is the most a kXR_write carries (xrdcp's default chunk).
const writeChunk = 8 << 20

// WriteAt writes p at off.
func (f *RemoteFile) WriteAt(ctx context.Context, p []byte, off int64) error {
	for len(p) > 0 {
		n := min(len(p), writeChunk)
		var params [16]byte
		copy(params[0:4], f.fh[:])
		binary.BigEndian.PutUint64(params[4:], uint64(off))
		if _, err := f.c.call(ctx, kXR_write, params, p[:n]); err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// Close closes the file; an upload is committed by its close. The
// connection a redirect opened for the file (Conn) stays open.
func (f *RemoteFile) Close(ctx context.Context) error {
	var params [16]byte
	copy(params[0:4], f.fh[:])
	_, err := f.c.call(ctx, kXR_close, params, nil)
	return err
}

// Conn is the client the file was opened on (the redirect's target).
func (f *RemoteFile) Conn() *Client { return f.c }

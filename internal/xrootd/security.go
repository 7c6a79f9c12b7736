package xrootd

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"
)

// TLS and the security protocols, as XRootD 5 clients negotiate them.
//
// TLS is an upgrade of the plaintext connection (XProtocol.hh, kXR_protocol):
// the client's kXR_protocol says it can (kXR_ableTLS) or wants
// (kXR_wantTLS, a roots:// URL) TLS; a server with TLS answers with
// kXR_haveTLS, and with kXR_gotoTLS when the connection switches, right
// after that response, on the same socket, before login or bind. With
// RequireTLS every able client is switched (and told kXR_tlsLogin |
// kXR_tlsData); a client that cannot switch is refused at login and bind
// with kXR_TLSRequired. A client redirected to a data listener keeps its
// roots:// and switches there too.
//
// Security protocols (SecProtocol: ztn for bearer tokens, gsi for grid
// proxies, ...) are offered in the login response in Config.Security's
// order, each as "&P=<name>,<parameters>", then "&P=unix", so a client
// holding none of their credentials logs in as its connection says (and
// learns, at its first request, why a server that needs credentials
// refuses it). XRootD clients try them in that order. Until kXR_auth
// succeeds the session may do nothing. A protocol may take several
// kXR_auth rounds, answered with kXR_authmore. A malformed exchange fails
// kXR_auth with kXR_NotAuthorized; a refused credential (a Refusal: an
// expired proxy, a forged token) ends the authentication with a session
// that refuses every request with the reason (the only way the reason
// reaches the user of a 5.5 client), and both fail every later kXR_auth,
// so a client never falls back to a weaker identity.
//
// ztn (tokens) needs TLS: its parameters are "0:<max token size>:"; the
// client's kXR_auth with credential type "ztn" carries "ztn\0", version
// 0, 'T', two reserved bytes, the token length (16 bits, big-endian,
// counting a final NUL) and the token.

// TLS flags and codes (XProtocol.hh).
const (
	kXR_ableTLS = 0x02 // kXR_protocol request flags
	kXR_wantTLS = 0x04

	kXR_haveTLS  = 0x80000000 // kXR_protocol response flags
	kXR_gotoTLS  = 0x40000000
	kXR_tlsData  = 0x01000000
	kXR_tlsLogin = 0x04000000

	kXR_TLSRequired = 3028
)

// maxTokenSize is what the login response allows a ztn token (xrootd's
// default 4 KiB is tight for tokens with many scopes).
const maxTokenSize = 16 << 10

// tlsHandshakeTimeout bounds the TLS handshake after kXR_gotoTLS.
const tlsHandshakeTimeout = 30 * time.Second

// protocolTLS returns the TLS flags of the kXR_protocol response to a
// request with flags reqFlags, and whether the connection switches.
func (c *conn) protocolTLS(reqFlags byte) (uint32, bool) {
	cfg := &c.srv.cfg
	if cfg.TLS == nil {
		return 0, false
	}
	flags := uint32(kXR_haveTLS)
	if cfg.RequireTLS {
		flags |= kXR_tlsLogin | kXR_tlsData
	}
	if c.tls {
		return flags, false
	}
	able := reqFlags&(kXR_ableTLS|kXR_wantTLS) != 0
	if reqFlags&kXR_wantTLS != 0 || (cfg.RequireTLS && able) {
		return flags | kXR_gotoTLS, true
	}
	return flags, false
}

// startTLS switches the connection to TLS (the kXR_protocol response has
// been sent in plaintext); bytes already read ahead are the handshake's.
func (c *conn) startTLS() error {
	var pre []byte
	if n := c.br.Buffered(); n > 0 {
		pre, _ = c.br.Peek(n)
		pre = append([]byte(nil), pre...)
	}
	var raw net.Conn = c.nc
	if len(pre) > 0 {
		raw = &readAhead{Conn: raw, pre: pre}
	}
	wire := newTLSWire(raw)
	tc := tls.Server(wire, c.srv.cfg.TLS)
	tc.SetDeadline(time.Now().Add(tlsHandshakeTimeout))
	if err := tc.Handshake(); err != nil {
		c.srv.log.Debug("xrootd: TLS handshake failed", "client", c.host, "err", err)
		return err
	}
	tc.SetDeadline(time.Time{})
	c.srv.mu.Lock()
	c.wmu.Lock()
	c.nc = tc
	c.bw = bufio.NewWriterSize(tc, tlsRecord)
	c.wire = wire
	c.tlsData.Store(true)
	c.wmu.Unlock()
	c.srv.mu.Unlock()
	c.br = bufio.NewReaderSize(tc, 32<<10)
	c.tls = true
	return nil
}

// readAhead gives back bytes buffered before the rest of the stream.
type readAhead struct {
	net.Conn
	pre []byte
}

func (r *readAhead) Read(p []byte) (int, error) {
	if len(r.pre) > 0 {
		n := copy(p, r.pre)
		r.pre = r.pre[n:]
		return n, nil
	}
	return r.Conn.Read(p)
}

// requireTLS refuses op on a plaintext connection of a TLS-only server.
func (c *conn) requireTLS(sid [2]byte, op string) (refused, ok bool) {
	if !c.srv.cfg.RequireTLS || c.tls {
		return false, true
	}
	return true, c.sendErr(sid, kXR_TLSRequired, op+": this server requires TLS (use roots://, or a client that can switch to TLS)") == nil
}

// kXR_authmore answers a kXR_auth that needs another round.
const kXR_authmore = 4002

// SecProtocol is a security protocol a server offers at login.
type SecProtocol interface {
	// Name is the protocol's name, the credential type of its kXR_auth
	// requests ("gsi", "ztn"; at most 4 characters).
	Name() string
	// Params is what the login response says of it on a connection
	// ("v:10600,c:ssl,ca:..."); false: not offered there.
	Params(tls bool) (string, bool)
	// Begin starts the authentication of one login.
	Begin(p Peer) SecExchange
}

// Peer is the client a SecExchange authenticates.
type Peer struct {
	User          string // the login name (claimed, not proven)
	Remote, Local net.Addr
	TLS           bool
}

// SecExchange is one login's authentication by one protocol.
type SecExchange interface {
	// Step takes the credentials of one kXR_auth. It returns what to send
	// back with kXR_authmore for another round, or (more nil) the identity
	// the credentials prove. An error fails the authentication: a
	// *Refusal leaves a session that refuses every request with its
	// message, anything else fails the kXR_auth (a malformed exchange).
	Step(ctx context.Context, cred []byte) (more []byte, id Identity, err error)
}

// Refusal is a credential a security protocol refused (expired, forged,
// unknown): its message is what the client is told.
type Refusal struct{ Msg string }

func (r *Refusal) Error() string { return r.Msg }

// loginSecurity is what the login response asks of the client: the
// protocols offered on this connection, then unix.
func (c *conn) loginSecurity() string {
	var b strings.Builder
	for _, p := range c.srv.cfg.Security {
		if params, ok := p.Params(c.tls); ok {
			b.WriteString("&P=" + p.Name() + "," + params)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return b.String() + "&P=unix"
}

// offered is the protocol named cred offered on this connection (nil: none).
func (c *conn) offered(cred string) SecProtocol {
	for _, p := range c.srv.cfg.Security {
		if _, ok := p.Params(c.tls); ok && p.Name() == cred {
			return p
		}
	}
	return nil
}

// doAuth handles kXR_auth.
func (c *conn) doAuth(h *reqHeader, body []byte) bool {
	sid := h.StreamID
	if c.sess == nil {
		return c.sendErr(sid, kXR_NotAuthorized, "auth: login first") == nil
	}
	if c.authFailed != "" {
		return c.sendErr(sid, kXR_NotAuthorized, c.authFailed) == nil
	}
	if !c.sess.pending.Load() {
		return c.sendErr(sid, kXR_Unsupported, "auth: this session needs no authentication") == nil
	}
	cred := cstring(h.Params[12:16])
	if cred == "unix" {
		// The client has none of the credentials offered: it is who its
		// connection says (the claimed user name in the credentials is
		// not trusted).
		c.sess.pending.Store(false)
		return c.send(sid, kXR_ok) == nil
	}
	p := c.offered(cred)
	if p == nil {
		return c.refuseAuth(sid, "auth: security protocol "+strconv.Quote(cred)+" is not offered by this server")
	}
	if c.secExch == nil || c.secName != cred {
		c.secExch, c.secName = p.Begin(Peer{User: c.sess.ident.User, Remote: c.nc.RemoteAddr(), Local: c.nc.LocalAddr(), TLS: c.tls}), cred
	}
	ctx, cancel := context.WithTimeout(c.ctx, requestTimeout)
	defer cancel()
	more, id, err := c.secExch.Step(ctx, body)
	var refused *Refusal
	switch {
	case errors.As(err, &refused):
		c.secExch = nil
		return c.refuseCredential(sid, cred+": "+refused.Msg)
	case err != nil:
		c.secExch = nil
		return c.refuseAuth(sid, cred+": "+err.Error())
	case more != nil:
		return c.send(sid, kXR_authmore, more) == nil
	}
	c.secExch = nil
	id.Host = c.host
	c.sess.ident = id
	c.sess.pending.Store(false)
	return c.send(sid, kXR_ok) == nil
}

// refuseAuth answers a failed kXR_auth; the session stays unauthenticated
// and every later kXR_auth on it fails the same way.
func (c *conn) refuseAuth(sid [2]byte, msg string) bool {
	c.authFailed = msg
	c.srv.log.Info("xrootd: authentication refused", "client", c.host, "reason", msg)
	return c.sendErr(sid, kXR_NotAuthorized, msg) == nil
}

// refuseCredential answers kXR_auth with a refused credential: the
// authentication step succeeds, but the session is nobody's and every
// request of it is refused with kXR_NotAuthorized and msg. XrdCl shows a
// failed kXR_auth's message only in its debug log and then reports "No
// protocols left to try"; a request's error reaches the user ("[3010]
// ... token refused: expired"). A later kXR_auth of the connection fails
// with msg, so a refused credential never becomes a weaker identity.
func (c *conn) refuseCredential(sid [2]byte, msg string) bool {
	c.authFailed = msg
	c.srv.log.Info("xrootd: authentication refused", "client", c.host, "reason", msg)
	c.sess.ident = Identity{User: "nobody", UID: 65534, GID: 65534, Host: c.host, Err: errors.New(msg)}
	c.sess.pending.Store(false)
	return c.send(sid, kXR_ok) == nil
}

// Ztn is the ztn security protocol (bearer tokens, on TLS connections):
// authenticate says who a token is (an error refuses it).
func Ztn(authenticate func(ctx context.Context, user string, remote, local net.Addr, token string) (Identity, error)) SecProtocol {
	return ztnProtocol{authenticate}
}

type ztnProtocol struct {
	authenticate func(ctx context.Context, user string, remote, local net.Addr, token string) (Identity, error)
}

func (ztnProtocol) Name() string { return "ztn" }

// Params: "0:<max token size>:" (version 0), on TLS connections only (a
// bearer token over plaintext is a leaked token).
func (ztnProtocol) Params(tls bool) (string, bool) {
	return "0:" + strconv.Itoa(maxTokenSize) + ":", tls
}

func (z ztnProtocol) Begin(p Peer) SecExchange { return &ztnExchange{z, p} }

type ztnExchange struct {
	ztnProtocol
	peer Peer
}

func (z *ztnExchange) Step(ctx context.Context, cred []byte) ([]byte, Identity, error) {
	tok, perr := parseZtn(cred)
	if perr != "" {
		return nil, Identity{}, errors.New(perr)
	}
	id, err := z.authenticate(ctx, z.peer.User, z.peer.Remote, z.peer.Local, tok)
	if err != nil {
		return nil, Identity{}, &Refusal{"token refused: " + err.Error()}
	}
	return nil, id, nil
}

// parseZtn extracts the token of ztn credentials ("" error: fine).
func parseZtn(b []byte) (string, string) {
	const hdr = 10 // "ztn\0", version, operation, 2 reserved, 16-bit length
	if len(b) < 8 || string(b[:4]) != "ztn\x00" {
		return "", "malformed credentials"
	}
	if b[4] != 0 {
		return "", "unsupported version " + strconv.Itoa(int(b[4]))
	}
	switch b[5] {
	case 'T':
	case 'S':
		return "", "this server lists no token issuers; send a token (BEARER_TOKEN, BEARER_TOKEN_FILE)"
	default:
		return "", "unknown operation"
	}
	if len(b) < hdr {
		return "", "malformed credentials"
	}
	n := int(binary.BigEndian.Uint16(b[8:10]))
	switch {
	case n < 2:
		return "", "empty token"
	case hdr+n > len(b):
		return "", "token longer than the credentials"
	case n > maxTokenSize:
		return "", "token too large"
	case b[hdr+n-1] != 0:
		return "", "token without a final NUL"
	}
	tok := strings.TrimSpace(string(b[hdr : hdr+n-1]))
	if tok == "" || strings.IndexByte(tok, 0) >= 0 {
		return "", "malformed token"
	}
	return tok, ""
}

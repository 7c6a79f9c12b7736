package httpserve

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// Lingering close. An endpoint that answers a request without reading
// its body (the namespace redirects a PUT to a storage server; any
// endpoint may refuse an upload) leaves the body on the wire, and
// net/http closes such a connection after the answer. Closing a socket
// with unread data makes the kernel reset the connection, and a reset
// makes the client's kernel drop what the client had not read yet: a
// client still sending (curl sends an upload's body once its 1 s Expect:
// 100-continue wait is over) gets "Connection reset by peer" instead of
// the redirect or the error. So a connection is closed as the HTTP RFCs
// advise (RFC 9112 9.6) and Apache does: the write side first (the client
// reads the answer, then the end of it), then what the client still sends
// is read and thrown away until it closes its side, lingerBytes were read
// or lingerTime passed, and only then is the socket closed.
const (
	lingerBytes = 32 << 20
	lingerTime  = 10 * time.Second
)

// LingerListener makes the TCP connections l accepts close lingering.
// It wraps the raw listener (under TLS, which closes through it).
func LingerListener(l net.Listener) net.Listener {
	return lingerListener{Listener: l, bytes: lingerBytes, time: lingerTime}
}

type lingerListener struct {
	net.Listener
	bytes int64
	time  time.Duration
}

func (l lingerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok && err == nil {
		return &lingerConn{TCPConn: tc, bytes: l.bytes, time: l.time}, nil
	}
	return c, err
}

// lingerConn is a TCP connection whose Close lingers. It keeps the
// methods of *net.TCPConn (CloseWrite; ReadFrom, which lets net/http
// use sendfile).
type lingerConn struct {
	*net.TCPConn
	bytes   int64
	time    time.Duration
	closing atomic.Bool
}

// Close stops writing at once and lets a goroutine drain and close.
func (c *lingerConn) Close() error {
	if !c.closing.CompareAndSwap(false, true) {
		return nil
	}
	if err := c.TCPConn.CloseWrite(); err != nil {
		return c.TCPConn.Close() // the connection is gone already
	}
	go func() {
		_ = c.TCPConn.SetReadDeadline(time.Now().Add(c.time))
		_, _ = io.CopyN(io.Discard, c.TCPConn, c.bytes)
		_ = c.TCPConn.Close()
	}()
	return nil
}

package tlsconf

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// sniffTimeout bounds how long a new connection may take to send its
// first byte before it is dropped (it never blocks other connections).
const sniffTimeout = 30 * time.Second

// HTTPListener serves TLS on l: a connection that opens with a TLS
// handshake record is handed out as a *tls.Conn (http.Server then fills
// Request.TLS); any other is handed out as it is, or, when TLS is
// required, answered with a 400 naming the https:// URL and closed. Each
// connection is classified in its own goroutine, so a silent client holds
// up nobody.
func (m *Material) HTTPListener(l net.Listener) net.Listener {
	s := &sniffer{Listener: l, cfg: m.Server, require: m.Require, conns: make(chan net.Conn), done: make(chan struct{})}
	go s.loop()
	return s
}

type sniffer struct {
	net.Listener
	cfg     *tls.Config
	require bool
	conns   chan net.Conn
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	err     error
}

func (s *sniffer) loop() {
	var delay time.Duration
	for {
		c, err := s.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			s.Close()
			return
		}
		delay = 0
		go s.classify(c)
	}
}

func (s *sniffer) classify(c net.Conn) {
	var b [1]byte
	c.SetReadDeadline(time.Now().Add(sniffTimeout))
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Time{})
	pc := &prefixConn{Conn: c, prefix: b[:]}
	var out net.Conn = pc
	switch {
	case b[0] == 0x16: // TLS handshake record
		out = tls.Server(pc, s.cfg)
	case s.require:
		refusePlainHTTP(pc)
		return
	}
	select {
	case s.conns <- out:
	case <-s.done:
		c.Close()
	}
}

// refusePlainHTTP answers a plaintext client of a TLS-only port.
func refusePlainHTTP(c net.Conn) {
	msg := fmt.Sprintf("this Kaon endpoint requires TLS: use https://%s/\n", c.LocalAddr())
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
	// Let the client read the answer before the close resets the
	// connection: stop writing, drain what it sent for a moment.
	if tc, ok := c.(*prefixConn).Conn.(*net.TCPConn); ok {
		tc.CloseWrite()
		c.SetReadDeadline(time.Now().Add(time.Second))
		io.Copy(io.Discard, io.LimitReader(c, 1<<20))
	}
	c.Close()
}

// Accept returns the next classified connection.
func (s *sniffer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.err != nil {
			return nil, s.err
		}
		return nil, net.ErrClosed
	}
}

func (s *sniffer) Close() error {
	var err error
	s.once.Do(func() {
		close(s.done)
		err = s.Listener.Close()
	})
	return err
}

// prefixConn gives back bytes already read before the rest of the stream.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

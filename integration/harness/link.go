package harness

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Link is a TCP proxy between one namespace server and one etcd member, a
// network link a test can degrade: Slow holds every byte etcd sends back
// for a while (a congested link: requests still arrive at once), SetCut stops
// both directions with the connections left open (a partition: nothing
// arrives, nothing fails, as when packets are dropped); SetCut(false)
// forwards again what waited.
type Link struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	delay time.Duration
	cut   bool
	conns []net.Conn
}

// NewLinks starts one link per etcd member (endpoints: their client
// URLs) and returns them with the --meta that reaches the members
// through them. They close when the test ends.
func NewLinks(t testing.TB, endpoints []string) ([]*Link, string) {
	t.Helper()
	var links []*Link
	var hosts []string
	for _, ep := range endpoints {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		k := &Link{l: l, target: strings.TrimPrefix(ep, "http://")}
		k.cond = sync.NewCond(&k.mu)
		go k.serve()
		t.Cleanup(k.Close)
		links = append(links, k)
		hosts = append(hosts, l.Addr().String())
	}
	return links, "etcd://" + strings.Join(hosts, ",")
}

func (k *Link) serve() {
	for {
		c, err := k.l.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", k.target)
		if err != nil {
			c.Close()
			continue
		}
		k.mu.Lock()
		k.conns = append(k.conns, c, u)
		k.mu.Unlock()
		go k.pump(u, c, false)
		go k.pump(c, u, true)
	}
}

type chunk struct {
	b  []byte
	at time.Time
}

// pump copies from src to dst, chunk by chunk, each once the link lets
// it through (delayed: only the direction from etcd is slowed).
func (k *Link) pump(dst, src net.Conn, delayed bool) {
	ch := make(chan chunk, 4096)
	go func() {
		defer close(ch)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				ch <- chunk{b[:n], time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	defer dst.Close()
	for c := range ch {
		k.mu.Lock()
		for {
			if k.cut {
				k.cond.Wait()
				continue
			}
			var wait time.Duration
			if delayed {
				wait = time.Until(c.at.Add(k.delay))
			}
			if wait <= 0 {
				break
			}
			k.mu.Unlock()
			time.Sleep(wait)
			k.mu.Lock()
		}
		k.mu.Unlock()
		if _, err := dst.Write(c.b); err != nil {
			src.Close()
			return
		}
	}
}

// Slow delays every byte etcd sends back by d (0: none).
func (k *Link) Slow(d time.Duration) {
	k.mu.Lock()
	k.delay = d
	k.mu.Unlock()
}

// SetCut cuts the link (true) or mends it (false).
func (k *Link) SetCut(cut bool) {
	k.mu.Lock()
	k.cut = cut
	k.cond.Broadcast()
	k.mu.Unlock()
}

// Close ends the link and its connections.
func (k *Link) Close() {
	k.l.Close()
	k.SetCut(false)
	k.mu.Lock()
	for _, c := range k.conns {
		c.Close()
	}
	k.mu.Unlock()
}

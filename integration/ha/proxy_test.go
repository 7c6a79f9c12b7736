package ha

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// link is a TCP proxy between one namespace server and one etcd member, a
// network link the test can degrade: slow holds every byte etcd sends back
// for a while (a congested link: requests still arrive at once), cut stops
// both directions with the connections left open (a partition: nothing
// arrives, nothing fails, as when packets are dropped), mend forwards
// again what waited.
type link struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	delay time.Duration
	cut   bool
	conns []net.Conn
}

// newLinks starts one link per etcd member and returns them with the
// --meta that reaches the members through them.
func newLinks(t *testing.T, in *instance) ([]*link, string) {
	t.Helper()
	var links []*link
	var hosts []string
	for _, ep := range in.etcd.Endpoints() {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		k := &link{l: l, target: strings.TrimPrefix(ep, "http://")}
		k.cond = sync.NewCond(&k.mu)
		go k.serve()
		t.Cleanup(k.close)
		links = append(links, k)
		hosts = append(hosts, l.Addr().String())
	}
	return links, "etcd://" + strings.Join(hosts, ",")
}

func (k *link) serve() {
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
func (k *link) pump(dst, src net.Conn, delayed bool) {
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

func (k *link) slow(d time.Duration) {
	k.mu.Lock()
	k.delay = d
	k.mu.Unlock()
}

func (k *link) setCut(cut bool) {
	k.mu.Lock()
	k.cut = cut
	k.cond.Broadcast()
	k.mu.Unlock()
}

func (k *link) close() {
	k.l.Close()
	k.setCut(false)
	k.mu.Lock()
	for _, c := range k.conns {
		c.Close()
	}
	k.mu.Unlock()
}

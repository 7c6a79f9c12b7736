package httpserve

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// serveLinger serves a handler that answers a 307 without reading the
// body, as the namespace endpoint answers a PUT, on a lingering listener.
func serveLinger(t *testing.T, maxBytes int64, maxTime time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://elsewhere/x", http.StatusTemporaryRedirect)
	})}
	go srv.Serve(lingerListener{Listener: l, bytes: maxBytes, time: maxTime})
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// putHead sends a PUT announcing size bytes and the first first of them.
func putHead(t *testing.T, addr string, size int64, first int) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "PUT /f HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size)
	if _, err := c.Write(make([]byte, first)); err != nil {
		t.Fatal(err)
	}
	return c
}

// A client that goes on sending its body after the answer reads the
// answer and its end, and what it sends after that is read, not reset:
// more than the socket buffers hold gets through.
func TestLingerReadsAfterTheAnswer(t *testing.T) {
	addr := serveLinger(t, 1<<30, time.Minute)
	c := putHead(t, addr, 1<<30, 1000)
	c.SetDeadline(time.Now().Add(time.Minute))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusTemporaryRedirect || !resp.Close {
		t.Fatalf("answer while the body is pending: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want the end of the connection's write side", err)
	}
	if _, err := c.Write(make([]byte, 24<<20)); err != nil {
		t.Fatalf("sending the rest of the body after the answer: %v (the server reset instead of reading)", err)
	}
}

// What a client sends after the answer is read only up to the byte bound
// and for the time bound; then the connection is closed.
func TestLingerIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBytes int64
		maxTime  time.Duration
		stall    bool
	}{{"byte bound", 1 << 20, time.Minute, false}, {"time bound", 1 << 30, time.Second, true}} {
		addr := serveLinger(t, tc.maxBytes, tc.maxTime)
		c := putHead(t, addr, 1<<40, 1000)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusTemporaryRedirect {
			t.Fatalf("%s: answer %v %v", tc.name, resp, err)
		}
		deadline := time.Now().Add(time.Minute)
		c.SetWriteDeadline(deadline)
		buf := make([]byte, 1<<20)
		if tc.stall {
			buf = buf[:1]
		}
		for {
			if _, err := c.Write(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("%s: the server neither read nor closed for a minute", tc.name)
				}
				break // closed: reset
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the server still reads after a minute", tc.name)
			}
			if tc.stall {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
}

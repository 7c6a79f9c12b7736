package core

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestBodySentBeforeRedirectGetsRedirect: a client that sends its whole
// upload body before it reads the answer (as curl does when the namespace
// server answers after its 1 s Expect: 100-continue wait) gets the 307,
// not "Connection reset by peer": the namespace server closes the
// connection lingering, reading what the client still sends (up to a
// bound) instead of resetting it. The body is larger than the kernel's
// socket buffers, so the client is still sending when the answer goes out.
func TestBodySentBeforeRedirectGetsRedirect(t *testing.T) {
	k := harness.Up(t)
	u, _ := url.Parse(k.EP.HTTP + "/early")
	body := make([]byte, 24<<20)
	rand.Read(body)
	for i := 0; i < 3; i++ {
		c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(60 * time.Second))
		fmt.Fprintf(c, "PUT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", u.Path, u.Host, len(body))
		if _, err := c.Write(body); err != nil {
			t.Fatalf("try %d: sending the body: %v (the server closed the connection before the client could read the answer)", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("try %d: reading the answer after the body: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		c.Close()
		if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") == "" {
			t.Fatalf("try %d: %s, want a 307 to a storage server", i, resp.Status)
		}
	}
}

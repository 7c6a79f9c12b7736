package ha

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// A deposed active server stops answering reads before another can be
// active. Server 0 reaches etcd over a link the test controls; the link
// first slows (etcd's answers arrive 1.5 s late, so the last renewal of
// its lease that server 0 hears of was granted 1.5 s earlier than it
// hears it), then is cut. Server 1 takes over once the lease expired in
// etcd; from the moment it acknowledges a write, server 0 must no longer
// answer a read as the active server: it would not know of that write.
func TestDeposedServerStopsReadsFirst(t *testing.T) {
	var links []*harness.Link
	in := newInstanceWith(t, 2, options{meta: func(in *instance, i int) string {
		if i != 0 {
			return in.meta
		}
		var meta string
		links, meta = harness.NewLinks(t, in.etcd.Endpoints())
		return meta
	}})
	in.waitActive(0, "server 0 is active")
	if code, body, err := apiCall(http.MethodPost, in.http[0], "mkdir", url.Values{"path": {"/before"}}); err != nil || code != 200 {
		t.Fatalf("mkdir /before: %d %s %v", code, body, err)
	}
	for _, k := range links {
		k.Slow(1500 * time.Millisecond)
	}
	// Long enough for renewals to be answered over the slow link (sent
	// every third of the lease), and the server to go on as before.
	time.Sleep(4 * time.Second)
	if code, body, err := apiCall(http.MethodGet, in.http[0], "stat", url.Values{"path": {"/before"}}); err != nil || code != 200 {
		t.Fatalf("stat /before at server 0 over the slow link: %d %s %v", code, body, err)
	}
	for _, k := range links {
		k.SetCut(true)
	}
	cut := time.Now()
	n := 0
	in.eventually("server 1 acknowledges a write, server 0 refuses to read it", 60*time.Second, func() error {
		n++
		p := fmt.Sprintf("/after-%d", n)
		code, body, err := apiCall(http.MethodPost, in.http[1], "mkdir", url.Values{"path": {p}})
		if err != nil || code != 200 {
			return fmt.Errorf("mkdir %s at server 1: %d %s %v", p, code, strings.TrimSpace(body), err)
		}
		acked := time.Now()
		code, body, err = apiCall(http.MethodGet, in.http[0], "stat", url.Values{"path": {p}})
		if err != nil {
			return fmt.Errorf("stat at server 0: %v", err)
		}
		if code != 307 && code != 503 {
			t.Fatalf("server 0 answered a read %v after server 1 acknowledged %s (%v after the cut): %d %s",
				time.Since(acked), p, acked.Sub(cut), code, body)
		}
		t.Logf("server 1 acknowledged %s %v after the cut; server 0 answers %d %s", p, acked.Sub(cut), code, strings.TrimSpace(body))
		return nil
	})
	for _, k := range links {
		k.Slow(0)
		k.SetCut(false)
	}
	in.waitActive(1, "server 0, reconnected, is a standby naming server 1")
	if code, body, err := apiCall(http.MethodGet, in.http[1], "stat", url.Values{"path": {"/before"}}); err != nil || code != 200 {
		t.Fatalf("stat /before at server 1: %d %s %v", code, body, err)
	}
}

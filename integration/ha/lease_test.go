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

// An active server partitioned from etcd at the network layer (etcd in a
// network namespace of its own, the server's link to it down: its
// packets dropped, its connections left open) is replaced once its
// lease lapses; a write sent to it meanwhile is refused, never applied;
// once the link is up again it is a standby naming its successor, and
// the audit logs name a later term for the successor's commits than for
// its own.
func TestPartitionedActiveServerIsReplaced(t *testing.T) {
	in := newInstanceWith(t, 2, options{netns: true})
	in.waitActive(0, "server 0 is active")
	local, data := randomFile(t, 64<<10)
	in.putRetry(in.http[0], local, "/before.bin", "upload before the partition")

	in.links[0].SetUp(false)
	in.down[0] = true // it cannot tell who is active
	in.waitActive(1, "server 1 takes over from the partitioned server 0")
	in.putRetry(in.http[1], local, "/during.bin", "upload through the new active server")
	code, body, err := apiCall(http.MethodPost, in.http[0], "mkdir", url.Values{"path": {"/at-partitioned"}})
	if err == nil && code == 200 {
		t.Fatalf("the partitioned server applied a write: %d %s", code, body)
	}
	t.Logf("write sent to the partitioned server: %d %s %v", code, strings.TrimSpace(body), err)

	in.links[0].SetUp(true)
	in.down[0] = false
	in.waitActive(1, "server 0, reconnected, is a standby naming server 1")
	if o, _, code := in.kaon(in.http[1], "stat", "/at-partitioned"); code == 0 {
		t.Fatalf("the write sent to the partitioned server is visible: %s", o)
	}
	in.checkFile(in.http[0], "/before.bin", data)
	in.checkFile(in.http[0], "/during.bin", data)
	in.eventually("the audit logs to name the terms of both uploads", 30*time.Second, func() error {
		before, during := in.commitTerm(0, "/before.bin"), in.commitTerm(1, "/during.bin")
		if before == 0 || during <= before {
			return fmt.Errorf("commit of /before.bin on server 0 in term %d, of /during.bin on server 1 in term %d", before, during)
		}
		return nil
	})
}

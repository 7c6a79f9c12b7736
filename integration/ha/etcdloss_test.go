package ha

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// apiCall sends one request to the JSON API of the namespace server at
// base, without following a redirect; it returns the status and body.
func apiCall(method, base, route string, args url.Values) (int, string, error) {
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var req *http.Request
	var err error
	if method == http.MethodPost {
		body := map[string]string{}
		for k := range args {
			body[k] = args.Get(k)
		}
		b, _ := json.Marshal(body)
		req, err = http.NewRequest(method, base+"/api/v1/"+route, strings.NewReader(string(b)))
		if req != nil {
			req.Header.Set("Content-Type", "application/json")
		}
	} else {
		req, err = http.NewRequest(method, base+"/api/v1/"+route+"?"+args.Encode(), nil)
	}
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// term is the term (leadership revision) and server id etcd holds for
// the instance's active role.
func (in *instance) term() (rev uint64, id string) {
	in.t.Helper()
	var t struct {
		ID  string `json:"id"`
		Rev uint64 `json:"rev"`
	}
	if err := json.Unmarshal(in.etcd.Get("kaon/ha/term"), &t); err != nil {
		in.t.Fatalf("ha/term: %v", err)
	}
	return t.Rev, t.ID
}

// writer makes directories through the namespace server at base, one
// after the other, until stopped; it records which were acknowledged and
// when each was asked.
type writer struct {
	mu    sync.Mutex
	acked []string    // directories acknowledged (200)
	asked []time.Time // when each acknowledged one was asked
	fails int
	last  time.Time     // when the last acknowledgment came
	gap   time.Duration // the longest time without one
	stop  chan struct{}
	done  chan struct{}
}

func startWriter(base, dir string) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			p := fmt.Sprintf("%s/d%05d", dir, i)
			asked := time.Now()
			code, _, err := apiCall(http.MethodPost, base, "mkdir", url.Values{"path": {p}})
			w.mu.Lock()
			if err == nil && code == 200 {
				w.acked, w.asked = append(w.acked, p), append(w.asked, asked)
				now := time.Now()
				if !w.last.IsZero() {
					w.gap = max(w.gap, now.Sub(w.last))
				}
				w.last = now
			} else {
				w.fails++
			}
			w.mu.Unlock()
			if err != nil || code != 200 {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	return w
}

// ackedAfter is how many writes asked after t were acknowledged.
func (w *writer) ackedAfter(t time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, a := range w.asked {
		if a.After(t) {
			n++
		}
	}
	return n
}

func (w *writer) end() []string {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked
}

// waitWrites waits until n writes asked after t were acknowledged.
func (in *instance) waitWrites(w *writer, t time.Time, n int, step string) {
	in.t.Helper()
	in.eventually(step, 60*time.Second, func() error {
		if got := w.ackedAfter(t); got < n {
			return fmt.Errorf("%d writes acknowledged since, want %d", got, n)
		}
		return nil
	})
}

// The active namespace server keeps its role through the loss of the etcd
// leader while writes go on: first the leader freezes (SIGSTOP: a member
// too loaded to answer, its connections open, which a client cannot tell
// from a slow one) for two leases, then it is killed; each time etcd
// elects another leader within its election timeout (1 s, set here; the
// lease is 6 of them, so that an election slowed down by a loaded host
// still ends within it), and each time the returning member (SIGCONT,
// restart) rejoins as a follower. The active server's term never changes,
// writes resume while the member is away, and every acknowledged write is
// there.
func TestActiveRoleSurvivesEtcdLeaderLoss(t *testing.T) {
	const lease = 6 * time.Second
	in := newInstanceWith(t, 2, options{lease: lease, etcdFlags: []string{"--heartbeat-interval", "100", "--election-timeout", "1000"}})
	in.waitActive(0, "server 0 is active")
	term, id := in.term()
	if _, e, code := in.kaon(in.http[0], "mkdir", "/w"); code != 0 {
		t.Fatal(e)
	}
	w := startWriter(in.http[0], "/w")
	in.waitWrites(w, time.Time{}, 10, "writes go through")

	frozen := in.etcd.Leader()
	in.etcd.SignalMember(frozen, syscall.SIGSTOP)
	resume := sync.OnceFunc(func() { in.etcd.SignalMember(frozen, syscall.SIGCONT) })
	t.Cleanup(resume)
	stopped := time.Now()
	in.waitWrites(w, stopped, 10, "writes resume with the etcd leader frozen")
	// Frozen for two leases: past the lease by the frozen member's clock,
	// which etcd 3.4.23 has it revoke when it runs again.
	time.Sleep(time.Until(stopped.Add(2 * lease)))
	in.waitWrites(w, stopped.Add(2*lease), 10, "writes go on with the etcd leader frozen for two leases")
	resume()
	back := time.Now()
	in.waitWrites(w, back, 10, "writes go on once the frozen member is back")

	killed := in.etcd.Leader()
	in.etcd.KillMember(killed)
	gone := time.Now()
	in.waitWrites(w, gone, 10, "writes resume with the etcd leader killed")
	in.etcd.StartMember(killed, true)
	back = time.Now()
	in.waitWrites(w, back, 10, "writes go on once the killed member is back")
	acked := w.end()
	t.Logf("%d writes acknowledged, %d failed; the longest time without an acknowledgment: %v", len(acked), w.fails, w.gap.Round(time.Millisecond))

	if now, nowID := in.term(); now != term || nowID != id {
		t.Fatalf("the active role changed hands: term %d of %s, then %d of %s", term, id, now, nowID)
	}
	if log := in.mgms[0].Logs(); strings.Contains(log, "giving up the active role") || strings.Contains(log, "session with the shared engine ended") {
		t.Fatalf("server 0 gave up its role:\n%s", log)
	}
	out, _, code := in.kaon(in.http[1], "ls", "/w")
	if code != 0 {
		t.Fatalf("kaon ls /w: %s", out)
	}
	listed := map[string]bool{}
	for _, f := range strings.Fields(out) {
		listed["/w/"+strings.TrimSuffix(f, "/")] = true
	}
	for _, p := range acked {
		if !listed[p] {
			t.Fatalf("%s was acknowledged but is not in /w", p)
		}
	}
}

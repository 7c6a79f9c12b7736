package cluster

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// A storage server given every namespace server of a replicated instance
// reaches the active one: past a dead server, through a standby's
// redirect (carrying its bearer itself), waiting out a 503 while no
// server is active; and it goes straight to the active one next time.
func TestClientFindsTheActiveServer(t *testing.T) {
	var activeCalls, standbyCalls atomic.Int32
	var ready atomic.Bool
	active := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		activeCalls.Add(1)
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			WriteError(w, kerr.New(kerr.Permission, "internal", r.URL.Path, "not authorized"))
			return
		}
		if !ready.Load() {
			WriteError(w, kerr.New(kerr.Busy, "namespace", "", "no active namespace server yet"))
			return
		}
		WriteJSON(w, message.HeartbeatReply{Interval: 7 * time.Second})
	}))
	defer active.Close()
	standby := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		standbyCalls.Add(1)
		http.Redirect(w, r, active.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	defer standby.Close()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + l.Addr().String()
	l.Close()

	// Redirected elsewhere than to a server it was given: refused, the
	// bearer stays here.
	stray := &Client{Base: dead + "," + standby.URL, Secret: "s3cret", FailoverWait: 30 * time.Second}
	if _, err := stray.Heartbeat(context.Background(), message.Heartbeat{Node: "n"}); !kerr.Is(err, kerr.Invalid) || activeCalls.Load() != 0 {
		t.Fatalf("redirect to a server not given: %v (active server called %d times)", err, activeCalls.Load())
	}

	c := &Client{Base: dead + "," + standby.URL + "," + active.URL, Secret: "s3cret", FailoverWait: 30 * time.Second}
	go func() { time.Sleep(300 * time.Millisecond); ready.Store(true) }()
	r, err := c.Heartbeat(context.Background(), message.Heartbeat{Node: "n"})
	if err != nil || r.Interval != 7*time.Second {
		t.Fatalf("heartbeat: %+v %v", r, err)
	}
	before := standbyCalls.Load()
	if _, err := c.Heartbeat(context.Background(), message.Heartbeat{Node: "n"}); err != nil {
		t.Fatal(err)
	}
	if standbyCalls.Load() != before {
		t.Fatal("the second call went through the standby again instead of to the active server")
	}

	// A single server: the error as it is.
	single := &Client{Base: dead, Secret: "s3cret"}
	if err := single.Commit(context.Background(), message.Commit{Fid: 1}); !kerr.Is(err, kerr.Busy) {
		t.Fatalf("commit to a dead single server: %v, want busy", err)
	}

	// Nobody active for longer than the wait: the last reason.
	ready.Store(false)
	c2 := &Client{Base: dead + "," + active.URL, Secret: "s3cret", FailoverWait: 500 * time.Millisecond}
	if err := c2.Commit(context.Background(), message.Commit{Fid: 1}); !kerr.Is(err, kerr.Busy) {
		t.Fatalf("commit with no active server: %v, want busy", err)
	}
}

package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/kaontest"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestSessionTransports: a session works the same over a WebSocket (what
// clients open) and over an HTTP/2 stream (what clients before the
// WebSocket open, and what a client falls back to with a server before
// it): replies, pushed invalidations, locks between sessions of both
// kinds, and a broken stream's reconnection told as a full invalidation.
func TestSessionTransports(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := st.Client.Mkdir(ctx, "/d", 0, false); err != nil {
		t.Fatal(err)
	}
	st.Put(t, "/d/f", []byte("x"))
	ws := openSession(t, st, "ws")
	restore := client.SessionsOverHTTP2()
	h2 := openSession(t, st, "h2")
	restore()
	if !ws.OverWebSocket() || h2.OverWebSocket() {
		t.Fatalf("transports: ws session over a WebSocket %v, h2 session over a WebSocket %v", ws.OverWebSocket(), h2.OverWebSocket())
	}
	for _, c := range []struct {
		name     string
		s, other *client.Session
		file     string
	}{{"WebSocket", ws, h2, "/d/g"}, {"HTTP/2", h2, ws, "/d/h"}} {
		if _, err := c.s.Subscribe(ctx, "/d"); err != nil {
			t.Fatalf("%s: subscribe: %v", c.name, err)
		}
		st.Put(t, c.file, []byte("y"))
		if inv := next(t, c.s, c.name+": the upload's invalidation"); inv.Full || inv.Kind != nsapi.EventCommitted || "/d/"+inv.Name != c.file {
			t.Fatalf("%s: after the upload: %+v", c.name, inv)
		}
		if err := c.s.Lock(ctx, nsapi.LockRequest{Path: "/d/f", Type: nsapi.LockWrite, Owner: 1}); err != nil {
			t.Fatalf("%s: lock: %v", c.name, err)
		}
		if err := c.other.Lock(ctx, nsapi.LockRequest{Path: "/d/f", Type: nsapi.LockRead, Owner: 1}); !kerr.Is(err, kerr.Locked) {
			t.Fatalf("%s: the other session's lock over it: %v, want locked", c.name, err)
		}
		if err := c.s.Unlock(ctx, nsapi.LockRequest{Path: "/d/f", Owner: 1}); err != nil {
			t.Fatalf("%s: unlock: %v", c.name, err)
		}
	}
	st.CloseClientConnections()
	for _, s := range []*client.Session{ws, h2} {
		inv := next(t, s, "the full invalidation after the streams broke")
		for !inv.Full && inv.Kind == nsapi.EventCommitted { // the other's upload
			inv = next(t, s, "the full invalidation after the streams broke")
		}
		if !inv.Full || !strings.Contains(inv.Reason, "reconnected") {
			t.Fatalf("after the streams broke: %+v", inv)
		}
	}
	if !ws.OverWebSocket() || h2.OverWebSocket() {
		t.Fatal("a session changed transport when it reconnected")
	}
	if err := ws.Lock(ctx, nsapi.LockRequest{Path: "/d/f", Type: nsapi.LockWrite, Owner: 1}); err != nil {
		t.Fatalf("after reconnecting: %v", err)
	}
}

// TestSessionWithServerBeforeWebSocket: a server that answers the
// WebSocket handshake as one before the WebSocket did (501: "the session
// channel is a POST") gets the session over HTTP/2.
func TestSessionWithServerBeforeWebSocket(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st.Put(t, "/f", []byte("x"))
	ns := st.HTTP.Config.Handler
	old := httptest.NewUnstartedServer(nil)
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	old.Config = &http.Server{Protocols: &protos, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == nsapi.SessionPath && r.Method != http.MethodPost {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotImplemented)
			json.NewEncoder(w).Encode(nsapi.ErrorBody{Kind: kerr.Unsupported, Message: "GET " + nsapi.SessionPath + ": the session channel is a POST"})
			return
		}
		ns.ServeHTTP(w, r)
	})}
	old.Start()
	defer old.Close()
	s, err := client.New(old.URL).OpenSession(ctx, client.SessionOptions{Host: "new client"})
	if err != nil {
		t.Fatalf("a session with a server before the WebSocket: %v", err)
	}
	defer s.Close()
	if s.OverWebSocket() {
		t.Fatal("the session is over a WebSocket the server does not take")
	}
	if err := s.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockWrite, Owner: 1}); err != nil {
		t.Fatalf("lock over HTTP/2: %v", err)
	}
	b := openSession(t, st, "b")
	if err := b.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockWrite, Owner: 1}); !kerr.Is(err, kerr.Locked) {
		t.Fatalf("another session's lock over it: %v, want locked", err)
	}
}

// TestSessionWebSocketFromAPage: a WebSocket handshake naming an Origin
// (a browser's page, even one of the server's own origin) is refused
// with the reason: the page would act as the loopback user running the
// browser.
func TestSessionWebSocketFromAPage(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(st.HTTP.URL, "http") + nsapi.SessionPath
	conn, resp, err := websocket.DefaultDialer.DialContext(ctx, u, http.Header{"Origin": {st.HTTP.URL}})
	if err == nil {
		conn.Close()
		t.Fatal("a WebSocket session channel was opened from a page of the server's origin")
	}
	if resp == nil {
		t.Fatalf("handshake: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "Origin") {
		t.Fatalf("handshake from a page: HTTP %d %s, want 403 naming the Origin", resp.StatusCode, body)
	}
	// Without one: a program.
	conn, _, err = websocket.DefaultDialer.DialContext(ctx, u, nil)
	if err != nil {
		t.Fatalf("handshake without an Origin: %v", err)
	}
	conn.Close()
}

// TestSessionSilentServer: a WebSocket stream on which nothing arrives
// (not even the answer to the heartbeat's ping: the server hangs) is
// taken as broken, and the session reconnects and says so, as HTTP/2's
// pings did for its streams.
func TestSessionSilentServer(t *testing.T) {
	defer client.SetWSSilence(300 * time.Millisecond)()
	var opens atomic.Int32
	hang := make(chan struct{})
	defer close(hang)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		var req nsapi.SessionRequest
		if err := conn.ReadJSON(&req); err != nil || req.Op != nsapi.SessionOpen {
			return
		}
		n := opens.Add(1)
		info := nsapi.SessionInfo{ID: "s1", Key: "k", Term: 1, Heartbeat: 50 * time.Millisecond, Resumed: n > 1}
		b, _ := json.Marshal(nsapi.SessionMessage{Kind: nsapi.SessionReply, ID: req.ID, Session: &info})
		if conn.WriteMessage(websocket.TextMessage, b) != nil {
			return
		}
		<-hang // reads nothing more: pings go unanswered
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := client.New(srv.URL).OpenSession(ctx, client.SessionOptions{Host: "silent"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		go s.Close() // the server answers no close
		<-ctx.Done()
	}()
	if inv := next(t, s, "the full invalidation after the silent stream was dropped"); !inv.Full || !strings.Contains(inv.Reason, "reconnected") {
		t.Fatalf("after the server fell silent: %+v", inv)
	}
	if opens.Load() < 2 {
		t.Fatalf("the session opened %d streams, want a second one", opens.Load())
	}
}

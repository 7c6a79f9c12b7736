package storage

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster/message"
)

// TestBackgroundGivesWay: while no client stream is open, a copy that
// gives way runs its I/O as it comes; while one is, each call runs alone
// on the server and is followed by a pause twice as long as it took. Client
// reads and uploads count as client streams until they end.
func TestBackgroundGivesWay(t *testing.T) {
	b := newBackground()
	var mu sync.Mutex
	var pauses []time.Duration
	clock := time.Unix(0, 0)
	b.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	b.pause = func(_ context.Context, d time.Duration) { mu.Lock(); pauses = append(pauses, d); mu.Unlock() }
	call := func() error { mu.Lock(); clock = clock.Add(7 * time.Millisecond); mu.Unlock(); return nil }
	b.do(context.Background(), call)
	if len(pauses) != 0 {
		t.Fatalf("paused without a client stream: %v", pauses)
	}
	done := b.client()
	b.do(context.Background(), call)
	if len(pauses) != 1 || pauses[0] != 14*time.Millisecond {
		t.Fatalf("pauses with a client stream: %v, want one of 14ms", pauses)
	}
	// One call at a time: a second waits while the first runs.
	in := make(chan struct{})
	release := make(chan struct{})
	go b.do(context.Background(), func() error { close(in); <-release; return nil })
	<-in
	started := make(chan struct{})
	go b.do(context.Background(), func() error { close(started); return nil })
	select {
	case <-started:
		t.Fatal("two calls that give way ran at once while a client stream was open")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-started
	done()
	done() // once only
	if n := b.clients.Load(); n != 0 {
		t.Fatalf("%d client streams counted after the only one ended", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.client()
	b.slot <- struct{}{}
	if err := b.do(ctx, call); err == nil {
		t.Fatal("a call waiting for its turn did not end with its context")
	}
}

// TestClientStreamsCounted: a client's read counts until it is closed,
// an upload until it ends, and a move that yields goes through the gate
// only while one is open.
func TestClientStreamsCounted(t *testing.T) {
	s, ns, key, _ := newServer(t, 5)
	data := make([]byte, 3<<20)
	rand.Read(data)
	rc := upload(t, s, ns, key, 9, "replica:2", 2, data)
	if n := s.bg.clients.Load(); n != 0 {
		t.Fatalf("%d client streams after the upload ended", n)
	}
	var mu sync.Mutex
	pauses := 0
	s.bg.pause = func(context.Context, time.Duration) { mu.Lock(); pauses++; mu.Unlock() }
	order := moveOrder(key, rc, 0, 3)
	order.Yield = true
	if _, err := s.MoveStripe(context.Background(), order); err != nil {
		t.Fatal(err)
	}
	if pauses != 0 {
		t.Fatalf("a yielding move paused %d times with no client stream open", pauses)
	}
	f, err := s.Open(context.Background(), rc, key.Sign(rc), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.bg.clients.Load(); n != 1 {
		t.Fatalf("%d client streams with one read open", n)
	}
	order = moveOrder(key, rc, 1, 4)
	order.Yield = true
	if _, err := s.MoveStripe(context.Background(), order); err != nil {
		t.Fatal(err)
	}
	if pauses < 3 { // reads and writes of 3 MiB, and the finish
		t.Fatalf("a yielding move paused %d times while a client read was open", pauses)
	}
	before := pauses
	if _, err := s.MoveStripe(context.Background(), message.MoveOrder{Token: moveOrder(key, rc, 0, 5).Token}); err != nil {
		t.Fatal(err)
	}
	if pauses != before {
		t.Fatal("a move at a set rate gave way to clients")
	}
	f.Close()
	if n := s.bg.clients.Load(); n != 0 {
		t.Fatalf("%d client streams after the read was closed", n)
	}
}

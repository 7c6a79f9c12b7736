package ha

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestLocksSurviveFailover: session A holds a lock; the active namespace
// server is killed with SIGKILL. A's client reconnects to the new active
// server (a new term: it is told to drop everything) and reclaims its
// lock in the grace window; B, whose F_SETLKW reaches the new server
// meanwhile, is not granted the lock until A releases it. Invalidations
// flow again from the new active server.
func TestLocksSurviveFailover(t *testing.T) {
	in := newInstanceWith(t, 2, options{mgmFlags: []string{"--session-grace", "10s", "--session-heartbeat", "1s"}})
	first := in.waitActive(0, "server 0 is active")
	if r := curl("-L", "-T", "/dev/null", in.http[0]+"/data/locked"); r.code != 201 {
		t.Fatalf("PUT /data/locked: %d %s %s", r.code, r.body, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	open := func(url, host string) *client.Session {
		s, err := client.New(url).OpenSession(ctx, client.SessionOptions{Host: host, Servers: in.http})
		if err != nil {
			t.Fatalf("open a session at %s: %v", url, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a := open(in.http[1], "a") // through the standby: redirected to the active server
	b := open(in.http[0], "b")
	term := a.Term()
	if term == 0 {
		t.Fatal("a replicated namespace's session has term 0")
	}
	lock := nsapi.LockRequest{Path: "/data/locked", Type: nsapi.LockWrite, Owner: 1}
	if err := a.Lock(ctx, lock); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(ctx, lock); !kerr.Is(err, kerr.Locked) {
		t.Fatalf("B's F_SETLK before the failover: %v", err)
	}

	in.mgms[first].Kill9()
	in.down[first] = true
	in.waitActiveOther(first, "a standby takes over")

	// B asks again at once (its client reconnects by itself); A's
	// reclaim comes meanwhile.
	granted := make(chan error, 1)
	go func() { w := lock; w.Wait = true; granted <- b.Lock(ctx, w) }()
	var inv client.Invalidation
	select {
	case inv = <-a.Invalidations():
	case <-time.After(60 * time.Second):
		t.Fatal("A was not told of the failover within 60 s")
	}
	if !inv.Full || !strings.Contains(inv.Reason, "new incarnation") || len(inv.LostLocks) != 0 {
		t.Fatalf("A after the failover: %+v, want a full invalidation for the new incarnation, no lock lost", inv)
	}
	if a.Term() == term {
		t.Fatalf("A's term is still %d after the failover", term)
	}
	select {
	case err := <-granted:
		t.Fatalf("B's F_SETLKW was answered while A holds the lock across the failover: %v", err)
	case <-time.After(12 * time.Second): // past the grace window
	}
	if l, err := b.GetLk(ctx, lock); err != nil || l == nil || l.Session != a.ID() {
		t.Fatalf("F_GETLK after the failover: %+v %v, want A's lock", l, err)
	}
	if err := a.Unlock(ctx, lock); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("B's F_SETLKW after A released: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("B's F_SETLKW was not granted after A released the lock")
	}

	// Invalidations come from the new active server.
	if _, err := a.Subscribe(ctx, "/data"); err != nil {
		t.Fatal(err)
	}
	if r := curl("-L", "-T", "/dev/null", in.http[1]+"/data/after"); r.code != 201 {
		t.Fatalf("PUT /data/after: %d %s", r.code, r.stderr)
	}
	select {
	case inv = <-a.Invalidations():
		if inv.Full || inv.Name != "after" || inv.Term != a.Term() {
			t.Fatalf("after the failover A was told %+v, want /data/after's commit in term %d", inv, a.Term())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a change after the failover did not reach A within 20 s")
	}
}

package xrootd

import (
	"context"
	"net/url"
	"testing"
	"time"
)

func TestTPCRegistrySingleUseAndWait(t *testing.T) {
	var r tpcRegistry
	g := &tpcGrant{org: "u.1@h", lfn: "/f", dst: "127.0.0.1", expires: time.Now().Add(time.Minute)}
	got := make(chan *tpcGrant, 1)
	go func() { got <- r.take(context.Background(), "k1") }() // the destination arrives first
	time.Sleep(50 * time.Millisecond)
	if err := r.register("k1", g); err != nil {
		t.Fatal(err)
	}
	select {
	case x := <-got:
		if x != g {
			t.Fatalf("took %v", x)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting destination was not handed the registration within 10 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if x := r.take(ctx, "k1"); x != nil {
		t.Fatal("a registration was used twice")
	}
	// A replayed key voids both registrations.
	r.register("k2", &tpcGrant{expires: time.Now().Add(time.Minute)})
	if err := r.register("k2", &tpcGrant{expires: time.Now().Add(time.Minute)}); err == nil {
		t.Fatal("duplicate key accepted")
	}
	if x := r.take(ctx, "k2"); x != nil {
		t.Fatal("a duplicated key stayed usable")
	}
	// Expired registrations are not handed out.
	r.register("k3", &tpcGrant{expires: time.Now().Add(-time.Second)})
	if x := r.take(ctx, "k3"); x != nil {
		t.Fatal("an expired registration was used")
	}
}

func TestTPCOriginMatching(t *testing.T) {
	if !orgMatches("root.42@[::ffff:127.0.0.1]", "127.0.0.1", "root.42@localhost") {
		t.Error("same client named by address and by name did not match")
	}
	if !orgMatches("root.42@x", "127.0.0.1", "root.42@[::ffff:127.0.0.1]") {
		t.Error("IPv4-mapped form did not match")
	}
	if orgMatches("root.42@x", "127.0.0.1", "root.43@127.0.0.1") || orgMatches("root.42@x", "127.0.0.1", "alice.42@127.0.0.1") {
		t.Error("another process or user matched")
	}
	if orgMatches("root.42@x", "127.0.0.1", "root.42@192.0.2.1") {
		t.Error("another host matched")
	}
	if got := originHost("127.0.0.1"); got != "[::ffff:127.0.0.1]" {
		t.Errorf("originHost(127.0.0.1) = %q", got)
	}
	if !hostIs("[::ffff:127.0.0.1]", "127.0.0.1") || hostIs("192.0.2.1", "127.0.0.1") {
		t.Error("hostIs")
	}
	if got := tpcTTL(url.Values{TPCTTL: {"100000"}}); got != tpcMaxTTL {
		t.Errorf("ttl not bounded: %v", got)
	}
	o := tpcOpaque(url.Values{"tpc.key": {"k"}, "kaon.cap": {"c"}})
	if o.Has("tpc.key") || o.Get("kaon.cap") != "c" {
		t.Errorf("tpcOpaque = %v", o)
	}
}

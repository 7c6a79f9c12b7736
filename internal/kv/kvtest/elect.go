package kvtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kv"
)

// RunElection checks sessions and elections of an engine that implements
// kv.Elector; open returns a fresh, empty engine. Only one election runs
// per engine, so engines sharing a cluster may use fixed names.
func RunElection(t *testing.T, open func(t *testing.T) kv.Engine) {
	const ttl = 2 * time.Second
	elector := func(t *testing.T) (kv.Engine, kv.Elector) {
		e := open(t)
		el, ok := e.(kv.Elector)
		if !ok {
			t.Fatalf("%T is not a kv.Elector", e)
		}
		return e, el
	}
	session := func(t *testing.T, el kv.Elector) kv.Session {
		t.Helper()
		s, err := el.NewSession(testCtx(t), ttl)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	guarded := func(e kv.Engine, cond kv.Cond, k string) error {
		b := e.NewBatch()
		b.If(cond)
		b.Put([]byte(k), []byte("x"))
		return b.Commit(true)
	}
	type won struct {
		l   kv.Leadership
		err error
	}
	campaign := func(ctx context.Context, s kv.Session, v string) chan won {
		ch := make(chan won, 1)
		go func() {
			l, err := s.Campaign(ctx, "elect", []byte(v))
			ch <- won{l, err}
		}()
		return ch
	}
	wait := func(t *testing.T, ch chan won, step string) kv.Leadership {
		t.Helper()
		select {
		case w := <-ch:
			if w.err != nil {
				t.Fatalf("%s: %v", step, w.err)
			}
			return w.l
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: no leadership within 60s", step)
		}
		return nil
	}
	pending := func(t *testing.T, ch chan won, step string) {
		t.Helper()
		select {
		case w := <-ch:
			t.Fatalf("%s: campaign returned (%v) while another session leads", step, w.err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	leader := func(t *testing.T, el kv.Elector) string {
		t.Helper()
		v, _, err := el.Leader(testCtx(t), "elect")
		if errors.Is(err, kv.ErrNotFound) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(v)
	}

	t.Run("FirstCandidateLeadsGuardFencesTheDeposed", func(t *testing.T) {
		e, el := elector(t)
		a, b := session(t, el), session(t, el)
		la := wait(t, campaign(testCtx(t), a, "A"), "A campaigns alone")
		if got := leader(t, el); got != "A" {
			t.Fatalf("leader %q, want A", got)
		}
		bch := campaign(testCtx(t), b, "B")
		pending(t, bch, "B campaigns behind A")
		if err := guarded(e, la.Cond(), "by-A"); err != nil {
			t.Fatalf("the leader's guarded commit: %v", err)
		}
		if err := la.Resign(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		lb := wait(t, bch, "B leads once A resigned")
		if lb.Rev() <= la.Rev() {
			t.Fatalf("B's candidacy revision %d is not above A's %d", lb.Rev(), la.Rev())
		}
		if got := leader(t, el); got != "B" {
			t.Fatalf("leader %q, want B", got)
		}
		if err := guarded(e, la.Cond(), "by-A-again"); !errors.Is(err, kv.ErrCondFailed) {
			t.Fatalf("commit guarded by A's resigned leadership: %v, want ErrCondFailed", err)
		}
		if _, err := e.Get([]byte("by-A-again")); !errors.Is(err, kv.ErrNotFound) {
			t.Fatal("the deposed leader's write was applied")
		}
		if err := guarded(e, lb.Cond(), "by-B"); err != nil {
			t.Fatalf("the new leader's guarded commit: %v", err)
		}
		// A campaigns again: it queues behind B.
		ach := campaign(testCtx(t), a, "A2")
		pending(t, ach, "A campaigns again behind B")
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.Done():
		case <-time.After(60 * time.Second):
			t.Fatal("closed session: Done not closed within 60s")
		}
		la2 := wait(t, ach, "A leads once B's session closed")
		if err := guarded(e, lb.Cond(), "by-B-closed"); !errors.Is(err, kv.ErrCondFailed) {
			t.Fatalf("commit guarded by a closed session's leadership: %v, want ErrCondFailed", err)
		}
		if err := guarded(e, la2.Cond(), "by-A2"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("SessionKeysEndWithTheSession", func(t *testing.T) {
		e, el := elector(t)
		s := session(t, el)
		if err := s.Put(testCtx(t), []byte("member/x"), []byte("alive")); err != nil {
			t.Fatal(err)
		}
		if v, err := e.Get([]byte("member/x")); err != nil || string(v) != "alive" {
			t.Fatalf("session key: %q, %v", v, err)
		}
		s.Close()
		if _, err := e.Get([]byte("member/x")); !errors.Is(err, kv.ErrNotFound) {
			t.Fatalf("session key after Close: %v, want ErrNotFound", err)
		}
	})

	t.Run("CanceledCampaignWithdraws", func(t *testing.T) {
		_, el := elector(t)
		a, b := session(t, el), session(t, el)
		la := wait(t, campaign(testCtx(t), a, "A"), "A campaigns alone")
		ctx, cancel := context.WithCancel(testCtx(t))
		bch := campaign(ctx, b, "B")
		pending(t, bch, "B campaigns behind A")
		cancel()
		select {
		case w := <-bch:
			if w.err == nil {
				t.Fatal("canceled campaign won")
			}
		case <-time.After(60 * time.Second):
			t.Fatal("canceled campaign did not return within 60s")
		}
		if err := la.Resign(testCtx(t)); err != nil {
			t.Fatal(err)
		}
		if got := leader(t, el); got != "" {
			t.Fatalf("leader %q after A resigned and B withdrew; want none", got)
		}
	})
}

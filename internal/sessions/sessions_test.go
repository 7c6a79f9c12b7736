package sessions

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// clock is a fake clock the tests move.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// sink records what a session is sent; full makes it refuse messages.
type sink struct {
	mu   sync.Mutex
	msgs []nsapi.SessionMessage
	full bool
}

func (k *sink) Push(m nsapi.SessionMessage) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.full {
		return false
	}
	k.msgs = append(k.msgs, m)
	return true
}

func (k *sink) take() []nsapi.SessionMessage {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := k.msgs
	k.msgs = nil
	return m
}

func newService(t *testing.T, c nsapi.SessionConfig) (*Service, *clock) {
	t.Helper()
	ck := &clock{t: time.Unix(1_700_000_000, 0)}
	return New(Config{SessionConfig: c, Term: 7, Now: ck.now}), ck
}

func open(t *testing.T, s *Service, k *sink) *Session {
	t.Helper()
	ss, _, err := s.Open(Identity{User: "u", UID: 1000}, nsapi.SessionHello{Host: "h"}, k, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}

// TestInvalidationsReachSubscribers: an event reaches the sessions with a
// lease on the entry or its directory (once each, numbered in sequence,
// with the term), not the others; pending uploads are not pushed.
func TestInvalidationsReachSubscribers(t *testing.T) {
	s, _ := newService(t, nsapi.SessionConfig{})
	var onDir, onFile, both, none sink
	a, b, c := open(t, s, &onDir), open(t, s, &onFile), open(t, s, &both)
	open(t, s, &none)
	s.Subscribe(a, 10, "/d")
	s.Subscribe(b, 11, "/d/f")
	s.Subscribe(c, 10, "/d")
	s.Subscribe(c, 11, "/d/f")
	s.Deliver([]nsapi.Event{
		{Rev: 1, Kind: nsapi.EventCreated, Ino: 11, Parent: 10, Name: "f"},
		{Rev: 2, Kind: nsapi.EventCommitted, Ino: 11, Parent: 10, Name: "f", Size: 5},
		{Rev: 3, Kind: nsapi.EventMkdir, Ino: 12, Parent: 10, Name: "e", IsDir: true},
	})
	check := func(name string, k *sink, want ...uint64) {
		t.Helper()
		got := k.take()
		if len(got) != len(want) {
			t.Fatalf("%s got %d messages, want %d: %+v", name, len(got), len(want), got)
		}
		for i, m := range got {
			if m.Kind != nsapi.SessionEvent || m.Seq != uint64(i+1) || m.Term != 7 || m.Event.Rev != want[i] || m.Event.Term != 7 {
				t.Fatalf("%s message %d: %+v (event %+v), want event rev %d seq %d term 7", name, i, m, m.Event, want[i], i+1)
			}
		}
	}
	check("the directory's subscriber", &onDir, 2, 3)
	check("the file's subscriber", &onFile, 2)
	check("a subscriber of both", &both, 2, 3)
	check("a session without leases", &none)
}

// TestSuppression: above MaxAudience subscribers of a directory, size and
// mtime updates are not pushed; creations, removals and attribute
// changes still are.
func TestSuppression(t *testing.T) {
	s, _ := newService(t, nsapi.SessionConfig{MaxAudience: 2})
	var sinks [3]sink
	for i := range sinks {
		s.Subscribe(open(t, s, &sinks[i]), 10, "/d")
	}
	s.Deliver([]nsapi.Event{{Rev: 1, Kind: nsapi.EventModified, Ino: 11, Parent: 10, Name: "f", Size: 9}})
	for i := range sinks {
		if got := sinks[i].take(); len(got) != 0 {
			t.Fatalf("a size update reached an audience of 3 above the threshold 2: %+v", got)
		}
	}
	s.Deliver([]nsapi.Event{{Rev: 2, Kind: nsapi.EventRemoved, Ino: 11, Parent: 10, Name: "f"}, {Rev: 3, Kind: nsapi.EventAttr, Ino: 11, Parent: 10, Name: "f"}})
	for i := range sinks {
		if got := sinks[i].take(); len(got) != 2 {
			t.Fatalf("a removal and an attribute change reached session %d as %d messages, want 2", i, len(got))
		}
	}
	if _, err := s.Configure([]string{"broadcast.max-audience=3"}); err != nil {
		t.Fatal(err)
	}
	s.Deliver([]nsapi.Event{{Rev: 4, Kind: nsapi.EventModified, Ino: 11, Parent: 10, Name: "f", Size: 9}})
	if got := sinks[0].take(); len(got) != 1 {
		t.Fatalf("with the threshold at the audience the size update was pushed %d times, want 1", len(got))
	}
}

// TestLeaseExpiry: a lease not renewed lapses after Lease; a renewed one
// does not.
func TestLeaseExpiry(t *testing.T) {
	s, ck := newService(t, nsapi.SessionConfig{Lease: time.Minute})
	var k sink
	ss := open(t, s, &k)
	s.Subscribe(ss, 10, "/d")
	s.Subscribe(ss, 20, "/e")
	ck.add(40 * time.Second)
	if l, _ := s.Renew(ss, []uint64{20}); l[0].Error != "" {
		t.Fatalf("renewing a live lease: %+v", l[0])
	}
	ck.add(30 * time.Second)
	s.Deliver([]nsapi.Event{{Rev: 1, Kind: nsapi.EventMkdir, Ino: 30, Parent: 10, Name: "x"}, {Rev: 2, Kind: nsapi.EventMkdir, Ino: 31, Parent: 20, Name: "y"}})
	got := k.take()
	if len(got) != 1 || got[0].Event.Lease != 20 {
		t.Fatalf("after 70 s: %+v, want only the event under the renewed lease", got)
	}
	if l, _ := s.Renew(ss, []uint64{10}); l[0].Kind != kerr.Expired {
		t.Fatalf("renewing a lapsed lease: %+v", l[0])
	}
	s.Tick()
	if caps, _ := s.Caps(ss.ID); len(caps) != 1 || caps[0].Ino != 20 {
		t.Fatalf("caps after the sweep: %+v", caps)
	}
}

// TestLeaseSweep: the sweep drops each lease once it lapsed, whatever
// order leases were taken and renewed in (it visits a session's leases
// only once the first of them may have lapsed).
func TestLeaseSweep(t *testing.T) {
	s, ck := newService(t, nsapi.SessionConfig{Lease: time.Minute})
	var k sink
	ss := open(t, s, &k)
	caps := func(step string, want ...uint64) {
		t.Helper()
		s.Tick()
		got, _ := s.Caps(ss.ID)
		var inos []uint64
		for _, c := range got {
			inos = append(inos, c.Ino)
		}
		slices.Sort(inos)
		if !slices.Equal(inos, want) {
			t.Fatalf("%s: leases %v, want %v", step, inos, want)
		}
	}
	s.Subscribe(ss, 10, "/a") // lapses at 60 s
	ck.add(30 * time.Second)
	s.Subscribe(ss, 20, "/b") // at 90 s
	ck.add(20 * time.Second)
	s.Renew(ss, []uint64{10}) // at 110 s
	ck.add(11 * time.Second)
	caps("at 61 s", 10, 20)
	ck.add(30 * time.Second)
	caps("at 91 s", 10)
	s.Subscribe(ss, 30, "/c") // at 151 s
	ck.add(20 * time.Second)
	caps("at 111 s", 30)
	ck.add(40 * time.Second)
	caps("at 151 s", 30)
	ck.add(time.Second)
	caps("at 152 s")
}

// TestEvictionReleasesLocks: a session that stops heartbeating is
// volatile, then offline, then evicted with its locks released and the
// waiter woken.
func TestEvictionReleasesLocks(t *testing.T) {
	s, ck := newService(t, nsapi.SessionConfig{})
	var ka, kb sink
	a, b := open(t, s, &ka), open(t, s, &kb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Lock(ctx, a, 5, nsapi.LockRequest{Path: "/f", Type: "write", Owner: 1}); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := s.Lock(ctx, b, 5, nsapi.LockRequest{Path: "/f", Type: "read", Owner: 1, Wait: true})
		got <- err
	}()
	state := func() string {
		for _, x := range s.List().Sessions {
			if x.ID == a.ID {
				return x.State
			}
		}
		return "gone"
	}
	for _, step := range []struct {
		d    time.Duration
		want string
	}{{16 * time.Second, "volatile"}, {15 * time.Second, "offline"}, {90 * time.Second, "gone"}} {
		ck.add(step.d)
		_ = s.Heartbeat(b, 0)
		s.Tick()
		if st := state(); st != step.want {
			t.Fatalf("after %s more: A is %s, want %s", step.d, st, step.want)
		}
		if step.want != "gone" {
			select {
			case err := <-got:
				t.Fatalf("B was answered while A is %s: %v", step.want, err)
			default:
			}
		}
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("B's blocked lock was not granted after A's eviction")
	}
	if m := ka.take(); len(m) != 1 || m[0].Kind != nsapi.SessionEvict {
		t.Fatalf("A was told %+v, want an eviction", m)
	}
	if err := s.Heartbeat(a, 0); !kerr.Is(err, kerr.Expired) {
		t.Fatalf("a heartbeat of the evicted session: %v", err)
	}
}

// TestLostMessagesOweFull: a message the stream could not take is a gap
// in the sequence, and the session is sent a full invalidation once its
// stream takes messages again.
func TestLostMessagesOweFull(t *testing.T) {
	s, ck := newService(t, nsapi.SessionConfig{})
	var k sink
	ss := open(t, s, &k)
	s.Subscribe(ss, 10, "/d")
	s.Deliver([]nsapi.Event{{Rev: 1, Kind: nsapi.EventMkdir, Ino: 30, Parent: 10, Name: "x"}})
	k.full = true
	s.Deliver([]nsapi.Event{{Rev: 2, Kind: nsapi.EventMkdir, Ino: 31, Parent: 10, Name: "y"}})
	k.full = false
	ck.add(2 * time.Second)
	s.Tick()
	got := k.take()
	if len(got) != 2 || got[0].Seq != 1 || got[1].Kind != nsapi.SessionFull || got[1].Seq != 3 {
		t.Fatalf("got %+v, want event seq 1 then a full invalidation seq 3 (2 was lost)", got)
	}
	if l := s.List().Sessions[0]; l.Dropped != 1 {
		t.Fatalf("fusex ls counts %d drops, want 1", l.Dropped)
	}
}

// TestResume: a session resumed on a new stream (same term, its key)
// keeps its locks and loses its leases; a wrong key opens a new session.
func TestResume(t *testing.T) {
	s, _ := newService(t, nsapi.SessionConfig{})
	var k1, k2 sink
	ss, info, _ := s.Open(Identity{User: "u", UID: 1000}, nsapi.SessionHello{}, &k1, 0, nil)
	s.Subscribe(ss, 10, "/d")
	if _, err := s.Lock(context.Background(), ss, 5, nsapi.LockRequest{Path: "/f", Type: "write", Owner: 1}); err != nil {
		t.Fatal(err)
	}
	s.Detach(ss, &k1)
	bad, binfo, _ := s.Open(Identity{User: "u", UID: 1000}, nsapi.SessionHello{Resume: info.ID, Key: "x" + info.Key[1:], Term: 7}, &k2, 0, nil)
	if binfo.Resumed || bad == ss {
		t.Fatal("a wrong key resumed the session")
	}
	again, rinfo, _ := s.Open(Identity{User: "u", UID: 1000}, nsapi.SessionHello{Resume: info.ID, Key: info.Key, Term: 7}, &k2, 0, nil)
	if !rinfo.Resumed || again != ss {
		t.Fatalf("resume with the key: %+v", rinfo)
	}
	if caps, _ := s.Caps(ss.ID); len(caps) != 0 {
		t.Fatalf("a resumed session kept leases: %+v", caps)
	}
	if l := s.Locks(ss); len(l) != 1 {
		t.Fatalf("a resumed session holds %d locks, want 1", len(l))
	}
}

// TestGrace: after a takeover, locks wait for the grace window while the
// sessions of the previous incarnation reclaim theirs; a reclaim after
// the window is lost.
func TestGrace(t *testing.T) {
	ck := &clock{t: time.Unix(1_700_000_000, 0)}
	s := New(Config{Term: 9, Takeover: true, Now: ck.now})
	held := nsapi.Lock{Ino: 5, Kind: nsapi.LockPOSIX, Type: nsapi.LockWrite, Owner: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var kb sink
	b := open(t, s, &kb)
	got := make(chan error, 1)
	go func() {
		_, err := s.Lock(ctx, b, 5, nsapi.LockRequest{Path: "/f", Type: "write", Owner: 1})
		got <- err
	}()
	var ka sink
	_, info, _ := s.Open(Identity{User: "u", UID: 1000}, nsapi.SessionHello{Resume: "old", Term: 8, Locks: []nsapi.Lock{held}}, &ka, 0,
		func(nsapi.Lock) bool { return true })
	if len(info.Reclaimed) != 1 {
		t.Fatalf("reclaim within the window: %+v", info)
	}
	select {
	case err := <-got:
		t.Fatalf("a new lock was answered during the grace window: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	ck.add(31 * time.Second)
	s.Tick()
	select {
	case err := <-got:
		if !kerr.Is(err, kerr.Locked) {
			t.Fatalf("after the window, B's F_SETLK on the reclaimed lock: %v, want locked", err)
		}
	case <-ctx.Done():
		t.Fatal("B's lock still waits after the grace window")
	}
	var kc sink
	_, late, _ := s.Open(Identity{User: "u", UID: 1000}, nsapi.SessionHello{Resume: "old2", Term: 8, Locks: []nsapi.Lock{{Ino: 6, Kind: "posix", Type: "read", Owner: 1}}}, &kc, 0,
		func(nsapi.Lock) bool { return true })
	if len(late.Lost) != 1 {
		t.Fatalf("a reclaim after the window: %+v, want lost", late)
	}
}

// TestConfigure: fusex conf's keys, checked before anything is applied.
func TestConfigure(t *testing.T) {
	s, _ := newService(t, nsapi.SessionConfig{})
	c, err := s.Configure([]string{"heartbeat=5s", "lease=60s", "offline=20s", "evict=1m", "broadcast.max-audience=10"})
	if err != nil || c.Heartbeat != 5*time.Second || c.Lease != time.Minute || c.Offline != 20*time.Second || c.Evict != time.Minute || c.MaxAudience != 10 {
		t.Fatalf("%+v %v", c, err)
	}
	for _, bad := range [][]string{{"lease=-1s"}, {"color=blue"}, {"evict=10s"}, {"heartbeat=5s", "lease"}} {
		if _, err := s.Configure(bad); !kerr.Is(err, kerr.Invalid) {
			t.Fatalf("%v: %v", bad, err)
		}
	}
	if s.Config() != c {
		t.Fatalf("a refused setting changed the config: %+v", s.Config())
	}
}

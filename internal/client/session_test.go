package client_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/kaontest"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// next returns the next invalidation of s, failing the test (naming
// what it waited for) when none comes in time.
func next(t *testing.T, s *client.Session, what string) client.Invalidation {
	t.Helper()
	select {
	case inv, ok := <-s.Invalidations():
		if !ok {
			t.Fatalf("waiting for %s: the session ended", what)
		}
		return inv
	case <-time.After(10 * time.Second):
		t.Fatalf("waiting for %s: nothing within 10 s", what)
	}
	panic("unreachable")
}

func openSession(t *testing.T, st *kaontest.Stack, host string) *client.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := st.Client.OpenSession(ctx, client.SessionOptions{Host: host, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSessionInvalidations: changes made over HTTP (an upload, a mkdir,
// a rename, an attribute) reach a session subscribed to the directory,
// in order and numbered without gaps; one not subscribed hears nothing.
func TestSessionInvalidations(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.Client.Mkdir(ctx, "/d", 0, false); err != nil {
		t.Fatal(err)
	}
	s, other := openSession(t, st, "a"), openSession(t, st, "b")
	leases, err := s.Subscribe(ctx, "/d", "/nope")
	if err != nil {
		t.Fatal(err)
	}
	if leases[0].Ino == 0 || leases[0].Error != "" || leases[1].Kind != kerr.NotFound {
		t.Fatalf("leases: %+v", leases)
	}
	if code := st.Put(t, "/d/f", []byte("hello")); code != 201 {
		t.Fatalf("PUT: %d", code)
	}
	inv := next(t, s, "the upload's invalidation")
	if inv.Full || inv.Kind != nsapi.EventCommitted || inv.Name != "f" || inv.Size != 5 || inv.Lease != leases[0].Ino {
		t.Fatalf("after the upload: %+v", inv)
	}
	if err := st.Client.Rename(ctx, "/d/f", "/d/g", false); err != nil {
		t.Fatal(err)
	}
	if inv := next(t, s, "the rename's invalidation"); inv.Kind != nsapi.EventRenamed || inv.FromName != "f" || inv.Name != "g" {
		t.Fatalf("after the rename: %+v", inv)
	}
	if err := st.Client.SetAttr(ctx, "/d/g", "user.x", "1"); err != nil {
		t.Fatal(err)
	}
	if inv := next(t, s, "the attribute's invalidation"); inv.Kind != nsapi.EventAttr || inv.Name != "g" {
		t.Fatalf("after setting an attribute: %+v", inv)
	}
	select {
	case inv := <-other.Invalidations():
		t.Fatalf("a session without leases was told %+v", inv)
	default:
	}
}

// TestSessionReconnectInvalidatesAll: a stream that breaks is
// reconnected, the session resumed, and the client told to drop
// everything (nothing is missed silently); the session's locks stay.
func TestSessionReconnectInvalidatesAll(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st.Put(t, "/f", []byte("x"))
	s := openSession(t, st, "a")
	id := s.ID()
	if err := s.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockWrite, Owner: 1}); err != nil {
		t.Fatal(err)
	}
	st.CloseClientConnections()
	inv := next(t, s, "the full invalidation after the reconnection")
	if !inv.Full || !strings.Contains(inv.Reason, "reconnected") {
		t.Fatalf("after the stream broke: %+v", inv)
	}
	if s.ID() != id {
		t.Fatalf("the session was not resumed: %s, was %s", s.ID(), id)
	}
	b := openSession(t, st, "b")
	if err := b.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockRead, Owner: 1}); !kerr.Is(err, kerr.Locked) {
		t.Fatalf("B's lock after A reconnected: %v, want locked (A keeps its lock)", err)
	}
}

// TestSessionLocks: a lock held by one session is in the way of another
// (F_SETLK: EAGAIN; F_GETLK names it); a blocked F_SETLKW is granted when
// it is released; an evicted session's locks are released.
func TestSessionLocks(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st.Put(t, "/f", []byte("x"))
	a, b := openSession(t, st, "a"), openSession(t, st, "b")
	if err := a.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockWrite, Owner: 7, Start: 0, Len: 100, Pid: 42}); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockRead, Owner: 1, Start: 50, Len: 10}); !kerr.Is(err, kerr.Locked) {
		t.Fatalf("B's F_SETLK over A's lock: %v", err)
	}
	l, err := b.GetLk(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockRead, Owner: 1, Start: 50, Len: 10})
	if err != nil || l == nil || l.Pid != 42 || l.Len != 100 || l.Type != nsapi.LockWrite {
		t.Fatalf("F_GETLK: %+v %v", l, err)
	}
	if err := b.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockRead, Owner: 1, Start: 100, Len: 10}); err != nil {
		t.Fatalf("B's lock beside A's: %v", err)
	}
	granted := make(chan error, 1)
	go func() {
		granted <- b.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockWrite, Owner: 1, Start: 0, Len: 10, Wait: true})
	}()
	select {
	case err := <-granted:
		t.Fatalf("B's F_SETLKW answered while A holds the lock: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := a.Unlock(ctx, nsapi.LockRequest{Path: "/f", Owner: 7}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("B's F_SETLKW was not granted after A released the lock")
	}
	// Eviction releases B's locks: A can take the whole file.
	if _, err := st.Client.FusexEvict(ctx, b.ID()); err != nil {
		t.Fatal(err)
	}
	if inv := next(t, b, "B's eviction"); !inv.Full || len(inv.LostLocks) != 2 {
		t.Fatalf("B was told %+v, want a full invalidation with its 2 locks lost", inv)
	}
	if err := a.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockWrite, Owner: 7}); err != nil {
		t.Fatalf("A's lock after B's eviction: %v", err)
	}
}

// TestSessionStreamEndsWithLockWaiting: a stream that breaks while one
// of its sessions waits in F_SETLKW ends cleanly on the server (the
// withdrawn wait is not answered on a response that is gone), again and
// again; the session reconnects and its wait fails as the stream broke.
func TestSessionStreamEndsWithLockWaiting(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st.Put(t, "/f", []byte("x"))
	a, b := openSession(t, st, "a"), openSession(t, st, "b")
	if err := a.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockWrite, Owner: 1, Len: 10}); err != nil {
		t.Fatal(err)
	}
	if err := b.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockWrite, Owner: 2, Start: 1000, Len: 1}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		waited := make(chan error, 1)
		wait := func() {
			waited <- b.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockWrite, Owner: 2, Len: 10, Wait: true})
		}
		go wait()
		// B's wait is on the server once A, waiting for B's other lock,
		// is refused as a deadlock (when A's wait came first, B's is
		// the one refused: B waits again).
		deadline := time.Now().Add(20 * time.Second)
		for {
			wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
			err := a.Lock(wctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockWrite, Owner: 1, Start: 1000, Len: 1, Wait: true})
			wcancel()
			if kerr.Is(err, kerr.Deadlock) {
				break
			}
			select {
			case err := <-waited:
				if !kerr.Is(err, kerr.Deadlock) {
					t.Fatalf("round %d: B's F_SETLKW answered while A holds the lock: %v", i, err)
				}
				go wait()
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: B's F_SETLKW is not waiting on the server within 20 s (A's crossing wait: %v)", i, err)
			}
			if kerr.Is(err, kerr.Unavailable) {
				time.Sleep(10 * time.Millisecond) // A reconnects
			}
		}
		st.CloseClientConnections()
		select {
		case err := <-waited:
			if !kerr.Is(err, kerr.Unavailable) {
				t.Fatalf("round %d: B's F_SETLKW when its stream broke: %v, want unavailable", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("round %d: B's F_SETLKW did not end when its stream broke", i)
		}
		// Both sessions are back: A's lock is still in B's way.
		if err := b.Lock(ctx, nsapi.LockRequest{Path: "/f", Type: nsapi.LockWrite, Owner: 2, Len: 10}); !kerr.Is(err, kerr.Locked) {
			t.Fatalf("round %d: B's F_SETLK after reconnecting: %v, want locked", i, err)
		}
	}
}

// TestIdleSessionStreamIsSmall: what an idle session costs, its stream
// on the server and its client together (one stream per session, as a
// mount has): a queue allocated for the messages a stream may hold
// before they are lost cost 512 KiB per stream whether any came or not.
func TestIdleSessionStreamIsSmall(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{})
	openSession(t, st, "warm-up")
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	const n = 40
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		// The client's invalidation channel is its own choice (Events):
		// a small one here, so the figure is the stream's.
		s, err := st.Client.OpenSession(ctx, client.SessionOptions{Host: fmt.Sprintf("idle-%d", i), Events: 16})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
	}
	per := (int64(heap()) - int64(before)) / n
	t.Logf("%d idle sessions: %d KiB each (server and client)", n, per>>10)
	if per > 256<<10 {
		t.Fatalf("an idle session costs %d KiB of heap (server and client), want at most 256 KiB", per>>10)
	}
}

// TestSubscribeListAndStat: a subscribe that asks for the listing gets
// the directory's entries read after its lease was granted (a change
// after it comes as an invalidation); stat framed on the session stream
// answers as the HTTP route does, NotFound included; mkdir, chmod and
// chown answer the entry as it is after the change.
func TestSubscribeListAndStat(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := st.Client.MkdirStat(ctx, "/l", 0o750, false)
	if err != nil || d.ID == 0 || !d.IsDir || d.Mode != 0o750 {
		t.Fatalf("mkdir's entry: %+v, %v", d, err)
	}
	if code := st.Put(t, "/l/a", []byte("a")); code != 201 {
		t.Fatalf("PUT: %d", code)
	}
	if e, err := st.Client.ChmodStat(ctx, "/l/a", 0o600); err != nil || e.Mode != 0o600 || e.Name != "a" {
		t.Fatalf("chmod's entry: %+v, %v", e, err)
	}
	if e, err := st.Client.ChownStat(ctx, "/l/a", 7, 8); err != nil || e.UID != 7 || e.GID != 8 || e.Mode != 0o600 {
		t.Fatalf("chown's entry: %+v, %v", e, err)
	}
	s := openSession(t, st, "a")
	ls, err := s.SubscribeList(ctx, "/l")
	if err != nil || len(ls) != 1 || !ls[0].Listed || len(ls[0].Entries) != 1 || ls[0].Entries[0].Name != "a" || ls[0].Entries[0].UID != 7 {
		t.Fatalf("subscribe with listing: %+v, %v", ls, err)
	}
	if code := st.Put(t, "/l/b", []byte("b")); code != 201 {
		t.Fatalf("PUT: %d", code)
	}
	if inv := next(t, s, "the upload's invalidation"); inv.Kind != nsapi.EventCommitted || inv.Name != "b" {
		t.Fatalf("after the upload: %+v", inv)
	}
	if e, err := s.Stat(ctx, "/l/b"); err != nil || e.Size != 1 || e.Name != "b" {
		t.Fatalf("stat on the session: %+v, %v", e, err)
	}
	if _, err := s.Stat(ctx, "/l/nope"); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("stat of a missing name on the session: %v, want NotFound", err)
	}
	// Without asking, no listing.
	if ls, err := s.Subscribe(ctx, "/l"); err != nil || ls[0].Listed || ls[0].Entries != nil {
		t.Fatalf("subscribe without listing: %+v, %v", ls, err)
	}
}

// TestSessionBatch: the requests of one frame each get their own reply,
// in order: a failing create does not fail the others, and a request
// on a path an earlier one of the batch touched sees what it did (the
// stat after the create finds the file, the second exclusive create of
// the same name fails).
func TestSessionBatch(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.Client.Mkdir(ctx, "/b", 0, false); err != nil {
		t.Fatal(err)
	}
	s := openSession(t, st, "batch")
	create := func(p string) nsapi.SessionRequest {
		return nsapi.SessionRequest{Op: nsapi.SessionCreate, Paths: []string{p}, Exclusive: true, Mode: 0o600}
	}
	stat := func(p string) nsapi.SessionRequest {
		return nsapi.SessionRequest{Op: nsapi.SessionStat, Paths: []string{p}}
	}
	replies, err := s.Batch(ctx,
		create("/b/x"), create("/nodir/y"), create("/b/z"), stat("/b/x"), create("/b/x"),
		stat("/b/none"), nsapi.SessionRequest{Op: nsapi.SessionNull}, nsapi.SessionRequest{Op: nsapi.SessionLock})
	if err != nil {
		t.Fatal(err)
	}
	fails := map[int]kerr.Kind{1: kerr.NotFound, 4: kerr.Exists, 5: kerr.NotFound, 7: kerr.Unsupported}
	names := map[int]string{1: "/nodir/y", 4: "/b/x", 5: "/b/none", 7: "lock"}
	for i, m := range replies {
		if kind, ok := fails[i]; ok {
			if m.Error == nil || m.Error.Kind != kind || !strings.Contains(m.Error.Message, names[i]) {
				t.Errorf("request %d: want a %s error naming %s, got %+v", i, kind, names[i], m.Error)
			}
			continue
		}
		if m.Error != nil {
			t.Errorf("request %d failed: %s", i, m.Error.Message)
		}
	}
	if e := replies[0].Entry; e == nil || e.Path != "/b/x" || e.Mode != 0o600 {
		t.Errorf("the create's entry: %+v", e)
	}
	if e := replies[3].Entry; e == nil || e.Path != "/b/x" || e.ID != replies[0].Entry.ID {
		t.Errorf("the stat after the create in the same batch: %+v (created %+v)", e, replies[0].Entry)
	}
	// What is stored is what the replies said.
	for _, p := range []string{"/b/x", "/b/z"} {
		if _, err := st.Client.Stat(ctx, p); err != nil {
			t.Errorf("%s, created in the batch: %v", p, err)
		}
	}
	if _, err := st.Client.Stat(ctx, "/nodir"); !kerr.Is(err, kerr.NotFound) {
		t.Errorf("/nodir after the failed create: %v", err)
	}
	// Stat, create, stat of each of many names in one batch: the first
	// stat finds nothing, the second the file.
	var reqs []nsapi.SessionRequest
	for i := range 50 {
		p := fmt.Sprintf("/b/q%02d", i)
		reqs = append(reqs, stat(p), create(p), stat(p))
	}
	replies, err = s.Batch(ctx, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(replies); i += 3 {
		p := reqs[i].Paths[0]
		if m := replies[i]; m.Error == nil || m.Error.Kind != kerr.NotFound {
			t.Errorf("stat %s before its create in the batch: %+v %+v", p, m.Entry, m.Error)
		}
		if m := replies[i+1]; m.Error != nil {
			t.Errorf("create %s: %s", p, m.Error.Message)
		}
		if m := replies[i+2]; m.Error != nil || m.Entry == nil || m.Entry.Path != p {
			t.Errorf("stat %s after its create in the batch: %+v", p, m.Error)
		}
	}
	// Through the API, concurrent calls share frames and each gets its own answer.
	errs := make(chan error, 64)
	for i := range 64 {
		go func() {
			p := fmt.Sprintf("/b/c%02d", i)
			if i%8 == 0 {
				p = fmt.Sprintf("/missing/c%02d", i)
			}
			_, err := s.Create(ctx, p, true, 0)
			switch {
			case i%8 == 0 && !kerr.Is(err, kerr.NotFound):
				err = fmt.Errorf("create %s: want not found, got %v", p, err)
			case i%8 == 0:
				err = nil
			}
			errs <- err
		}()
	}
	for range 64 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if ents, err := st.Client.List(ctx, "/b"); err != nil || len(ents) != 2+50+56 {
		t.Errorf("/b holds %d entries (%v), want 108", len(ents), err)
	}
}

// TestSessionBatchAuthorization: each request of a batch is authorized
// as the stream's identity, on its own: a create the identity may not
// make is refused (permission, naming the path) while the others of the
// same frame are made.
func TestSessionBatchAuthorization(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{Auth: auth.Chain{byBearer{}}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, d := range []string{"/ok", "/no"} {
		if err := st.Client.Mkdir(ctx, d, 0o755, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Client.ChownStat(ctx, "/ok", 1000, 1000); err != nil {
		t.Fatal(err)
	}
	alice := client.New(st.HTTP.URL)
	alice.Token = "alice"
	s, err := alice.OpenSession(ctx, client.SessionOptions{Host: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	replies, err := s.Batch(ctx,
		nsapi.SessionRequest{Op: nsapi.SessionCreate, Paths: []string{"/ok/a"}},
		nsapi.SessionRequest{Op: nsapi.SessionCreate, Paths: []string{"/no/b"}},
		nsapi.SessionRequest{Op: nsapi.SessionCreate, Paths: []string{"/ok/c"}},
		nsapi.SessionRequest{Op: nsapi.SessionStat, Paths: []string{"/no"}})
	if err != nil {
		t.Fatal(err)
	}
	if m := replies[1]; m.Error == nil || m.Error.Kind != kerr.Permission || !strings.Contains(m.Error.Message, "/no/b") {
		t.Errorf("alice's create in root's directory: %+v", m.Error)
	}
	for _, i := range []int{0, 2, 3} {
		if m := replies[i]; m.Error != nil || m.Entry == nil {
			t.Errorf("request %d: %+v", i, m.Error)
		}
	}
	if e := replies[0].Entry; e == nil || e.UID != 1000 {
		t.Errorf("alice's file: %+v", e)
	}
	if _, err := st.Client.Stat(ctx, "/no/b"); !kerr.Is(err, kerr.NotFound) {
		t.Errorf("/no/b after the refused create: %v", err)
	}
	if _, err := st.Client.Stat(ctx, "/ok/c"); err != nil {
		t.Errorf("/ok/c: %v", err)
	}
}

// byBearer authenticates "Bearer alice" as uid 1000, anything else as
// root (the test's administrator).
type byBearer struct{}

func (byBearer) TakesBearer() {}

func (byBearer) Authenticate(_ context.Context, r *auth.Request) (auth.Principal, bool, error) {
	if r.Bearer == "alice" {
		return auth.Principal{UID: 1000, GID: 1000, Name: "alice", Method: "test"}, true, nil
	}
	return auth.Principal{Name: "root", Method: "test"}, true, nil
}

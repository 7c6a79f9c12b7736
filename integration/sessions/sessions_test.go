// Package sessions tests client sessions with the real binary: changes
// made with curl, xrdcp and the CLI reach the sessions subscribed to
// them; nothing is missed silently; locks between sessions, and a dead
// client's locks released when its session is evicted.
package sessions

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// TestMain doubles as a client process the tests kill: with
// KAON_LOCK_HELPER=URL,PATH it opens a session at URL, takes a write
// lock on PATH, prints "locked SESSION" and waits to be killed.
func TestMain(m *testing.M) {
	if spec := os.Getenv("KAON_LOCK_HELPER"); spec != "" {
		url, path, _ := strings.Cut(spec, ",")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := client.New(url).OpenSession(ctx, client.SessionOptions{Host: "helper"})
		if err == nil {
			err = s.Lock(ctx, nsapi.LockRequest{Path: path, Type: nsapi.LockWrite, Owner: 1})
		}
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("locked", s.ID())
		select {}
	}
	os.Exit(m.Run())
}

func next(t *testing.T, s *client.Session, what string) client.Invalidation {
	t.Helper()
	select {
	case inv, ok := <-s.Invalidations():
		if !ok {
			t.Fatalf("waiting for %s: the session ended", what)
		}
		return inv
	case <-time.After(20 * time.Second):
		t.Fatalf("waiting for %s: nothing within 20 s", what)
	}
	panic("unreachable")
}

func open(t *testing.T, url, host string) *client.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := client.New(url).OpenSession(ctx, client.SessionOptions{Host: host, Version: "test"})
	if err != nil {
		t.Fatalf("opening a session at %s: %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// TestChangesReachSubscribers: a change made with curl, xrdcp, the CLI
// or a conversion reaches both sessions subscribed to its directory (and
// a lease on a file reaches its own changes); fusex ls and caps show
// them.
func TestChangesReachSubscribers(t *testing.T) {
	p := harness.Up(t)
	p.MustKaon("mkdir", "-p", "/data")
	a, b := open(t, p.EP.HTTP, "node-a"), open(t, p.EP.HTTP, "node-b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, s := range []*client.Session{a, b} {
		if l, err := s.Subscribe(ctx, "/data"); err != nil || l[0].Error != "" {
			t.Fatalf("subscribe /data: %+v %v", l, err)
		}
	}
	expect := func(step string, match func(client.Invalidation) bool) {
		t.Helper()
		for _, s := range []*client.Session{a, b} {
			for {
				inv := next(t, s, step)
				if inv.Full {
					t.Fatalf("%s: a full invalidation (%s) instead of the change", step, inv.Reason)
				}
				if match(inv) {
					break
				}
			}
		}
	}
	local := filepath.Join(t.TempDir(), "f")
	os.WriteFile(local, []byte("hello sessions"), 0o644)
	run(t, "curl", "-sSf", "-L", "-T", local, p.EP.HTTP+"/data/curl.txt")
	expect("curl's upload", func(i client.Invalidation) bool {
		return i.Kind == nsapi.EventCommitted && i.Name == "curl.txt" && i.Size == 14
	})
	run(t, "xrdcp", "-f", local, p.EP.XRootD+"//data/xrd.txt")
	expect("xrdcp's upload", func(i client.Invalidation) bool { return i.Kind == nsapi.EventCommitted && i.Name == "xrd.txt" })
	p.MustKaon("mkdir", "/data/sub")
	expect("kaon mkdir", func(i client.Invalidation) bool { return i.Kind == nsapi.EventMkdir && i.Name == "sub" && i.IsDir })
	p.MustKaon("mv", "/data/xrd.txt", "/data/moved.txt")
	expect("kaon mv", func(i client.Invalidation) bool {
		return i.Kind == nsapi.EventRenamed && i.FromName == "xrd.txt" && i.Name == "moved.txt"
	})
	// A lease on a file: its conversion (a new file id under its name)
	// reaches it.
	l, err := a.Subscribe(ctx, "/data/curl.txt")
	if err != nil || l[0].Error != "" {
		t.Fatalf("subscribe /data/curl.txt: %+v %v", l, err)
	}
	p.MustKaon("file", "convert", "/data/curl.txt", "--layout", "replica:2")
	harness.WaitFor(t, 60*time.Second, "the conversion of /data/curl.txt", func() bool {
		out, _, _ := p.Kaon("file", "info", "/data/curl.txt")
		return strings.Contains(out, "replica:2")
	})
	expect("the conversion", func(i client.Invalidation) bool { return i.Kind == nsapi.EventCommitted && i.Name == "curl.txt" })
	p.MustKaon("rm", "/data/moved.txt")
	expect("kaon rm", func(i client.Invalidation) bool { return i.Kind == nsapi.EventRemoved && i.Name == "moved.txt" })

	ls := p.MustKaon("fusex", "ls")
	for _, want := range []string{a.ID(), b.ID(), "node-a", "node-b", "online"} {
		if !strings.Contains(ls, want) {
			t.Fatalf("fusex ls lacks %q:\n%s", want, ls)
		}
	}
	if caps := p.MustKaon("fusex", "caps", a.ID()); !strings.Contains(caps, "/data/curl.txt") || !strings.Contains(caps, "/data\n") {
		t.Fatalf("fusex caps %s:\n%s", a.ID(), caps)
	}
	p.MustKaon("fusex", "dropcaps", b.ID())
	if inv := next(t, b, "dropcaps' full invalidation"); !inv.Full {
		t.Fatalf("after dropcaps B was told %+v", inv)
	}
	// conf sets what it is given and shows every setting; evict ends a
	// session (its client is told, and comes back as a new session).
	if out := p.MustKaon("fusex", "conf", "lease=600s", "broadcast.max-audience=128"); !strings.Contains(out, "lease=10m0s") || !strings.Contains(out, "broadcast.max-audience=128") || !strings.Contains(out, "heartbeat=10s") {
		t.Fatalf("fusex conf lease=600s broadcast.max-audience=128:\n%s", out)
	}
	if _, stderr, code := p.Kaon("fusex", "conf", "lease=soon"); code == 0 || !strings.Contains(stderr, "lease") {
		t.Fatalf("fusex conf lease=soon: exit %d, %s", code, stderr)
	}
	evicted := b.ID()
	if out := p.MustKaon("fusex", "evict", evicted); !strings.Contains(out, "evicted "+evicted) {
		t.Fatalf("fusex evict %s: %s", evicted, out)
	}
	if inv := next(t, b, "the eviction's full invalidation"); !inv.Full {
		t.Fatalf("after fusex evict B was told %+v", inv)
	}
	harness.WaitFor(t, 20*time.Second, "B's client back as a new session", func() bool { return b.ID() != "" && b.ID() != evicted })
	if ls := p.MustKaon("fusex", "ls"); strings.Contains(ls, evicted) || !strings.Contains(ls, b.ID()) {
		t.Fatalf("fusex ls after evicting %s (B is now %s):\n%s", evicted, b.ID(), ls)
	}
}

// TestNothingMissedSilently: a client that does not read its
// invalidations while a burst of changes arrives is told to drop
// everything (a Full invalidation) after what it could take; with a
// small channel, every change either arrives or is covered by a Full
// that comes after it.
func TestNothingMissedSilently(t *testing.T) {
	p := harness.Up(t)
	p.MustKaon("mkdir", "-p", "/burst")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := client.New(p.EP.HTTP).OpenSession(ctx, client.SessionOptions{Host: "slow", Events: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Subscribe(ctx, "/burst"); err != nil {
		t.Fatal(err)
	}
	api := client.New(p.EP.HTTP)
	const n = 40
	for i := 0; i < n; i++ {
		if err := api.Mkdir(ctx, fmt.Sprintf("/burst/d%02d", i), 0, false); err != nil {
			t.Fatal(err)
		}
	}
	// The last change made must be covered: by its own event, or by a
	// Full one after everything else.
	seen, full := 0, false
	for !full && seen < n {
		inv := next(t, s, fmt.Sprintf("the burst's invalidations (%d events so far)", seen))
		if inv.Full {
			full = true
			continue
		}
		seen++
	}
	if !full {
		t.Fatalf("a client with room for 4 invalidations got all %d without a full invalidation", n)
	}
}

// TestLocksBetweenSessions: F_SETLK, F_GETLK and F_SETLKW between two
// sessions; a client killed with its lock held keeps it until its
// session is evicted (no heartbeat for --session-evict), then the
// waiting F_SETLKW is granted; fusex droplocks releases locks.
func TestLocksBetweenSessions(t *testing.T) {
	p := harness.Up(t, "--session-heartbeat", "1s", "--session-offline", "2s", "--session-evict", "4s")
	run(t, "curl", "-sSf", "-L", "-T", "/dev/null", p.EP.HTTP+"/locked")
	run(t, "curl", "-sSf", "-L", "-T", "/dev/null", p.EP.HTTP+"/other")
	helper := exec.Command(os.Args[0], "-test.run", "^$")
	helper.Env = append(os.Environ(), "KAON_LOCK_HELPER="+p.EP.HTTP+",/locked")
	out, _ := helper.StdoutPipe()
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer helper.Process.Kill()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if !strings.HasPrefix(line, "locked ") {
		t.Fatalf("the helper client: %q", line)
	}
	b := open(t, p.EP.HTTP, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req := nsapi.LockRequest{Path: "/locked", Type: nsapi.LockWrite, Owner: 1, Pid: 9}
	if err := b.Lock(ctx, req); !kerr.Is(err, kerr.Locked) {
		t.Fatalf("F_SETLK on the helper's lock: %v, want EAGAIN", err)
	}
	if l, err := b.GetLk(ctx, req); err != nil || l == nil || l.Session != strings.TrimSpace(strings.TrimPrefix(line, "locked ")) {
		t.Fatalf("F_GETLK: %+v %v, want the helper's lock", l, err)
	}
	granted := make(chan error, 1)
	go func() { w := req; w.Wait = true; granted <- b.Lock(ctx, w) }()
	time.Sleep(6 * time.Second) // longer than --session-evict: the helper heartbeats, so it keeps its lock
	select {
	case err := <-granted:
		t.Fatalf("F_SETLKW answered while the helper's session is alive: %v", err)
	default:
	}
	killed := time.Now()
	helper.Process.Kill()
	helper.Wait()
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("F_SETLKW after the helper's eviction: %v", err)
		}
		t.Logf("granted %v after the helper was killed", time.Since(killed).Round(100*time.Millisecond))
	case <-ctx.Done():
		t.Fatal("F_SETLKW was not granted after the killed client's session was evicted")
	}
	// droplocks: B's lock goes, another session can take it.
	c := open(t, p.EP.HTTP, "c")
	if err := c.Lock(ctx, req); !kerr.Is(err, kerr.Locked) {
		t.Fatalf("C's F_SETLK on B's lock: %v", err)
	}
	if out := p.MustKaon("fusex", "droplocks", "/locked"); !strings.Contains(out, "released 1 locks") {
		t.Fatalf("fusex droplocks: %s", out)
	}
	if err := c.Lock(ctx, req); err != nil {
		t.Fatalf("C's F_SETLK after droplocks: %v", err)
	}
	// flock is its own space: B's flock beside C's POSIX lock.
	if err := b.Lock(ctx, nsapi.LockRequest{Path: "/locked", Kind: nsapi.LockFlock, Type: nsapi.LockWrite, Owner: 2}); err != nil {
		t.Fatalf("flock beside a POSIX lock: %v", err)
	}
}

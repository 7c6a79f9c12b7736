package nsserver

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The sweeper aborts a pending upload once its capability expired more
// than the grace ago and no storage server reported writing it within the
// grace, and releases its quota; an upload a storage server keeps
// reporting stays pending however old, and so does one whose capability
// is still good. Time is the test's clock; the sweeper ticks every few
// milliseconds.
func TestSweeperAbortsUploadsNobodyWrites(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := &testClock{t: time.Unix(1_700_000_000, 0)}
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	const ttl = time.Minute
	s, err := New(Config{Engine: memkv.New(), Key: key, CapabilityTTL: ttl, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	s.sweep = sweepTiming{every: 2 * time.Millisecond, grace: 30 * time.Second}
	register(t, s, 2, 2)
	if err := s.ns.Mkdir(namespace.Root, "/q", 0o777, false); err != nil {
		t.Fatal(err)
	}
	if err := s.ns.SetQuota(namespace.Root, "/q", namespace.QuotaKey{Kind: namespace.QuotaUser, ID: 0}, namespace.Amount{Bytes: 1 << 30, Files: 100}); err != nil {
		t.Fatal(err)
	}
	open := func(p string, size int64) uint64 {
		t.Helper()
		g, err := s.Open(ctx, root, p, nsapi.OpenRequest{Write: true, Create: true, Truncate: true, Size: size})
		if err != nil {
			t.Fatal(err)
		}
		return g.File.ID
	}
	beat := func(fids ...uint64) {
		t.Helper()
		if _, err := s.Heartbeat(ctx, message.Heartbeat{Version: message.Version, Node: "node0", Addr: "http://node0",
			Filesystems: []message.FsReport{{Path: "/d0", Capacity: 1 << 40, Health: "ok"}, {Path: "/d1", Capacity: 1 << 40, Health: "ok"}},
			Uploads:     fids}); err != nil {
			t.Fatal(err)
		}
	}
	pending := func(fid uint64) bool {
		_, err := s.ns.Pending(fid)
		if err != nil && !kerr.Is(err, kerr.NotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	booked := func() namespace.Amount {
		t.Helper()
		qs, err := s.ns.Quotas(namespace.Root, "/q")
		if err != nil || len(qs) != 1 {
			t.Fatalf("quota ls: %+v %v", qs, err)
		}
		return qs[0].Booked[namespace.QuotaKey{Kind: namespace.QuotaUser, ID: 0}]
	}
	within := func(step string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", step)
			}
			time.Sleep(time.Millisecond)
		}
	}

	written := open("/q/written", 100) // claimed, and reported by its storage server
	idle := open("/q/idle", 1000)      // its client never reached a storage server
	if err := s.Claim(ctx, written); err != nil {
		t.Fatal(err)
	}
	beat(written)
	go s.sweepUploads(ctx, clock.now())

	// Both capabilities expired, the grace passed; a new upload starts.
	clock.add(ttl + s.sweep.grace + time.Second)
	young := open("/q/young", 10)
	beat(written)
	within("the sweeper aborts the upload nobody writes", func() bool { return !pending(idle) })
	if !pending(written) || !pending(young) {
		t.Fatalf("the sweeper aborted an upload that is written (%v) or whose capability is good (%v)", !pending(written), !pending(young))
	}
	if b := booked(); b != (namespace.Amount{Bytes: 110, Files: 2}) {
		t.Fatalf("booked after the sweep: %+v, want the two uploads left (110 bytes, 2 files)", b)
	}

	// Its storage server stops reporting it (it died): aborted once the
	// last report is older than the grace; young's capability is good.
	clock.add(s.sweep.grace + time.Second)
	within("the sweeper aborts the upload no storage server reports any more", func() bool { return !pending(written) })
	if !pending(young) {
		t.Fatal("the sweeper aborted an upload whose capability has not expired")
	}
	if b := booked(); b != (namespace.Amount{Bytes: 10, Files: 1}) {
		t.Fatalf("booked after the second sweep: %+v, want young's (10 bytes, 1 file)", b)
	}
	if err := s.Commit(ctx, message.Commit{Fid: written, Size: 100}); !kerr.Is(err, kerr.Aborted) {
		t.Fatalf("commit of a swept upload: %v, want aborted", err)
	}
}

// A server that takes over from one that handed over keeps its uploads in
// flight: claimed ones stay claimed (a replayed capability is refused),
// bookings stay booked, and they commit on the new server.
func TestInheritedUploadsCommitOnTheNewServer(t *testing.T) {
	ctx := context.Background()
	eng := memkv.New()
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	a, err := New(Config{Engine: eng, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	register(t, a, 2, 2)
	g, err := a.Open(ctx, root, "/f", nsapi.OpenRequest{Write: true, Create: true, Truncate: true, Size: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Claim(ctx, g.File.ID); err != nil {
		t.Fatal(err)
	}
	in := a.HandOver()
	if err := a.Claim(ctx, g.File.ID); !kerr.Is(err, kerr.Busy) {
		t.Fatalf("claim after the handover: %v, want busy", err)
	}
	b, err := New(Config{Engine: eng, Key: key, Inherit: &in})
	if err != nil {
		t.Fatal(err)
	}
	register(t, b, 2, 2)
	if err := b.Claim(ctx, g.File.ID); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("second claim on the new server: %v, want refused", err)
	}
	if err := b.Commit(ctx, message.Commit{Fid: g.File.ID, Size: 5}); err != nil {
		t.Fatalf("commit on the new server: %v", err)
	}
	if st, err := b.ns.Stat(namespace.Root, "/f"); err != nil || st.Size != 5 {
		t.Fatalf("/f after the commit: %+v %v", st, err)
	}
	// Without a handover (a crash) the new server aborts it.
	g2, err := b.Open(ctx, root, "/g", nsapi.OpenRequest{Write: true, Create: true, Truncate: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Engine: eng, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	// Its storage server is told why, as something to send again.
	if err := c.Claim(ctx, g2.File.ID); !kerr.Is(err, kerr.Aborted) || !strings.Contains(err.Error(), "failover") {
		t.Fatalf("claim after a takeover without handover: %v, want aborted by a failover", err)
	}
	if err := c.Commit(ctx, message.Commit{Fid: g2.File.ID}); !kerr.Is(err, kerr.Aborted) || !strings.Contains(err.Error(), "failover") {
		t.Fatalf("commit after a takeover without handover: %v, want aborted by a failover", err)
	}
}

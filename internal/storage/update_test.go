package storage

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/backendtest"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/storage/storagetest"
)

// uploaded writes data as a new file through servers[0] and returns its
// write capability.
func uploaded(t *testing.T, servers []*Server, key *capability.Key, c *capability.Capability, data []byte) {
	t.Helper()
	u, err := servers[0].NewUpload(context.Background(), c, key.Sign(c), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.ReadFrom(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// updateCap is the update capability of the file c wrote, at ns's version.
func updateCap(t *testing.T, ns *storagetest.Namespace, c *capability.Capability) *capability.Capability {
	t.Helper()
	fv, err := ns.FileVersion(context.Background(), c.Fid)
	if err != nil {
		t.Fatal(err)
	}
	u := *c
	u.Update, u.Size, u.DataVersion, u.Stale = true, fv.Size, fv.DataVersion, fv.Stale
	return &u
}

// readCap is the read capability of the file c wrote, at ns's version.
// updateHead writes "NEW!" at offset 0 of c's file through an update
// session on s and commits it.
func updateHead(t *testing.T, s *Server, ns *storagetest.Namespace, key *capability.Key, c *capability.Capability) {
	t.Helper()
	uc := updateCap(t, ns, c)
	u, err := s.NewUpdate(context.Background(), uc, key.Sign(uc))
	if err != nil {
		t.Fatal(err)
	}
	u.WriteAt([]byte("NEW!"), 0)
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func readCap(t *testing.T, ns *storagetest.Namespace, c *capability.Capability) *capability.Capability {
	r := *updateCap(t, ns, c)
	r.Write, r.Update = false, false
	return &r
}

func readUpdated(t *testing.T, s *Server, key *capability.Key, c *capability.Capability) ([]byte, error) {
	t.Helper()
	f, err := s.Open(context.Background(), c, key.Sign(c), time.Second)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}

// TestUpdateSession: writes at offsets (inside, across and past the end),
// truncations (cut, extend) and a sync in the middle of a session, read
// back through the session before it commits and by a new reader after,
// for every layout with stripes on two servers; nothing the session wrote
// is visible to a reader before it commits.
func TestUpdateSession(t *testing.T) {
	for _, tc := range []struct {
		layout string
		n      int
	}{{"plain", 1}, {"replica:2", 2}, {"ec:2+1:4096", 3}} {
		t.Run(tc.layout, func(t *testing.T) {
			servers, ns, key, _ := memServers(t, 2, 3)
			c := spread(60, tc.layout, tc.n, 2)
			r := rand.New(rand.NewPCG(3, 4))
			m := &backendtest.Model{B: make([]byte, 50000)}
			for i := range m.B {
				m.B[i] = byte(r.Uint32())
			}
			uploaded(t, servers, key, c, m.B)
			before := bytes.Clone(m.B)
			uc := updateCap(t, ns, c)
			u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string) {
				t.Helper()
				got := make([]byte, len(m.B)+100)
				n, err := u.ReadAt(got, 0)
				if err != io.EOF || !bytes.Equal(got[:n], m.B) {
					t.Fatalf("%s: the session reads %d bytes (%v), the model has %d; equal=%v", what, n, err, len(m.B), bytes.Equal(got[:n], m.B))
				}
			}
			for i := 0; i < 30; i++ {
				p := make([]byte, 1+r.IntN(9000))
				for j := range p {
					p[j] = byte(r.Uint32())
				}
				off := int64(r.IntN(len(m.B) + 20000))
				if _, err := u.WriteAt(p, off); err != nil {
					t.Fatal(err)
				}
				m.WriteAt(p, off)
				if i == 10 {
					if err := u.Truncate(int64(len(m.B) / 3)); err != nil {
						t.Fatal(err)
					}
					m.Truncate(int64(len(m.B) / 3))
				}
				if i == 20 {
					if err := u.Truncate(int64(len(m.B) + 7000)); err != nil {
						t.Fatal(err)
					}
					m.Truncate(int64(len(m.B) + 7000))
				}
			}
			check("before sync")
			if got, err := readUpdated(t, servers[1], key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, before) {
				t.Fatalf("a reader before the commit: %v, equal to the committed content %v", err, bytes.Equal(got, before))
			}
			if err := u.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			check("after sync")
			if _, err := u.WriteAt([]byte("after the sync"), 5); err != nil {
				t.Fatal(err)
			}
			m.WriteAt([]byte("after the sync"), 5)
			check("after a write past the sync")
			if err := u.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			fv, _ := ns.FileVersion(context.Background(), c.Fid)
			if fv.DataVersion != 2 || fv.Size != int64(len(m.B)) || len(fv.Stale) != 0 {
				t.Fatalf("the namespace after the session: %+v, want version 2, %d bytes", fv, len(m.B))
			}
			for i, s := range servers {
				if got, err := readUpdated(t, s, key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, m.B) {
					t.Fatalf("a reader at server %d after the commit: %v, equal to the model %v", i, err, bytes.Equal(got, m.B))
				}
			}
		})
	}
}

// TestUpdateMissedByAStripe: a replica whose filesystem cannot take an
// update is reported stale with the commit, never read (a read of it at
// the file's version is refused), and the file reads right from the other.
func TestUpdateMissedByAStripe(t *testing.T) {
	servers, ns, key, stores := memServers(t, 2, 3)
	c := spread(61, "replica:2", 2, 2)
	old := bytes.Repeat([]byte("old "), 1000)
	uploaded(t, servers, key, c, old)
	// The second replica's filesystem loses its identity marker: offline.
	stores["/s1/fs0"].SetMarker(nil)
	servers[1].beat(context.Background())
	updateHead(t, servers[0], ns, key, c)
	fv, _ := ns.FileVersion(context.Background(), c.Fid)
	if fv.DataVersion != 1 || !slices.Equal(fv.Stale, []int{1}) {
		t.Fatalf("the namespace after an update one replica missed: %+v", fv)
	}
	want := append([]byte("NEW!"), old[4:]...)
	if got, err := readUpdated(t, servers[1], key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read: %v, new content %v", err, bytes.Equal(got, want))
	}
	// The marker is back: the stale replica is still never read, even by
	// a capability that does not list it stale.
	id := backend.Identity{FsID: 4, UUID: "u"}
	stores["/s1/fs0"].SetMarker(&id)
	servers[1].beat(context.Background())
	rc := readCap(t, ns, c)
	rc.Stale = nil
	_, err := servers[1].OpenStripe(key.Sign(rc), c.Fid, 1)
	if !kerr.Is(err, kerr.IO) {
		t.Fatalf("the stale replica was opened at the file's version: %v", err)
	}
}

// twoSessions uploads a file fid of 20 000 dots laid out as layout over
// n stripes and opens two update sessions of it at its first version,
// on two servers.
func twoSessions(t *testing.T, fid uint64, layout string, n int) (servers []*Server, ns *storagetest.Namespace, key *capability.Key, c *capability.Capability, m *backendtest.Model, a, b *Update) {
	t.Helper()
	servers, ns, key, _ = memServers(t, 2, 3)
	c = spread(fid, layout, n, 2)
	m = &backendtest.Model{B: bytes.Repeat([]byte("."), 20000)}
	uploaded(t, servers, key, c, m.B)
	uc := updateCap(t, ns, c)
	var err error
	if a, err = servers[0].NewUpdate(context.Background(), uc, key.Sign(uc)); err != nil {
		t.Fatal(err)
	}
	if b, err = servers[1].NewUpdate(context.Background(), uc, key.Sign(uc)); err != nil {
		t.Fatal(err)
	}
	return servers, ns, key, c, m, a, b
}

// TestConcurrentUpdates: two sessions of one file commit one after the
// other; the second, refused by the namespace at first (the file moved on),
// is prepared again over the first's version: both sessions' ranges are in
// the file, the later commit's bytes where they overlap.
func TestConcurrentUpdates(t *testing.T) {
	for _, lay := range []struct {
		layout string
		n      int
	}{{"replica:2", 2}, {"ec:2+1:4096", 3}} {
		t.Run(lay.layout, func(t *testing.T) {
			servers, ns, key, c, m, a, b := twoSessions(t, 62, lay.layout, lay.n)
			a.WriteAt(bytes.Repeat([]byte("A"), 10000), 0)
			b.WriteAt(bytes.Repeat([]byte("B"), 10000), 5000)
			a.WriteAt(bytes.Repeat([]byte("a"), 100), 25000) // extends the file
			if err := a.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			m.WriteAt(bytes.Repeat([]byte("A"), 10000), 0)
			m.WriteAt(bytes.Repeat([]byte("a"), 100), 25000)
			m.WriteAt(bytes.Repeat([]byte("B"), 10000), 5000)
			got, err := readUpdated(t, servers[0], key, readCap(t, ns, c))
			if err != nil || !bytes.Equal(got, m.B) {
				t.Fatalf("after both commits: %v, %d bytes, want %d, equal %v", err, len(got), len(m.B), bytes.Equal(got, m.B))
			}
			if fv, _ := ns.FileVersion(context.Background(), c.Fid); fv.DataVersion != 2 {
				t.Fatalf("data version after two sessions: %d", fv.DataVersion)
			}
		})
	}
}

// TestCommitsOverOneVersionKeepTheirJournals: session A's commit is
// recorded by the namespace and its journals are still to be applied
// when session B, begun at the same version, commits: B must not replace
// A's journal (A would roll B's operations forward, or find none, and
// A's acknowledged bytes would be lost). B waits, then goes on from A's
// version: both sessions' bytes are in the file, B's where they overlap.
func TestCommitsOverOneVersionKeepTheirJournals(t *testing.T) {
	for _, lay := range []struct {
		layout string
		n      int
	}{{"replica:2", 2}, {"plain", 1}, {"ec:2+1:4096", 3}} {
		t.Run(lay.layout, func(t *testing.T) {
			servers, ns, key, c, m, a, b := twoSessions(t, 64, lay.layout, lay.n)
			a.WriteAt(bytes.Repeat([]byte("A"), 10000), 0)
			b.WriteAt(bytes.Repeat([]byte("B"), 100), 5000)
			b.WriteAt(bytes.Repeat([]byte("b"), 100), 15000)

			// Between A's commit and its applies, B commits: the hook
			// waits until B is refused a journal (the fix) or B's commit
			// is over (without it: B replaced A's journals).
			refused := make(chan struct{}, 1)
			onConcurrentPrepare = func() {
				select {
				case refused <- struct{}{}:
				default:
				}
			}
			t.Cleanup(func() { onConcurrentPrepare = nil })
			bDone := make(chan error, 1)
			var once atomic.Bool
			ns.AfterUpdateCommit = func(message.FileVersion) {
				if !once.CompareAndSwap(false, true) {
					return
				}
				go func() { bDone <- b.Commit(context.Background()) }()
				select {
				case <-refused:
				case err := <-bDone:
					bDone <- err
				case <-time.After(time.Minute):
					t.Error("session B neither committed nor was refused a journal within 1m")
				}
			}
			if err := a.Commit(context.Background()); err != nil {
				t.Fatalf("A's commit: %v", err)
			}
			select {
			case err := <-bDone:
				if err != nil {
					t.Fatalf("B's commit: %v", err)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("B's commit did not return within 2m")
			}
			m.WriteAt(bytes.Repeat([]byte("A"), 10000), 0)
			m.WriteAt(bytes.Repeat([]byte("B"), 100), 5000)
			m.WriteAt(bytes.Repeat([]byte("b"), 100), 15000)
			fv, _ := ns.FileVersion(context.Background(), c.Fid)
			if fv.DataVersion != 2 || len(fv.Stale) != 0 {
				t.Errorf("after both commits: data version %d, stale stripes %v; want 2 and none", fv.DataVersion, fv.Stale)
			}
			got, err := readUpdated(t, servers[0], key, readCap(t, ns, c))
			if err != nil || !bytes.Equal(got, m.B) {
				t.Fatalf("after both commits: %v, %d bytes equal to what both sessions were told: %v (A's range %q...)", err, len(got), bytes.Equal(got, m.B), got[:min(len(got), 8)])
			}
		})
	}
}

// TestUpdateAnswerLost: the namespace committed an update but its answer
// was lost (it crashed): the session finds out from the file's version
// and rolls its journals forward instead of dropping them, so the file
// reads at its new version; an update the namespace refused leaves
// nothing of itself.
func TestUpdateAnswerLost(t *testing.T) {
	servers, ns, key, _ := memServers(t, 2, 3)
	c := spread(63, "replica:2", 2, 2)
	uploaded(t, servers, key, c, []byte("0123456789"))
	ns.LoseUpdateAnswers = 1
	uc := updateCap(t, ns, c)
	u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
	if err != nil {
		t.Fatal(err)
	}
	u.WriteAt([]byte("AB"), 3)
	if err := u.Commit(context.Background()); err != nil {
		t.Fatalf("a commit whose answer was lost: %v", err)
	}
	for i := range servers {
		if got, err := readUpdated(t, servers[i], key, readCap(t, ns, c)); err != nil || string(got) != "012AB56789" {
			t.Fatalf("server %d reads %q %v", i, got, err)
		}
	}
}

// TestMoveNeverRebuildsFromAStaleStripe: an erasure-coded stripe rebuilt
// for a move is decoded from current stripes only: one that missed an
// update (its frames verify, its bytes are the version before) is never
// a source, even under a capability that does not list it stale, so a
// move that would need it fails instead of writing a stripe of mixed
// versions.
func TestMoveNeverRebuildsFromAStaleStripe(t *testing.T) {
	servers, ns, key, stores := memServers(t, 2, 3)
	c := spread(66, "ec:2+1:4096", 3, 2) // stripes on fs 1 (s0), 4 (s1), 2 (s0)
	old := bytes.Repeat([]byte("old bytes "), 3000)
	uploaded(t, servers, key, c, old)
	stores["/s0/fs1"].SetMarker(nil) // stripe 2's filesystem misses the update
	servers[0].beat(context.Background())
	uc := updateCap(t, ns, c)
	u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
	if err != nil {
		t.Fatal(err)
	}
	u.WriteAt(bytes.Repeat([]byte("N"), 20000), 1000)
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fv, _ := ns.FileVersion(context.Background(), c.Fid); !slices.Equal(fv.Stale, []int{2}) {
		t.Fatalf("the namespace after an update stripe 2 missed: %+v", fv)
	}
	id := backend.Identity{FsID: 2, UUID: "u"}
	stores["/s0/fs1"].SetMarker(&id)
	servers[0].beat(context.Background())
	// Stripe 0's own copy is gone: a move must rebuild it from 1 and 2.
	if err := stores["/s0/fs0"].Remove(c.Fid); err != nil {
		t.Fatal(err)
	}
	rc := readCap(t, ns, c)
	rc.Stale = nil
	res, err := servers[0].MoveStripe(context.Background(), moveOrder(key, rc, 0, 3))
	if err == nil {
		t.Fatalf("stripe 0 was rebuilt with a stale stripe among its sources: %+v", res)
	}
	if _, err := stores["/s0/fs2"].ReadMeta(c.Fid); !kerr.Is(err, kerr.NotFound) {
		t.Fatalf("a failed move left a stripe: %v", err)
	}
}

// unreachableApply is directPeers whose ApplyStripe never reaches the
// peer (it crashed after the prepare, or is restarting).
type unreachableApply struct{ directPeers }

func (p unreachableApply) ApplyStripe(_ context.Context, addr string, _ uint64, _ int, _ string) error {
	return kerr.New(kerr.Unavailable, "apply", addr, "storage server unreachable")
}

// TestApplyToAnUnreachablePeer: a peer that cannot be reached after the
// commit point keeps its durable journal; its stripe is not marked stale,
// and the next open of it at the new version rolls the journal forward
// and reads the new content.
func TestApplyToAnUnreachablePeer(t *testing.T) {
	servers, ns, key, _ := memServers(t, 2, 3)
	servers[0].cfg.Peers = unreachableApply{servers[0].cfg.Peers.(directPeers)}
	c := spread(67, "replica:2", 2, 2)
	old := bytes.Repeat([]byte("old "), 1000)
	uploaded(t, servers, key, c, old)
	updateHead(t, servers[0], ns, key, c)
	if fv, _ := ns.FileVersion(context.Background(), c.Fid); fv.DataVersion != 1 || len(fv.Stale) != 0 {
		t.Fatalf("the namespace after an update whose apply did not reach a peer: %+v", fv)
	}
	want := append([]byte("NEW!"), old[4:]...)
	b, err := servers[1].OpenStripe(key.Sign(readCap(t, ns, c)), c.Fid, 1)
	if err != nil {
		t.Fatalf("the peer's stripe at the new version: %v", err)
	}
	defer b.Close()
	got := make([]byte, len(want))
	if _, err := b.ReadAt(got, 0); err != nil && err != io.EOF || !bytes.Equal(got, want) {
		t.Fatalf("the peer's stripe: %v, new content %v", err, bytes.Equal(got, want))
	}
}

// TestNoRollForwardPastTheDurableVersion: a capability may name a
// version the active namespace server applied but never committed to its
// shared engine (a failover lost the commit). A stripe holding that
// update's journal is not rolled forward to it on the capability's word:
// the namespace's durable answer decides. Rolled forward, the stripe was
// ahead of the file the next active server had — unreadable ("at data
// version 1, the file at 0").
func TestNoRollForwardPastTheDurableVersion(t *testing.T) {
	servers, ns, key, stores := memServers(t, 2, 3)
	c := spread(69, "replica:2", 2, 2)
	old := bytes.Repeat([]byte("old "), 1000)
	uploaded(t, servers, key, c, old)
	for i := range c.Targets {
		st := storeOf(stores, c, i)
		m, err := st.ReadMeta(c.Fid)
		if err != nil {
			t.Fatal(err)
		}
		m.Version, m.Checksums = 1, nil
		if err := st.Prepare(c.Fid, backend.JournalHead{From: 0, Meta: m, Tag: 7}, bytes.NewReader(backend.EncodeWrite(nil, 0, []byte("LOST")))); err != nil {
			t.Fatal(err)
		}
	}
	ahead := readCap(t, ns, c)
	ahead.DataVersion = 1 // what the lost commit would have made it
	if b, err := servers[1].OpenStripe(key.Sign(ahead), c.Fid, 1); err == nil {
		b.Close()
		t.Fatal("a stripe rolled forward to a version the namespace does not have")
	}
	got, err := readUpdated(t, servers[0], key, readCap(t, ns, c))
	if err != nil || !bytes.Equal(got, old) {
		t.Fatalf("the file at its durable version after the refused open: %v, old content %v", err, bytes.Equal(got, old))
	}
}

// TestUpdateAfterAnUnappliedCommit: the entry server crashed after the
// namespace recorded an update and before any stripe applied it (each
// holds its journal); the next session, at the new version, rolls those
// journals forward before it prepares its own over them, so neither the
// first update nor the stripes are lost (preparing over them left every
// stripe one version behind: all stale).
func TestUpdateAfterAnUnappliedCommit(t *testing.T) {
	servers, ns, key, stores := memServers(t, 2, 3)
	c := spread(68, "replica:2", 2, 2)
	old := bytes.Repeat([]byte("old "), 1000)
	uploaded(t, servers, key, c, old)
	var locs []uint32
	for i, tg := range c.Targets {
		st := storeOf(stores, c, i)
		m, err := st.ReadMeta(c.Fid)
		if err != nil {
			t.Fatal(err)
		}
		m.Version, m.Checksums = 1, nil
		if err := st.Prepare(c.Fid, backend.JournalHead{From: 0, Meta: m}, bytes.NewReader(backend.EncodeWrite(nil, 0, []byte("FIRST")))); err != nil {
			t.Fatal(err)
		}
		locs = append(locs, tg.FsID)
	}
	if _, err := ns.CommitUpdate(context.Background(), message.UpdateCommit{Fid: c.Fid, Base: 0, Tag: 1, Size: int64(len(old)), Locations: locs}); err != nil {
		t.Fatal(err)
	}
	uc := updateCap(t, ns, c)
	u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
	if err != nil {
		t.Fatal(err)
	}
	u.WriteAt([]byte("SECOND"), 100)
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fv, _ := ns.FileVersion(context.Background(), c.Fid); fv.DataVersion != 2 || len(fv.Stale) != 0 {
		t.Fatalf("the namespace after the second update: %+v", fv)
	}
	want := bytes.Clone(old)
	copy(want, "FIRST")
	copy(want[100:], "SECOND")
	for i, s := range servers {
		if got, err := readUpdated(t, s, key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("a reader at server %d: %v, both updates there %v", i, err, bytes.Equal(got, want))
		}
	}
}

// readerAtCommit is the namespace, where a reader opens every stripe of
// the file at its new version right after an update committed, before
// the update applied its journals (a mount told of the change reads at
// once).
type readerAtCommit struct {
	*storagetest.Namespace
	read func()
}

func (r readerAtCommit) CommitUpdate(ctx context.Context, m message.UpdateCommit) (message.FileVersion, error) {
	fv, err := r.Namespace.CommitUpdate(ctx, m)
	if err == nil {
		r.read()
	}
	return fv, err
}

// TestReadBetweenCommitAndApply: a read that opens the stripes after the
// namespace recorded an update and before its entry server applied it
// rolls their journals forward; the update's own apply then finds none
// and must take that for done, not mark the stripes stale (which left a
// plain file unreadable: a mount reading a file the moment it was told
// of its change did that).
func TestReadBetweenCommitAndApply(t *testing.T) {
	servers, ns, key, _ := memServers(t, 2, 3)
	c := spread(69, "replica:2", 2, 2)
	old := bytes.Repeat([]byte("old "), 1000)
	uploaded(t, servers, key, c, old)
	servers[0].cfg.Namespace = readerAtCommit{ns, func() {
		for i, s := range servers {
			b, err := s.OpenStripe(key.Sign(readCap(t, ns, c)), c.Fid, i)
			if err != nil {
				t.Errorf("a reader of stripe %d right after the commit: %v", i, err)
				continue
			}
			b.Close()
		}
	}}
	updateHead(t, servers[0], ns, key, c)
	if fv, _ := ns.FileVersion(context.Background(), c.Fid); fv.DataVersion != 1 || len(fv.Stale) != 0 {
		t.Fatalf("the namespace after an update read between its commit and its apply: %+v, want version 1, no stale stripe", fv)
	}
	want := append([]byte("NEW!"), old[4:]...)
	for i, s := range servers {
		if got, err := readUpdated(t, s, key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("a reader at server %d: %v, new content %v", i, err, bytes.Equal(got, want))
		}
	}
}

// TestRepairRollsJournalsForward: fsck finds a stripe behind the file's
// data version (stale) whose journal the namespace recorded (its entry
// server crashed between the commit and the apply). The repair rolls that
// journal forward rather than rebuild from copies (a plain file has none:
// rebuilding it failed and the update was lost to fsck), and drops a
// journal left behind that can never apply (it takes the stripe to a
// version it already has).
func TestRepairRollsJournalsForward(t *testing.T) {
	servers, ns, key, stores := memServers(t, 1, 3)
	c := spread(69, "plain", 1, 1)
	old := bytes.Repeat([]byte("old "), 1000)
	uploaded(t, servers, key, c, old)
	st := storeOf(stores, c, 0)
	prepare := func(from, to uint64, data string) {
		t.Helper()
		m, err := st.ReadMeta(c.Fid)
		if err != nil {
			t.Fatal(err)
		}
		m.Version, m.Checksums = to, nil
		if err := st.Prepare(c.Fid, backend.JournalHead{From: from, Meta: m}, bytes.NewReader(backend.EncodeWrite(nil, 0, []byte(data)))); err != nil {
			t.Fatal(err)
		}
	}
	prepare(0, 1, "FIRST")
	if _, err := ns.CommitUpdate(context.Background(), message.UpdateCommit{Fid: c.Fid, Base: 0, Tag: 1, Size: int64(len(old)), Locations: []uint32{c.Targets[0].FsID}}); err != nil {
		t.Fatal(err)
	}
	repair := func(what string) {
		t.Helper()
		rc := readCap(t, ns, c)
		if err := servers[0].Repair(context.Background(), message.RepairJob{Fid: c.Fid, Token: key.Sign(rc), Rebuild: []int{0}}); err != nil {
			t.Fatalf("fsck's repair of the stripe %s: %v", what, err)
		}
		want := bytes.Clone(old)
		copy(want, "FIRST")
		if got, err := readUpdated(t, servers[0], key, rc); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("the file after the repair %s: %v, the committed update there %v", what, err, bytes.Equal(got, want))
		}
		if h, err := st.Prepared(c.Fid); !kerr.Is(err, kerr.NotFound) {
			t.Fatalf("after the repair %s a journal is left beside the stripe: %+v, %v", what, h, err)
		}
	}
	repair("behind a committed journal")
	// A journal of version 1 prepared again (a session whose commit the
	// namespace refused, its entry server crashed before discarding it):
	// it can never apply over the stripe at version 1.
	prepare(0, 1, "LOSER")
	repair("beside an obsolete journal")
}

// TestAppendsWrittenInPlace: on posix filesystems, a session that only
// appends to a replicated file (one replica here, one on a peer) has its
// bytes written straight into both stripes past their end, with block
// sums in a sums file beside them (posix's extension path: no journal of
// the data); a session that writes inside and one that truncates take
// the journal path over such stripes; every commit reads back from both
// servers, and a reader before a commit sees the content before it.
func TestAppendsWrittenInPlace(t *testing.T) {
	base := t.TempDir()
	roots := map[string]string{}
	servers, ns, key := testServers(t, 2, 3, func(p string) backend.Store {
		roots[p] = filepath.Join(base, p)
		return posix.New(roots[p], posix.Options{IO: backend.IOBuffered, Sync: true})
	})
	c := spread(61, "replica:2", 2, 2)
	m := &backendtest.Model{B: bytes.Repeat([]byte("committed "), 10_000)}
	uploaded(t, servers, key, c, m.B)
	stripes := []string{ // fs 1 on s0, fs 4 on s1 (spread)
		posix.PhysPath(roots["/s0/fs0"], c.Fid), posix.PhysPath(roots["/s1/fs0"], c.Fid),
	}
	session := func(what string, fn func(u *Update)) {
		t.Helper()
		uc := updateCap(t, ns, c)
		u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
		if err != nil {
			t.Fatal(err)
		}
		before := bytes.Clone(m.B)
		fn(u)
		if got, err := readUpdated(t, servers[1], key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, before) {
			t.Fatalf("%s: a reader before the commit: %v, equal to the committed content %v", what, err, bytes.Equal(got, before))
		}
		if err := u.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		for i, s := range servers {
			if got, err := readUpdated(t, s, key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, m.B) {
				t.Fatalf("%s: a reader at server %d: %v, %d bytes, equal to the model %v", what, i, err, len(got), bytes.Equal(got, m.B))
			}
		}
	}
	write := func(u *Update, p []byte, off int64) {
		if _, err := u.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		m.WriteAt(p, off)
	}
	session("appends", func(u *Update) {
		for i := range 3 {
			write(u, bytes.Repeat([]byte{byte('a' + i)}, 200_000), int64(len(m.B)))
		}
		write(u, []byte("after a hole"), int64(len(m.B))+5000)
	})
	for _, p := range stripes {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p + ".sums"); err != nil || st.Size() != int64(len(m.B)) {
			t.Fatalf("after appends, %s is %d bytes (want its data alone, %d) and its sums file: %v", p, st.Size(), len(m.B), err)
		}
	}
	session("writes inside and past the end", func(u *Update) {
		write(u, []byte("inside"), 70_000)
		write(u, []byte("past the end"), int64(len(m.B)))
	})
	session("a truncation and an append", func(u *Update) {
		if err := u.Truncate(300_000); err != nil {
			t.Fatal(err)
		}
		m.Truncate(300_000)
		write(u, []byte("appended after the cut"), 300_000)
	})
	session("appends again", func(u *Update) { write(u, bytes.Repeat([]byte("z"), 100_000), int64(len(m.B))) })
	if fv, _ := ns.FileVersion(context.Background(), c.Fid); fv.DataVersion != 4 || len(fv.Stale) != 0 {
		t.Fatalf("the namespace after four sessions: %+v", fv)
	}
}

// TestCrashBetweenReplyAndApply: a commit is acknowledged once the
// namespace recorded it, its journals durable on every stripe; the
// applies follow the reply. The entry server crashes right after its
// reply, before any apply (beforeApply), for each kind of update of a
// replica:2 file over posix stores on two servers — writes inside
// (journal), appends (data written past the end, committed by length),
// a truncation with a write past the cut. A reader at the crashed
// server before the crash, and readers at both servers started again
// over the same stores after it, read exactly what was acknowledged (a
// model of the acknowledged writes); the stripes on disk are at the old
// version with the journal beside them, so the crash did fall between
// the reply and the apply; after the reads they are at the new one.
func TestCrashBetweenReplyAndApply(t *testing.T) {
	base := t.TempDir()
	roots := map[string]string{}
	mk := func(p string) backend.Store {
		roots[p] = filepath.Join(base, p)
		return posix.New(roots[p], posix.Options{IO: backend.IOBuffered, Sync: true})
	}
	servers, ns, key := testServers(t, 2, 3, mk)
	c := spread(62, "replica:2", 2, 2)
	rnd := rand.NewChaCha8([32]byte{62})
	m := &backendtest.Model{B: make([]byte, 300_000)}
	rnd.Read(m.B)
	uploaded(t, servers, key, c, m.B)
	crash := func() bool { return false } // the entry server dies after its reply
	beforeApply.Store(&crash)
	t.Cleanup(func() { beforeApply.Store(nil) })
	stripes := []string{"/s0/fs0", "/s1/fs0"} // fs 1 on s0, fs 4 on s1 (spread)
	for i, tc := range []struct {
		what string
		fn   func(write func(p []byte, off int64), u *Update)
	}{
		{"writes inside", func(write func([]byte, int64), _ *Update) {
			for _, off := range []int64{0, 4096, 70_001, int64(len(m.B)) - 5} {
				p := make([]byte, 3000)
				rnd.Read(p)
				write(p, off)
			}
		}},
		{"appends", func(write func([]byte, int64), _ *Update) {
			for range 3 {
				p := make([]byte, 100_000)
				rnd.Read(p)
				write(p, int64(len(m.B)))
			}
		}},
		{"a truncation and a write past the cut", func(write func([]byte, int64), u *Update) {
			if err := u.Truncate(123_456); err != nil {
				t.Fatal(err)
			}
			m.Truncate(123_456)
			write([]byte("past the cut"), 130_000)
		}},
	} {
		uc := updateCap(t, ns, c)
		u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
		if err != nil {
			t.Fatal(err)
		}
		tc.fn(func(p []byte, off int64) {
			if _, err := u.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
			m.WriteAt(p, off)
		}, u)
		if err := u.Commit(context.Background()); err != nil {
			t.Fatalf("%s: commit: %v", tc.what, err)
		}
		servers[0].applying.Wait() // the apply that would have followed, withheld
		for _, p := range stripes {
			st := posix.New(roots[p], posix.Options{IO: backend.IOBuffered})
			meta, err := st.ReadMeta(c.Fid)
			if err != nil {
				t.Fatal(err)
			}
			h, herr := st.Prepared(c.Fid)
			if meta.Version != uint64(i) || herr != nil || h.Meta.Version != uint64(i+1) {
				t.Fatalf("%s: stripe on %s after the reply: version %d, journal %v (to %d); want version %d and the journal to %d",
					tc.what, p, meta.Version, herr, h.Meta.Version, i, i+1)
			}
		}
		if i == 0 { // before the crash, at the server that replied
			if got, err := readUpdated(t, servers[0], key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, m.B) {
				t.Fatalf("%s: a reader at the entry server right after the reply: %v, %d bytes, acknowledged content %v", tc.what, err, len(got), bytes.Equal(got, m.B))
			}
		}
		servers = startServers(t, ns, key, 2, 3, mk) // both servers start again over their stores
		for k := range servers {
			j := 1 - k // the other server first: no roll-forward by the entry server's own reads
			if got, err := readUpdated(t, servers[j], key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, m.B) {
				t.Fatalf("%s: a reader at server %d after the crash: %v, %d bytes (want %d), acknowledged content %v",
					tc.what, j, err, len(got), len(m.B), bytes.Equal(got, m.B))
			}
		}
		if fv, _ := ns.FileVersion(context.Background(), c.Fid); fv.DataVersion != uint64(i+1) || len(fv.Stale) != 0 {
			t.Fatalf("%s: the namespace after the crash and the reads: %+v", tc.what, fv)
		}
		for _, p := range stripes {
			st := posix.New(roots[p], posix.Options{IO: backend.IOBuffered})
			if meta, err := st.ReadMeta(c.Fid); err != nil || meta.Version != uint64(i+1) {
				t.Fatalf("%s: stripe on %s after the reads: version %d, %v; want %d", tc.what, p, meta.Version, err, i+1)
			}
		}
	}
}

// refusedAfter is the namespace, where a commit over version base runs
// before() and is then refused (past a quota).
type refusedAfter struct {
	*storagetest.Namespace
	base   uint64
	before func()
}

func (r refusedAfter) CommitUpdate(ctx context.Context, m message.UpdateCommit) (message.FileVersion, error) {
	if m.Base == r.base {
		r.before()
		return message.FileVersion{}, kerr.New(kerr.Quota, "commit", "", "quota exceeded")
	}
	return r.Namespace.CommitUpdate(ctx, m)
}

// TestLateApplyLeavesTheNextJournal: a commit's applies run after its
// reply; here they are held until the session's next commit prepared
// its journals and is being decided by the namespace (which refuses it).
// The late apply must apply its own journal only — the one there is the
// next commit's, not recorded — so the file stays at the first commit's
// version with its bytes, every stripe readable, the refused write
// nowhere (applying whatever journal it found took the stripes to the
// refused version: every one stale).
func TestLateApplyLeavesTheNextJournal(t *testing.T) {
	for _, lay := range []string{"plain", "replica:2"} {
		servers, ns, key, _ := memServers(t, 2, 3)
		n := 1
		if lay != "plain" {
			n = 2
		}
		c := spread(63, lay, n, 2)
		m := &backendtest.Model{B: bytes.Repeat([]byte("old "), 5000)}
		uploaded(t, servers, key, c, m.B)
		release, held := make(chan struct{}), make(chan struct{}, 1)
		var first atomic.Bool
		hold := func() bool {
			if first.CompareAndSwap(false, true) {
				held <- struct{}{}
				<-release
			}
			return true
		}
		beforeApply.Store(&hold)
		lateDone := make(chan struct{})
		servers[0].cfg.Namespace = refusedAfter{ns, 1, func() {
			close(release)
			go func() { servers[0].applying.Wait(); close(lateDone) }()
			select {
			case <-lateDone:
			case <-time.After(time.Minute):
				t.Errorf("%s: the first commit's apply did not end within a minute of its release", lay)
			}
		}}
		uc := updateCap(t, ns, c)
		u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
		if err != nil {
			t.Fatal(err)
		}
		u.WriteAt([]byte("FIRST"), 10)
		m.WriteAt([]byte("FIRST"), 10)
		if err := u.Sync(context.Background()); err != nil {
			t.Fatalf("%s: first commit: %v", lay, err)
		}
		select {
		case <-held:
		case <-time.After(time.Minute):
			t.Fatalf("%s: the first commit's apply did not start within a minute", lay)
		}
		u.WriteAt([]byte("REFUSED"), 100)
		if err := u.Commit(context.Background()); !kerr.Is(err, kerr.Quota) {
			t.Fatalf("%s: second commit: %v, want refused (quota)", lay, err)
		}
		beforeApply.Store(nil)
		if fv, _ := ns.FileVersion(context.Background(), c.Fid); fv.DataVersion != 1 || len(fv.Stale) != 0 {
			t.Fatalf("%s: the namespace after a late apply and a refused commit: %+v, want version 1, nothing stale", lay, fv)
		}
		for i, s := range servers {
			if got, err := readUpdated(t, s, key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, m.B) {
				t.Fatalf("%s: a reader at server %d: %v, the first commit's content %v", lay, i, err, bytes.Equal(got, m.B))
			}
		}
	}
}

// TestApplyNowBeforeReply: a commit's journals are applied after its
// reply, except when a stripe's filesystem keeps no block sums — a mount
// on its host may hand the stripe's descriptor to the kernel (FUSE
// passthrough), which reads it without any storage server and so never
// rolls a journal forward: then the commit is acknowledged only after
// the applies, as they all were before. The apply is held (beforeApply)
// and the test watches whether the commit is acknowledged meanwhile, for
// a replica:2 file whose filesystems keep sums, and one whose stripe on
// the peer (told through its prepare's answer) keeps none.
func TestApplyNowBeforeReply(t *testing.T) {
	base := t.TempDir()
	servers, ns, key := testServers(t, 2, 3, func(p string) backend.Store {
		return posix.New(filepath.Join(base, p), posix.Options{IO: backend.IOBuffered})
	})
	t.Cleanup(func() { beforeApply.Store(nil) })
	for _, noSums := range []bool{false, true} {
		fid := uint64(65)
		if noSums {
			fid = 66
		}
		c := spread(fid, "replica:2", 2, 2)
		uploaded(t, servers, key, c, bytes.Repeat([]byte("old "), 100))
		servers[1].local(c.Targets[1].FsID).noSums.Store(noSums)
		entered, release := make(chan struct{}, 1), make(chan struct{})
		hold := func() bool {
			entered <- struct{}{}
			<-release
			return true
		}
		beforeApply.Store(&hold)
		uc := updateCap(t, ns, c)
		u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
		if err != nil {
			t.Fatal(err)
		}
		u.WriteAt([]byte("NEW"), 10)
		done := make(chan error, 1)
		go func() { done <- u.Commit(context.Background()) }()
		if !noSums {
			// Acknowledged while its apply is held: after the reply.
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("commit: %v", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("blocksums on: the commit was not acknowledged within a minute while its apply was held (applied before the reply)")
			}
			<-entered
			close(release)
			servers[0].applying.Wait()
			continue
		}
		select {
		case err := <-done:
			t.Fatalf("blocksums off on a stripe's filesystem: the commit was acknowledged (%v) before its apply ran", err)
		case <-entered:
		case <-time.After(time.Minute):
			t.Fatal("blocksums off: neither the apply nor the commit's reply came within a minute")
		}
		select {
		case err := <-done:
			t.Fatalf("blocksums off on a stripe's filesystem: the commit was acknowledged (%v) while its apply was held", err)
		default:
		}
		close(release)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("commit: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("blocksums off: the commit was not acknowledged within a minute of its apply's release")
		}
		st := posix.New(filepath.Join(base, "/s1/fs0"), posix.Options{IO: backend.IOBuffered})
		if m, err := st.ReadMeta(fid); err != nil || m.Version != 1 {
			t.Fatalf("blocksums off: the peer's stripe when the commit was acknowledged: %+v, %v; want data version 1", m, err)
		}
	}
}

// TestOldCapabilityAfterReply: a reader granted a capability before an
// update committed reads at a storage server after the commit's reply,
// its journal not applied yet (the entry server died right after the
// reply: beforeApply). The stripe is still at the reader's version, but
// serving it would answer the bytes the commit replaced after the commit
// returned (a mount's page cache would keep them): the server rolls the
// journal forward and refuses the old capability as stale; a capability
// granted now reads the update.
func TestOldCapabilityAfterReply(t *testing.T) {
	base := t.TempDir()
	servers, ns, key := testServers(t, 2, 3, func(p string) backend.Store {
		return posix.New(filepath.Join(base, p), posix.Options{IO: backend.IOBuffered})
	})
	c := spread(67, "replica:2", 2, 2)
	m := &backendtest.Model{B: bytes.Repeat([]byte("old "), 1000)}
	uploaded(t, servers, key, c, m.B)
	old := readCap(t, ns, c)
	if got, err := readUpdated(t, servers[1], key, old); err != nil || !bytes.Equal(got, m.B) {
		t.Fatalf("a read before the update: %v, content %v", err, bytes.Equal(got, m.B))
	}
	crash := func() bool { return false }
	beforeApply.Store(&crash)
	t.Cleanup(func() { beforeApply.Store(nil) })
	uc := updateCap(t, ns, c)
	u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
	if err != nil {
		t.Fatal(err)
	}
	u.WriteAt([]byte("NEW"), 100)
	m.WriteAt([]byte("NEW"), 100)
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	servers[0].applying.Wait()
	for i, s := range servers {
		if got, err := readUpdated(t, s, key, old); err == nil {
			t.Fatalf("server %d, after the commit's reply: a capability granted before it read %d bytes (the update's: %v); want it refused as stale", i, len(got), bytes.Equal(got, m.B))
		}
		if got, err := readUpdated(t, s, key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, m.B) {
			t.Fatalf("server %d: a capability granted after the commit: %v, the update's content %v", i, err, bytes.Equal(got, m.B))
		}
	}
}

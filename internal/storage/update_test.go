package storage

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/storage/storagetest"
)

// fileModel follows the acknowledged operations of an update.
type fileModel struct{ b []byte }

func (m *fileModel) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}

func (m *fileModel) Truncate(size int64) error {
	if size <= int64(len(m.b)) {
		m.b = m.b[:size]
	} else {
		m.b = append(m.b, make([]byte, size-int64(len(m.b)))...)
	}
	return nil
}

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
func readCap(t *testing.T, ns *storagetest.Namespace, c *capability.Capability) *capability.Capability {
	r := *updateCap(t, ns, c)
	r.Write, r.Update = false, false
	return &r
}

func readAll(t *testing.T, s *Server, key *capability.Key, c *capability.Capability) ([]byte, error) {
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
			m := &fileModel{b: make([]byte, 50000)}
			for i := range m.b {
				m.b[i] = byte(r.Uint32())
			}
			uploaded(t, servers, key, c, m.b)
			before := bytes.Clone(m.b)
			uc := updateCap(t, ns, c)
			u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string) {
				t.Helper()
				got := make([]byte, len(m.b)+100)
				n, err := u.ReadAt(got, 0)
				if err != io.EOF || !bytes.Equal(got[:n], m.b) {
					t.Fatalf("%s: the session reads %d bytes (%v), the model has %d; equal=%v", what, n, err, len(m.b), bytes.Equal(got[:n], m.b))
				}
			}
			for i := 0; i < 30; i++ {
				p := make([]byte, 1+r.IntN(9000))
				for j := range p {
					p[j] = byte(r.Uint32())
				}
				off := int64(r.IntN(len(m.b) + 20000))
				if _, err := u.WriteAt(p, off); err != nil {
					t.Fatal(err)
				}
				m.WriteAt(p, off)
				if i == 10 {
					if err := u.Truncate(int64(len(m.b) / 3)); err != nil {
						t.Fatal(err)
					}
					m.Truncate(int64(len(m.b) / 3))
				}
				if i == 20 {
					if err := u.Truncate(int64(len(m.b) + 7000)); err != nil {
						t.Fatal(err)
					}
					m.Truncate(int64(len(m.b) + 7000))
				}
			}
			check("before sync")
			if got, err := readAll(t, servers[1], key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, before) {
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
			if fv.DataVersion != 2 || fv.Size != int64(len(m.b)) || len(fv.Stale) != 0 {
				t.Fatalf("the namespace after the session: %+v, want version 2, %d bytes", fv, len(m.b))
			}
			for i, s := range servers {
				if got, err := readAll(t, s, key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, m.b) {
					t.Fatalf("a reader at server %d after the commit: %v, equal to the model %v", i, err, bytes.Equal(got, m.b))
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
	uc := updateCap(t, ns, c)
	u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
	if err != nil {
		t.Fatal(err)
	}
	u.WriteAt([]byte("NEW!"), 0)
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	fv, _ := ns.FileVersion(context.Background(), c.Fid)
	if fv.DataVersion != 1 || !slices.Equal(fv.Stale, []int{1}) {
		t.Fatalf("the namespace after an update one replica missed: %+v", fv)
	}
	want := append([]byte("NEW!"), old[4:]...)
	if got, err := readAll(t, servers[1], key, readCap(t, ns, c)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read: %v, new content %v", err, bytes.Equal(got, want))
	}
	// The marker is back: the stale replica is still never read, even by
	// a capability that does not list it stale.
	id := backend.Identity{FsID: 4, UUID: "u"}
	stores["/s1/fs0"].SetMarker(&id)
	servers[1].beat(context.Background())
	rc := readCap(t, ns, c)
	rc.Stale = nil
	_, err = servers[1].OpenStripe(key.Sign(rc), c.Fid, 1)
	if !kerr.Is(err, kerr.IO) {
		t.Fatalf("the stale replica was opened at the file's version: %v", err)
	}
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
			servers, ns, key, _ := memServers(t, 2, 3)
			c := spread(62, lay.layout, lay.n, 2)
			m := &fileModel{b: bytes.Repeat([]byte("."), 20000)}
			uploaded(t, servers, key, c, m.b)
			uc := updateCap(t, ns, c)
			a, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
			if err != nil {
				t.Fatal(err)
			}
			b, err := servers[1].NewUpdate(context.Background(), uc, key.Sign(uc))
			if err != nil {
				t.Fatal(err)
			}
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
			got, err := readAll(t, servers[0], key, readCap(t, ns, c))
			if err != nil || !bytes.Equal(got, m.b) {
				t.Fatalf("after both commits: %v, %d bytes, want %d, equal %v", err, len(got), len(m.b), bytes.Equal(got, m.b))
			}
			if fv, _ := ns.FileVersion(context.Background(), c.Fid); fv.DataVersion != 2 {
				t.Fatalf("data version after two sessions: %d", fv.DataVersion)
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
		if got, err := readAll(t, servers[i], key, readCap(t, ns, c)); err != nil || string(got) != "012AB56789" {
			t.Fatalf("server %d reads %q %v", i, got, err)
		}
	}
}

package storage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
)

// leftoverNS is a namespace that knows some fids and records what it was
// asked about unfinished stripes.
type leftoverNS struct {
	*fakeNS
	known map[uint64]bool
	mu    sync.Mutex
	asked []uint64
}

func (n *leftoverNS) Unfinished(_ context.Context, u message.Unfinished) (message.UnfinishedReply, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.asked = append(n.asked, u.Fids...)
	var r message.UnfinishedReply
	for _, fid := range u.Fids {
		if !n.known[fid] {
			r.Unknown = append(r.Unknown, fid)
		}
	}
	return r, nil
}

// A restarted storage server removes at once the stripes its previous run
// left without metadata that the namespace does not know, and only those:
// one the namespace knows (a pending upload, a committed file whose
// metadata is damaged) and a finished stripe stay.
func TestRestartDropsUnknownUnfinishedStripes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fs")
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	ns := &leftoverNS{fakeNS: &fakeNS{}, known: map[uint64]bool{11: true, 12: true}}
	start := func() *Server {
		s, err := New(Config{Node: "n", Addr: "http://unused", Key: key, Namespace: ns, Paths: []string{dir},
			Store: func(p string) (backend.Store, error) {
				return posix.New(p, posix.Options{IO: backend.IOBuffered, Sync: true}), nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	beat := func(s *Server) {
		t.Helper()
		if _, _, err := s.beat(context.Background()); err != nil {
			t.Fatal(err)
		}
		s.checkLeftovers(context.Background())
	}
	// The previous run: the filesystem initialized, then stripes being
	// written when it stopped (10 unknown, 11 a pending upload, 12 a
	// committed file), one finished (13) and the latency probe's (0).
	prev := start()
	beat(prev)
	beat(prev)
	f := prev.local(1)
	// The first run's own look must end before the stripes exist, or it
	// could find one being created and remove it.
	deadline := time.Now().Add(10 * time.Second)
	for f.leftovers.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the previous run's look at unfinished stripes did not end within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, fid := range []uint64{10, 11, 12, 13, 0} {
		w, err := f.store.Create(fid, backend.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("partial"))
		if fid == 13 {
			if err := w.Finish(backend.Meta{Fid: 13, Layout: "plain", Size: 7}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ns.asked = nil

	next := start()
	beat(next)
	beat(next)
	g := next.local(1)
	deadline = time.Now().Add(10 * time.Second)
	for g == nil || g.leftovers.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the restarted server did not look at unfinished stripes within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
		beat(next)
		g = next.local(1)
	}
	ns.mu.Lock()
	asked := slices.Sorted(slices.Values(ns.asked))
	ns.mu.Unlock()
	if !slices.Equal(asked, []uint64{10, 11, 12}) {
		t.Fatalf("asked about %v, want the unfinished stripes 10, 11, 12", asked)
	}
	for fid, want := range map[uint64]bool{10: false, 11: true, 12: true, 13: true, 0: true} {
		_, err := os.Stat(posix.PhysPath(dir, fid))
		if exists := !errors.Is(err, os.ErrNotExist); exists != want {
			t.Errorf("stripe %d: on disk %v, want %v", fid, exists, want)
		}
	}
}

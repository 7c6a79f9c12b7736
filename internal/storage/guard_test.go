package storage

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/memstore"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// stallStore is a memstore whose calls block while it is frozen, as a
// ceph-fuse mount of a frozen cluster does, and whose writes fail with
// ENOSPC while it is full.
type stallStore struct {
	*memstore.Store
	mu     sync.Mutex
	frozen chan struct{} // closed when thawed; nil when not frozen
	full   bool
	hung   int // calls that blocked on a frozen store
}

func (s *stallStore) freeze() { s.mu.Lock(); s.frozen = make(chan struct{}); s.mu.Unlock() }
func (s *stallStore) thaw() {
	s.mu.Lock()
	close(s.frozen)
	s.frozen = nil
	s.mu.Unlock()
}

func (s *stallStore) wait() {
	s.mu.Lock()
	ch := s.frozen
	if ch != nil {
		s.hung++
	}
	s.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (s *stallStore) isFull() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.full }

func (s *stallStore) Usage() (backend.Usage, error) { s.wait(); return s.Store.Usage() }
func (s *stallStore) CheckIdentity(want backend.Identity) string {
	s.wait()
	return s.Store.CheckIdentity(want)
}
func (s *stallStore) Create(fid uint64, o backend.CreateOptions) (backend.Writer, error) {
	s.wait()
	w, err := s.Store.Create(fid, o)
	if err != nil {
		return nil, err
	}
	return &stallWriter{Writer: w, s: s}, nil
}
func (s *stallStore) Open(fid uint64) (backend.Reader, error) { s.wait(); return s.Store.Open(fid) }

type stallWriter struct {
	backend.Writer
	s *stallStore
}

func (w *stallWriter) Write(p []byte) (int, error) {
	w.s.wait()
	if w.s.isFull() {
		return 0, kerr.Wrap(kerr.KindOf(syscall.ENOSPC), "write", "stall", syscall.ENOSPC)
	}
	return w.Writer.Write(p)
}

// report returns the last heartbeat report of fs 1.
func lastReport(t *testing.T, ns *fakeNS) message.FsReport {
	t.Helper()
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.reports[len(ns.reports)-1]
}

// within fails the test if fn does not return within d.
func within(t *testing.T, d time.Duration, step string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: no result within %v", step, d)
	}
}

// TestHungFilesystem: a filesystem whose calls stop returning fails the
// upload on it with Unavailable after the I/O deadline (never a hang),
// fails further calls at once, is reported offline without delaying the
// heartbeat, and is back once its calls return.
func TestHungFilesystem(t *testing.T) {
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	ns := &fakeNS{}
	st := &stallStore{Store: memstore.New("stall")}
	const timeout = 300 * time.Millisecond
	s, err := New(Config{Node: "n", Addr: "http://unused", Key: key, Namespace: ns, Paths: []string{"/stall"},
		IOTimeout: timeout, Store: func(string) (backend.Store, error) { return st, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if _, _, err := s.beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r := lastReport(t, ns); r.Offline != "" || r.Health != "ok" || r.Kind != "memory" || r.Backend != "mem:stall" {
		t.Fatalf("healthy filesystem reported %+v", r)
	}
	c := writeCap(1, "plain", 1)
	u, err := s.NewUpload(ctx, c, key.Sign(c), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st.freeze()
	defer func() {
		if st.frozen != nil {
			st.thaw()
		}
	}()
	var werr error
	within(t, 10*timeout, "write to a hung filesystem", func() { _, werr = u.Write(bytes.Repeat([]byte("x"), 1<<20)) })
	if !kerr.Is(werr, kerr.Unavailable) || !strings.Contains(werr.Error(), "/f") {
		t.Fatalf("write to a hung filesystem: %v, want unavailable naming the file", werr)
	}
	u.Abort(ctx)
	// The next upload fails at once: the filesystem is known to hang.
	c2 := writeCap(2, "plain", 1)
	st.mu.Lock()
	hung := st.hung
	st.mu.Unlock()
	if _, err := s.NewUpload(ctx, c2, key.Sign(c2), time.Second); !kerr.Is(err, kerr.Unavailable) {
		t.Fatalf("upload to a filesystem known to hang: %v", err)
	}
	st.mu.Lock()
	again := st.hung - hung
	st.mu.Unlock()
	if again != 0 {
		t.Errorf("upload to a filesystem known to hang made %d more calls that hung (want it refused without calling)", again)
	}
	within(t, 5*time.Second, "heartbeat with a hung filesystem", func() {
		if _, _, err := s.beat(ctx); err != nil {
			t.Error(err)
		}
	})
	if r := lastReport(t, ns); !strings.Contains(r.Offline, "I/O hangs") {
		t.Fatalf("hung filesystem reported %+v, want offline: I/O hangs", r)
	}
	st.thaw()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, _, err := s.beat(ctx); err != nil {
			t.Fatal(err)
		}
		if s.local(1).offlineReason() == "" && lastReport(t, ns).Offline == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("filesystem not back online 10s after its calls returned: %q / %+v", s.local(1).offlineReason(), lastReport(t, ns))
		}
		time.Sleep(50 * time.Millisecond)
	}
	c3 := writeCap(3, "plain", 1)
	u, err = s.NewUpload(ctx, c3, key.Sign(c3), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	u.Write([]byte("after"))
	if err := u.Commit(ctx); err != nil {
		t.Fatalf("upload after the filesystem came back: %v", err)
	}
}

// TestFullFilesystem: a write refused for space is a NoSpace error (HTTP
// 507, kXR_NoSpace), not an I/O error, and the filesystem is reported
// full until a write goes through.
func TestFullFilesystem(t *testing.T) {
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	ns := &fakeNS{}
	st := &stallStore{Store: memstore.New("full")}
	s, err := New(Config{Node: "n", Addr: "http://unused", Key: key, Namespace: ns, Paths: []string{"/full"},
		Store: func(string) (backend.Store, error) { return st, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		s.beat(ctx)
	}
	st.mu.Lock()
	st.full = true
	st.mu.Unlock()
	c := writeCap(1, "replica:1", 1)
	u, err := s.NewUpload(ctx, c, key.Sign(c), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Write([]byte("data")); !kerr.Is(err, kerr.NoSpace) || kerr.HTTPStatus(kerr.KindOf(err)) != 507 {
		t.Fatalf("write to a full filesystem: %v (kind %v), want no space", err, kerr.KindOf(err))
	}
	u.Abort(ctx)
	s.beat(ctx)
	if r := lastReport(t, ns); !strings.HasPrefix(r.Health, "full: ") {
		t.Fatalf("full filesystem reported health %q", r.Health)
	}
	st.mu.Lock()
	st.full = false
	st.mu.Unlock()
	c2 := writeCap(2, "plain", 1)
	u, _ = s.NewUpload(ctx, c2, key.Sign(c2), time.Second)
	u.Write([]byte("fits"))
	if err := u.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s.beat(ctx)
	if r := lastReport(t, ns); r.Health != "ok" {
		t.Fatalf("filesystem that took a write again reported health %q", r.Health)
	}
}

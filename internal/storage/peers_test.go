package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/memstore"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/storage/storagetest"
)

// directPeers reaches other servers of the test in process, the way
// cluster.StorageClient does over HTTP.
type directPeers map[string]*Server

func (p directPeers) CreateStripe(_ context.Context, addr string, fid uint64, idx int, token string) (backend.Writer, error) {
	pr, pw := io.Pipe()
	w := &pipeStripe{pw: pw, meta: make(chan backend.Meta, 1), done: make(chan error, 1)}
	go func() {
		err := p[addr].ReceiveStripe(token, fid, idx, pr, func() (backend.Meta, error) {
			m, ok := <-w.meta
			if !ok {
				return m, errors.New("no metadata")
			}
			return m, nil
		})
		pr.CloseWithError(err)
		w.done <- err
	}()
	return w, nil
}

type pipeStripe struct {
	pw   *io.PipeWriter
	meta chan backend.Meta
	done chan error
	end  bool
}

func (w *pipeStripe) Write(b []byte) (int, error) { return w.pw.Write(b) }
func (w *pipeStripe) Finish(m backend.Meta) error {
	w.end = true
	w.meta <- m
	w.pw.Close()
	return <-w.done
}
func (w *pipeStripe) Abort() {
	if !w.end {
		w.end = true
		close(w.meta)
		w.pw.CloseWithError(errors.New("aborted"))
		<-w.done
	}
}

func (p directPeers) StripeReader(_ context.Context, addr string, fid uint64, idx int, token string) io.ReaderAt {
	return readerAtFunc(func(b []byte, off int64) (int, error) {
		r, err := p[addr].OpenStripe(token, fid, idx)
		if kerr.Is(err, kerr.NotFound) {
			return 0, fs.ErrNotExist
		}
		if err != nil {
			return 0, err
		}
		defer r.Close()
		return r.ReadAt(b, off)
	})
}

type readerAtFunc func([]byte, int64) (int, error)

func (f readerAtFunc) ReadAt(b []byte, off int64) (int, error) { return f(b, off) }

func (p directPeers) StreamStripe(_ context.Context, addr string, fid uint64, idx int, token string, off int64) (io.ReadCloser, error) {
	r, err := p[addr].OpenStripe(token, fid, idx)
	if kerr.Is(err, kerr.NotFound) {
		return nil, fs.ErrNotExist
	}
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(r, off, max(r.Size()-off, 0)), r}, nil
}

func (p directPeers) ProbeStripe(_ context.Context, addr string, fid uint64, idx int, token string) error {
	r, err := p[addr].OpenStripe(token, fid, idx)
	if err != nil {
		return err
	}
	return r.Close()
}

func (p directPeers) PrepareStripe(_ context.Context, addr string, fid uint64, idx int, token string, h backend.JournalHead, ops io.Reader) (bool, error) {
	return p[addr].PrepareStripe(token, fid, idx, h, ops)
}

func (p directPeers) ApplyStripe(_ context.Context, addr string, fid uint64, idx int, token string) error {
	return p[addr].ApplyStripe(token, fid, idx)
}

func (p directPeers) DiscardStripe(_ context.Context, addr string, fid uint64, idx int, token string) error {
	return p[addr].DiscardStripe(token, fid, idx)
}

func (p directPeers) Repair(ctx context.Context, addr string, job message.RepairJob) error {
	return p[addr].Repair(ctx, job)
}

// memServers starts n storage servers with nfs in-memory filesystems each,
// reaching each other through directPeers.
func memServers(t *testing.T, n, nfs int) ([]*Server, *storagetest.Namespace, *capability.Key, map[string]*memstore.Store) {
	t.Helper()
	stores := map[string]*memstore.Store{}
	servers, ns, key := testServers(t, n, nfs, func(p string) backend.Store {
		stores[p] = memstore.New(p)
		return stores[p]
	})
	return servers, ns, key, stores
}

// testServers is memServers with the stores mk makes of the paths
// /s<server>/fs<index>.
func testServers(t *testing.T, n, nfs int, mk func(p string) backend.Store) ([]*Server, *storagetest.Namespace, *capability.Key) {
	t.Helper()
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	ns := &storagetest.Namespace{}
	return startServers(t, ns, key, n, nfs, mk), ns, key
}

// startServers starts n storage servers of nfs filesystems each (the
// stores mk makes of the paths /s<server>/fs<index>) registered with ns:
// testServers' servers, or those same servers started again over their
// stores (a restart).
func startServers(t *testing.T, ns *storagetest.Namespace, key *capability.Key, n, nfs int, mk func(p string) backend.Store) []*Server {
	t.Helper()
	peers := directPeers{}
	var mu sync.Mutex
	var servers []*Server
	for i := 0; i < n; i++ {
		addr := fmt.Sprintf("http://s%d", i)
		var paths []string
		for j := 0; j < nfs; j++ {
			paths = append(paths, fmt.Sprintf("/s%d/fs%d", i, j))
		}
		s, err := New(Config{Node: addr, Addr: addr, Key: key, Namespace: ns, Paths: paths, Peers: peers,
			Store: func(p string) (backend.Store, error) {
				mu.Lock()
				defer mu.Unlock()
				return mk(p), nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 2; k++ {
			if _, _, err := s.beat(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		peers[addr] = s
		servers = append(servers, s)
	}
	return servers
}

// spread is a capability whose targets alternate between the servers of
// memServers(t, servers, 3).
func spread(fid uint64, lay string, n int, servers int) *capability.Capability {
	c := writeCap(fid, lay, 0)
	for i := 0; i < n; i++ {
		s := i % servers
		c.Targets = append(c.Targets, capability.Target{FsID: uint32(s*3 + i/servers + 1), Addr: fmt.Sprintf("http://s%d", s)})
	}
	return c
}

// TestRemoteStripes: uploads and reads whose stripes are partly on
// another storage server go through Peers, for every layout; the core
// never touches a disk of its own for them (memstore only).
func TestRemoteStripes(t *testing.T) {
	for _, tc := range []struct {
		layout string
		n      int
	}{{"plain", 1}, {"replica:2", 2}, {"ec:4+2:65536", 6}} {
		servers, ns, key, stores := memServers(t, 2, 3)
		c := spread(50, tc.layout, tc.n, 2)
		if tc.layout == "plain" {
			c.Targets[0] = capability.Target{FsID: 4, Addr: "http://s1"} // only on the other server
		}
		u, err := servers[0].NewUpload(context.Background(), c, key.Sign(c), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 1<<20+17)
		rand.Read(data)
		if _, err := u.ReadFrom(bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if err := u.Commit(context.Background()); err != nil {
			t.Fatalf("%s: commit: %v", tc.layout, err)
		}
		commit, _ := ns.Committed(50)
		for i, tg := range c.Targets {
			path := fmt.Sprintf("/s%d/fs%d", (tg.FsID-1)/3, (tg.FsID-1)%3)
			m, err := stores[path].ReadMeta(50)
			if err != nil || m.Stripe != i || m.Size != int64(len(data)) || m.Path != "/f" || m.Checksums["md5"] != commit.Checksums["md5"] {
				t.Fatalf("%s: stripe %d on %s: %+v %v", tc.layout, i, path, m, err)
			}
		}
		rc := *c
		rc.Write, rc.Size, rc.Sums = false, int64(len(data)), commit.Checksums
		for entry, s := range servers {
			f, err := s.Open(context.Background(), &rc, key.Sign(&rc), time.Second)
			if err != nil {
				t.Fatalf("%s: open on server %d: %v", tc.layout, entry, err)
			}
			var got bytes.Buffer
			if _, err := Copy(&got, f); err != nil || !bytes.Equal(got.Bytes(), data) {
				t.Fatalf("%s: read through server %d: %v, equal %v", tc.layout, entry, err, bytes.Equal(got.Bytes(), data))
			}
			f.Close()
		}
		// ReadFile (for the namespace server) streams the same bytes.
		var got bytes.Buffer
		err = servers[1].ReadFile(context.Background(), key.Sign(&rc), func(size int64) io.Writer {
			if size != int64(len(data)) {
				t.Errorf("ReadFile size %d", size)
			}
			return &got
		})
		if err != nil || !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("%s: ReadFile: %v", tc.layout, err)
		}
	}
}

// TestECRemoteProbe: with fewer than K stripes on the entry server, the
// remote ones are probed before the file is promised, and a file with
// fewer than K stripes anywhere fails at open with the reasons.
func TestECRemoteProbe(t *testing.T) {
	servers, ns, key, stores := memServers(t, 2, 3)
	c := spread(60, "ec:2+1:65536", 3, 2) // stripes 0 and 2 on s0, 1 on s1
	u, _ := servers[0].NewUpload(context.Background(), c, key.Sign(c), time.Second)
	u.Write([]byte(strings.Repeat("probe", 30000)))
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc := *c
	commit, _ := ns.Committed(60)
	rc.Write, rc.Size, rc.Sums = false, 150000, commit.Checksums
	// s1 holds only stripe 1 of 3: it needs s0's.
	f, err := servers[1].Open(context.Background(), &rc, key.Sign(&rc), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, p := range []string{"/s0/fs0", "/s0/fs1"} {
		if err := stores[p].Remove(60); err != nil {
			t.Fatal(err)
		}
	}
	_, err = servers[1].Open(context.Background(), &rc, key.Sign(&rc), time.Second)
	if !kerr.Is(err, kerr.Unavailable) || !strings.Contains(err.Error(), "unrecoverable: 1 of 3") {
		t.Fatalf("open with 1 of 3 stripes: %v", err)
	}
}

// TestReceiveStripeRefusals: a stripe sent by a peer needs a write
// capability for that file and a matching stripe index, and leaves nothing
// when refused or cut short.
func TestReceiveStripeRefusals(t *testing.T) {
	servers, _, key, stores := memServers(t, 1, 2)
	s := servers[0]
	c := writeCap(70, "replica:2", 2)
	tok := key.Sign(c)
	meta := func(idx int) func() (backend.Meta, error) {
		return func() (backend.Meta, error) { return backend.Meta{Stripe: idx, Layout: "replica:2", Size: 3}, nil }
	}
	rc := *c
	rc.Write = false
	for name, err := range map[string]error{
		"read capability": s.ReceiveStripe(key.Sign(&rc), 70, 0, strings.NewReader("abc"), meta(0)),
		"other fid":       s.ReceiveStripe(tok, 71, 0, strings.NewReader("abc"), meta(0)),
		"index mismatch":  s.ReceiveStripe(tok, 70, 1, strings.NewReader("abc"), meta(0)),
		"index range":     s.ReceiveStripe(tok, 70, 2, strings.NewReader("abc"), meta(2)),
		"cut short":       s.ReceiveStripe(tok, 70, 0, io.MultiReader(strings.NewReader("ab"), iotestErr{}), meta(0)),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for p, st := range stores {
		if u, _ := st.Usage(); u.Files != 0 {
			t.Fatalf("%s holds %d stripes after refused transfers", p, u.Files)
		}
	}
	if err := s.ReceiveStripe(tok, 70, 1, strings.NewReader("abc"), meta(1)); err != nil {
		t.Fatal(err)
	}
	if m, err := stores["/s0/fs1"].ReadMeta(70); err != nil || m.Fid != 70 || m.Path != "/f" || m.Stripe != 1 {
		t.Fatalf("received stripe: %+v %v", m, err)
	}
	// A stripe is written once.
	if err := s.ReceiveStripe(tok, 70, 1, strings.NewReader("xyz"), meta(1)); !kerr.Is(err, kerr.Exists) {
		t.Fatalf("second transfer of a stripe: %v", err)
	}
	// Reading it back needs a read capability.
	if _, err := s.OpenStripe(tok, 70, 1); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("stripe read with a write capability: %v", err)
	}
	r, err := s.OpenStripe(key.Sign(&rc), 70, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	r.ReadAt(b, 0)
	r.Close()
	if string(b) != "abc" {
		t.Fatalf("stripe reads %q", b)
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

// TestNoPeers: a server without peer access says so when a stripe is on
// another server, and leaves nothing behind.
func TestNoPeers(t *testing.T) {
	servers, _, key, stores := memServers(t, 1, 1)
	s := servers[0]
	s.cfg.Peers = nil
	c := writeCap(80, "replica:2", 1)
	c.Targets = append(c.Targets, capability.Target{FsID: 9, Addr: "http://elsewhere"})
	if _, err := s.NewUpload(context.Background(), c, key.Sign(c), time.Second); !kerr.Is(err, kerr.Unavailable) || !strings.Contains(err.Error(), "no peer access") {
		t.Fatalf("upload with a remote stripe and no peers: %v", err)
	}
	if u, _ := stores["/s0/fs0"].Usage(); u.Files != 0 {
		t.Fatal("local stripe left behind")
	}
}

package cluster_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/memstore"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/storage"
	"github.com/kaon-storage/kaon/internal/storage/storagetest"
)

var (
	_ storage.Peers         = (*cluster.StorageClient)(nil)
	_ cluster.StorageServer = (*storage.Server)(nil)
)

type node struct {
	s      *storage.Server
	addr   string
	stores []*memstore.Store
	// stripeReads counts the GET and HEAD requests for stripes it
	// served.
	stripeReads atomic.Int64
}

// cluster starts n storage servers with 3 in-memory filesystems each
// (fs 3i+1..3i+3 on server i), serving the internal storage endpoints
// over HTTP and reaching each other through cluster.StorageClient.
func startCluster(t *testing.T, n int) ([]*node, *storagetest.Namespace, *capability.Key) {
	t.Helper()
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	ns := &storagetest.Namespace{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var nodes []*node
	for i := 0; i < n; i++ {
		nd := &node{}
		var h http.Handler
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, cluster.StripePath) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
				nd.stripeReads.Add(1)
			}
			h.ServeHTTP(w, r)
		}))
		t.Cleanup(hs.Close)
		nd.addr = hs.URL
		s, err := storage.New(storage.Config{Node: hs.URL, Addr: hs.URL, Key: key, Namespace: ns,
			Paths: []string{fmt.Sprintf("/n%d/a", i), fmt.Sprintf("/n%d/b", i), fmt.Sprintf("/n%d/c", i)},
			Peers: cluster.NewStorageClient(key.Internal()),
			Store: func(p string) (backend.Store, error) {
				st := memstore.New(p)
				nd.stores = append(nd.stores, st)
				return st, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		h = cluster.StorageHandler(s, key.Internal(), log)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go s.Run(ctx)
		select {
		case <-s.Ready():
		case <-time.After(10 * time.Second):
			t.Fatal("storage server not registered within 10s")
		}
		nd.s = s
		nodes = append(nodes, nd)
	}
	return nodes, ns, key
}

// ecCap is an ec:4+2 capability with stripes 0-2 on node 0 and 3-5 on
// node 1.
func ecCap(nodes []*node, fid uint64) *capability.Capability {
	c := &capability.Capability{Fid: fid, Write: true, Path: "/ec/f", Layout: "ec:4+2:65536", Checksums: []string{"adler32"},
		Expires: time.Now().Add(time.Minute).Unix()}
	for i := 0; i < 6; i++ {
		c.Targets = append(c.Targets, capability.Target{FsID: uint32(i + 1), Addr: nodes[i/3].addr})
	}
	return c
}

// TestStripesOverHTTP: an erasure-coded upload through one server stores
// half of its stripes on the other over the stripe endpoint; either server
// reads it back (ranged stripe reads), and the namespace server can read
// the whole file from either.
func TestStripesOverHTTP(t *testing.T) {
	nodes, ns, key := startCluster(t, 2)
	c := ecCap(nodes, 11)
	u, err := nodes[0].s.NewUpload(context.Background(), c, key.Sign(c), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20+5)
	rand.Read(data)
	if _, err := u.ReadFrom(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	commit, _ := ns.Committed(11)
	for i, st := range nodes[1].stores {
		m, err := st.ReadMeta(11)
		if err != nil || m.Stripe != 3+i || m.Size != int64(len(data)) || m.Path != "/ec/f" || m.Checksums["adler32"] != commit.Checksums["adler32"] {
			t.Fatalf("stripe %d received over HTTP: %+v %v", 3+i, m, err)
		}
	}
	rc := *c
	rc.Write, rc.Size, rc.Sums = false, int64(len(data)), commit.Checksums
	rtok := key.Sign(&rc)
	for i, nd := range nodes {
		f, err := nd.s.Open(context.Background(), &rc, rtok, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
		f.Close()
		if !bytes.Equal(got, data) {
			t.Fatalf("read through node %d differs", i)
		}
	}
	sc := cluster.NewStorageClient(key.Internal())
	rd, err := sc.ReadFile(context.Background(), nodes[1].addr, rtok)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rd)
	rd.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadFile: %d bytes, %v", len(got), err)
	}
	// Too few stripes: refused before any byte, with the reason.
	for _, st := range nodes[0].stores {
		st.Remove(11)
	}
	if _, err := sc.ReadFile(context.Background(), nodes[1].addr, rtok); !kerr.Is(err, kerr.Unavailable) || !strings.Contains(err.Error(), "unrecoverable") {
		t.Fatalf("ReadFile of a file with 3 of 6 stripes: %v", err)
	}
}

// TestStorageEndpointsInternalOnly: without the internal secret nothing
// is served, whatever the capability; with it, the capability still has
// to match.
func TestStorageEndpointsInternalOnly(t *testing.T) {
	nodes, _, key := startCluster(t, 1)
	c := ecCap(append(nodes, nodes[0]), 12)
	wtok := key.Sign(c)
	rc := *c
	rc.Write = false
	rtok := key.Sign(&rc)
	stripe := fmt.Sprintf("%s%s%x/0?cap=%s", nodes[0].addr, cluster.StripePath, 12, wtok)
	for _, tc := range []struct {
		method, url, bearer string
		capHeader           string
		want                int
	}{
		{http.MethodPut, stripe, "", "", 403},
		{http.MethodPut, stripe, "wrong", "", 403},
		{http.MethodGet, strings.Replace(stripe, wtok, rtok, 1), "", "", 403},
		{http.MethodGet, nodes[0].addr + cluster.ReadFilePath, "", rtok, 403},
		{http.MethodGet, nodes[0].addr + cluster.ReadFilePath, key.Internal(), wtok, 403}, // a write capability reads nothing
		{http.MethodGet, nodes[0].addr + cluster.ReadFilePath, key.Internal(), "garbage", 403},
		{http.MethodGet, strings.Replace(stripe, wtok, rtok, 1), key.Internal(), "", 404}, // never written
		{http.MethodGet, nodes[0].addr + cluster.StripePath + "zz/0", key.Internal(), "", 400},
	} {
		req, _ := http.NewRequest(tc.method, tc.url, strings.NewReader("x"))
		if tc.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+tc.bearer)
		}
		if tc.capHeader != "" {
			req.Header.Set("Kaon-Capability", tc.capHeader)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s (bearer %q): %d, want %d", tc.method, strings.SplitN(tc.url, "?", 2)[0], tc.bearer, resp.StatusCode, tc.want)
		}
	}
	for _, st := range nodes[0].stores {
		if u, _ := st.Usage(); u.Files != 0 {
			t.Fatal("a refused stripe PUT left a stripe")
		}
	}
}

// TestPeerErrorsHoldNoCapability: transport errors name the server, never
// the URL (which holds the capability).
func TestPeerErrorsHoldNoCapability(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	addr := hs.URL
	hs.Close() // nothing listens there any more
	sc := cluster.NewStorageClient("secret")
	token := "payload.signature-that-must-not-leak"
	w, err := sc.CreateStripe(context.Background(), addr, 1, 0, token)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("x"))
	errs := []error{w.Finish(backend.Meta{})}
	_, err = sc.StripeReader(context.Background(), addr, 1, 0, token).ReadAt(make([]byte, 1), 0)
	errs = append(errs, err, sc.ProbeStripe(context.Background(), addr, 1, 0, token))
	_, err = sc.StreamStripe(context.Background(), addr, 1, 0, token, 0)
	errs = append(errs, err)
	_, err = sc.ReadFile(context.Background(), addr, token)
	errs = append(errs, err)
	for i, err := range errs {
		if err == nil || strings.Contains(err.Error(), "must-not-leak") {
			t.Errorf("error %d: %v", i, err)
		}
	}
}

// TestMovesStreamStripes: a move reads each stripe it needs from
// another storage server in one streamed request: a replica copied
// whole, and an erasure-coded stripe rebuilt from the five others (its
// own, on a filesystem the order says to avoid, is never asked for); the
// copies are byte for byte the originals.
func TestMovesStreamStripes(t *testing.T) {
	nodes, ns, key := startCluster(t, 3)
	ctx := context.Background()
	upload := func(c *capability.Capability, data []byte) *capability.Capability {
		u, err := nodes[0].s.NewUpload(ctx, c, key.Sign(c), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := u.ReadFrom(bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if err := u.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		commit, _ := ns.Committed(c.Fid)
		rc := *c
		rc.Write, rc.Checksums, rc.Size, rc.Sums = false, nil, int64(len(data)), commit.Checksums
		return &rc
	}
	move := func(rc *capability.Capability, stripe int, to uint32, avoid ...int) message.MoveResult {
		mc := *rc
		mc.Move = &capability.Move{Stripe: stripe, Dst: capability.Target{FsID: to, Addr: nodes[2].addr}}
		res, err := nodes[2].s.MoveStripe(ctx, message.MoveOrder{Token: key.Sign(&mc), Avoid: avoid})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	stripeOf := func(st *memstore.Store, fid uint64) []byte {
		r, err := st.Open(fid)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		b := make([]byte, r.Size())
		if _, err := r.ReadAt(b, 0); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		return b
	}
	reads := func() [3]int64 {
		var out [3]int64
		for i, nd := range nodes {
			out[i] = nd.stripeReads.Swap(0)
		}
		return out
	}

	// A 5 MiB replica on node 1 (fs 5) to node 2 (fs 7): one request.
	data := make([]byte, 5<<20+17)
	rand.Read(data)
	rep := &capability.Capability{Fid: 21, Write: true, Path: "/r/f", Layout: "plain", Checksums: []string{"adler32"},
		Expires: time.Now().Add(time.Minute).Unix(), Targets: []capability.Target{{FsID: 5, Addr: nodes[1].addr}}}
	rc := upload(rep, data)
	reads()
	if res := move(rc, 0, 7); res.How != message.MovedCopy {
		t.Fatalf("replica move: %+v", res)
	}
	if got := reads(); got != [3]int64{0, 1, 0} {
		t.Fatalf("stripe requests per server for a replica move: %v, want one to node 1", got)
	}
	if !bytes.Equal(stripeOf(nodes[2].stores[0], 21), data) {
		t.Fatal("the moved replica differs from the file")
	}

	// ec:4+2 over node 0 (stripes 0-2) and node 1 (3-5); stripe 3 is
	// rebuilt on fs 8 without reading fs 4.
	ec := upload(ecCap(nodes, 22), data)
	reads()
	if res := move(ec, 3, 8, 3); res.How != message.MovedRebuilt {
		t.Fatalf("EC move: %+v", res)
	}
	if got := reads(); got != [3]int64{3, 2, 0} {
		t.Fatalf("stripe requests per server for a rebuilt EC stripe: %v, want one per stripe read (3 on node 0, 2 on node 1)", got)
	}
	if !bytes.Equal(stripeOf(nodes[2].stores[1], 22), stripeOf(nodes[1].stores[0], 22)) {
		t.Fatal("the rebuilt stripe differs from the original")
	}
}

// TestStripeRangeIsNoEnd: a full range read from the middle of a peer's
// stripe ends without io.EOF (a section reader over it would end the
// stripe there).
func TestStripeRangeIsNoEnd(t *testing.T) {
	nodes, ns, key := startCluster(t, 2)
	c := &capability.Capability{Fid: 31, Write: true, Path: "/r/g", Layout: "plain", Checksums: []string{"adler32"},
		Expires: time.Now().Add(time.Minute).Unix(), Targets: []capability.Target{{FsID: 4, Addr: nodes[1].addr}}}
	u, err := nodes[0].s.NewUpload(context.Background(), c, key.Sign(c), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20)
	rand.Read(data)
	u.ReadFrom(bytes.NewReader(data))
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := ns.Committed(31); !ok {
		t.Fatal("not committed")
	}
	rc := *c
	rc.Write = false
	ra := cluster.NewStorageClient(key.Internal()).StripeReader(context.Background(), nodes[1].addr, 31, 0, key.Sign(&rc))
	for _, off := range []int64{0, 1 << 20} {
		b := make([]byte, 1<<20)
		if n, err := ra.ReadAt(b, off); n != len(b) || err != nil || !bytes.Equal(b, data[off:off+1<<20]) {
			t.Fatalf("ReadAt(1 MiB, %d): %d, %v", off, n, err)
		}
	}
	if n, err := io.Copy(io.Discard, io.NewSectionReader(ra, 0, int64(len(data)))); n != int64(len(data)) || err != nil {
		t.Fatalf("section reader over the stripe: %d bytes, %v", n, err)
	}
}

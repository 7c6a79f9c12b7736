// Package kaontest builds the whole Kaon stack in one process for tests
// of services and front ends: an in-memory namespace engine (memkv), the
// namespace service, one storage server with filesystems in temporary
// directories, both HTTP endpoints on loopback (httptest) and both
// root:// listeners, wired by internal/role as the binary wires them.
// Tests that need the real binary, real clients and restarts use
// integration/harness.
package kaontest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/nsserver"
	"github.com/kaon-storage/kaon/internal/role"
	"github.com/kaon-storage/kaon/internal/storage"
)

// Options shape a stack.
type Options struct {
	Filesystems int // default 6
	// Auth authenticates HTTP clients (default: a loopback client is the
	// local user owning its socket, as in `kaon up`).
	Auth auth.Chain
	Log  *slog.Logger // default: discarded
	// CapabilityTTL is the capabilities' lifetime, and so the grace
	// before stripes replaced by a move are deleted (default 5m).
	CapabilityTTL time.Duration
	// RebuildAfter is how long a filesystem may be unreadable before it
	// is declared lost and rebuilt (default: the binary's, 10m).
	RebuildAfter time.Duration
}

// Stack is a running in-process Kaon.
type Stack struct {
	NS      *nsserver.Server
	Storage *storage.Server
	Key     *capability.Key
	HTTP    *httptest.Server // namespace endpoint (WebDAV, admin API, internal protocol, metrics)
	Data    *httptest.Server // storage server endpoint
	Client  *client.Client   // admin API client of HTTP
	XRootD  string           // the namespace server's root:// listener (root://host:port)
	FSTXrd  string           // the storage server's root:// listener (root://host:port)

	closeStreams func()
}

// CloseClientConnections breaks every connection of the namespace
// endpoint's clients: the HTTP server's and the session streams taken
// over from it (WebSockets).
func (st *Stack) CloseClientConnections() {
	st.HTTP.CloseClientConnections()
	st.closeStreams()
}

// New starts a stack; it is stopped when the test ends. The roles are
// assembled by internal/role from the binary's default settings, as
// `kaon up` assembles them; only the namespace engine (memkv), the
// key and the listeners (httptest) are the test's.
func New(t testing.TB, o Options) *Stack {
	t.Helper()
	if o.Filesystems == 0 {
		o.Filesystems = 6
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	key, err := capability.NewKey(bytes.Repeat([]byte("kaontest-key-"), 3))
	if err != nil {
		t.Fatal(err)
	}
	st := &Stack{Key: key}
	nc := role.DefaultNamespace()
	if o.CapabilityTTL > 0 {
		nc.CapTTL = o.CapabilityTTL
	}
	if o.RebuildAfter > 0 {
		nc.RebuildAfter = o.RebuildAfter
	}
	proc, mgmX, fstX := role.NewProcessMetrics()
	ns, err := role.NewNamespace(nc, role.NamespaceParts{Store: memkv.New(), Key: key, Auth: o.Auth,
		XRootD: mgmX, Metrics: proc, Log: o.Log})
	if err != nil {
		t.Fatal(err)
	}
	st.NS = ns.Service
	st.Data = httptest.NewUnstartedServer(nil)
	var paths []string
	dir := t.TempDir()
	for i := 1; i <= o.Filesystems; i++ {
		paths = append(paths, filepath.Join(dir, fmt.Sprintf("fs%02d", i)))
	}
	sc := role.DefaultStorage()
	sc.SyncData = false // the test's files need not survive a crash of the machine
	fst, err := role.NewStorage(sc, role.StorageParts{Node: "kaontest", URL: "http://" + st.Data.Listener.Addr().String(),
		Key: key, Namespace: ns.Service, Paths: paths, XRootD: fstX, Metrics: proc, Log: o.Log})
	if err != nil {
		t.Fatal(err)
	}
	st.Storage = fst.Server
	st.Data.Config = role.HTTPServer(fst.HTTP)
	st.Data.Start()
	st.HTTP = httptest.NewUnstartedServer(nil)
	st.HTTP.Config = role.HTTPServer(ns.Endpoint())
	st.HTTP.Start()
	st.closeStreams = ns.CloseSessionStreams
	st.Client = client.New(st.HTTP.URL)
	xl, fxl := listen(t), listen(t)
	xs := ns.ServeXRootD(xl, nil)
	fxs := fst.ServeXRootD(fxl, xl.Addr().String(), nil)
	st.XRootD, st.FSTXrd = "root://"+xl.Addr().String(), "root://"+fxl.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	go st.Storage.Run(ctx)
	go st.NS.Run(ctx)
	t.Cleanup(func() {
		cancel()
		st.closeStreams()
		st.HTTP.Close()
		st.Data.Close()
		xs.Close()
		fxs.Close()
	})
	select {
	case <-st.Storage.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("kaontest: the storage server did not register within 30s")
	}
	return st
}

// listen opens a loopback listener on a free port.
func listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Put uploads data to path with the Go client (client.Put: the namespace
// endpoint's redirect, then the storage server's data endpoint) and
// returns the upload's status: 201, or the status the error's kind maps
// to (the error is logged).
func (st *Stack) Put(t testing.TB, path string, data []byte) int {
	t.Helper()
	if err := st.Client.Put(context.Background(), path, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Logf("PUT %s: %v", path, err)
		return kerr.HTTPStatus(kerr.KindOf(err))
	}
	return http.StatusCreated
}

// Get reads path with the Go client (client.Get) and returns the status
// (200, or the status the error's kind maps to; the error is logged) and
// the content.
func (st *Stack) Get(t testing.TB, path string) (int, []byte) {
	t.Helper()
	r, _, err := st.Client.Get(context.Background(), path)
	if err == nil {
		var b []byte
		b, err = io.ReadAll(r)
		r.Close()
		if err == nil {
			return http.StatusOK, b
		}
	}
	t.Logf("GET %s: %v", path, err)
	return kerr.HTTPStatus(kerr.KindOf(err)), nil
}

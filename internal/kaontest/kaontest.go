// Package kaontest builds the whole Kaon stack in one process for tests
// of services and front ends: an in-memory namespace engine (memkv), the
// namespace service, one storage server with filesystems in temporary
// directories, and both HTTP endpoints on loopback (httptest). Tests that
// need the real binary, real clients and restarts use integration/harness.
package kaontest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/httpfront"
	"github.com/kaon-storage/kaon/internal/kv/memkv"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsserver"
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
}

// Stack is a running in-process Kaon.
type Stack struct {
	NS      *nsserver.Server
	Storage *storage.Server
	Key     *capability.Key
	HTTP    *httptest.Server // namespace endpoint (WebDAV, admin API, internal protocol)
	Data    *httptest.Server // storage server endpoint
	Client  *client.Client   // admin API client of HTTP
}

// New starts a stack; it is stopped when the test ends.
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
	sc := cluster.NewStorageClient(key.Internal())
	st.NS, err = nsserver.New(nsserver.Config{Engine: memkv.New(), Key: key, Logger: o.Log, CapabilityTTL: o.CapabilityTTL,
		Data: sc, Mover: sc,
		PhysName: func(fs namespace.Filesystem, fid uint64) string { return posix.PhysPath(fs.Path, fid) }})
	if err != nil {
		t.Fatal(err)
	}
	st.Data = httptest.NewUnstartedServer(nil)
	dataURL := "http://" + st.Data.Listener.Addr().String()
	var paths []string
	dir := t.TempDir()
	for i := 1; i <= o.Filesystems; i++ {
		paths = append(paths, filepath.Join(dir, fmt.Sprintf("fs%02d", i)))
	}
	st.Storage, err = storage.New(storage.Config{Node: "kaontest", Addr: dataURL, Key: key, Namespace: st.NS, Paths: paths,
		Store: func(root string) (backend.Store, error) {
			return posix.New(root, posix.Options{IO: backend.IODirect}), nil
		},
		Peers: cluster.NewStorageClient(key.Internal()), Logger: o.Log})
	if err != nil {
		t.Fatal(err)
	}
	st.Data.Config.Handler = httpfront.Storage(st.Storage, key, httpfront.TPCConfig{}, o.Log)
	st.Data.Start()
	st.HTTP = httptest.NewUnstartedServer(&httpfront.Namespace{NS: st.NS, Key: key, Auth: o.Auth, Log: o.Log})
	st.HTTP.Config.ConnContext = httpfront.ConnContext
	st.HTTP.Start()
	st.Client = client.New(st.HTTP.URL)
	ctx, cancel := context.WithCancel(context.Background())
	go st.Storage.Run(ctx)
	go st.NS.Run(ctx)
	t.Cleanup(func() {
		cancel()
		st.HTTP.Close()
		st.Data.Close()
	})
	select {
	case <-st.Storage.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("kaontest: the storage server did not register within 30s")
	}
	return st
}

// Put uploads data to path over HTTP (following the redirect to the
// storage server) and returns the status of the upload.
func (st *Stack) Put(t testing.TB, path string, data []byte) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, st.HTTP.URL+path, bytes.NewReader(data))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PUT %s: %v", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Get reads path over HTTP and returns its status and body.
func (st *Stack) Get(t testing.TB, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(st.HTTP.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/token"
	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/backend/rados"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/httpfront"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsserver"
	"github.com/kaon-storage/kaon/internal/storage"
	"github.com/kaon-storage/kaon/internal/transfer/remote"
)

// Endpoints is written to DIR/endpoints.json once a process serves.
type Endpoints struct {
	HTTP    string `json:"http"`
	XRootD  string `json:"xrootd,omitempty"`
	FSTHTTP string `json:"fst_http,omitempty"`
	FSTXrd  string `json:"fst_xrootd,omitempty"`
	// With --tls: the TLS URLs and the CA clients verify them with.
	HTTPS    string `json:"https,omitempty"`
	Roots    string `json:"roots,omitempty"`
	FSTHTTPS string `json:"fst_https,omitempty"`
	FSTRoots string `json:"fst_roots,omitempty"`
	CA       string `json:"ca,omitempty"`     // the local CA's certificate (.pem)
	CADir    string `json:"ca_dir,omitempty"` // trusted CAs, hashed layout
	PID      int    `json:"pid"`
}

func writeEndpoints(dir string, e Endpoints) error {
	e.PID = os.Getpid()
	b, _ := json.MarshalIndent(e, "", "  ")
	tmp := filepath.Join(dir, ".endpoints.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "endpoints.json"))
}

// start applies the common settings: logging and profiling.
func (c Common) start() *slog.Logger {
	level := slog.LevelInfo
	if c.Verbose {
		level = slog.LevelDebug
	}
	servePprof(c.Pprof)
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// servePprof serves net/http/pprof on its own listener (never on a
// public endpoint); "" = off.
func servePprof(addr string) {
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go http.ListenAndServe(addr, mux)
}

// listen opens addr; port 0 picks a free port.
func listen(addr string) (net.Listener, string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	return l, l.Addr().String(), nil
}

func serveHTTP(l net.Listener, h http.Handler) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, ConnContext: httpfront.ConnContext}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("http server stopped", "addr", l.Addr(), "err", err)
		}
	}()
	return srv
}

func waitSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	<-ch
}

// nsRole is a namespace server with its store.
type nsRole struct {
	eng     *pebblekv.Engine
	srv     *nsserver.Server
	key     *capability.Key
	audit   io.Closer
	tokens  *token.Issuer
	auth    auth.Chain // how clients are authenticated (startAuth)
	sec     *security
	metrics *namespaceMetrics
}

func (r *nsRole) Close() {
	r.eng.Close()
	if r.audit != nil {
		r.audit.Close()
	}
}

// openNamespace opens the namespace server stored in dir.
func openNamespace(dir string, c NamespaceConfig, sec *security, log *slog.Logger) (*nsRole, error) {
	key, err := loadKey(dir, c.KeyFile)
	if err != nil {
		return nil, err
	}
	role := &nsRole{key: key, sec: sec}
	if role.tokens, err = c.Auth.openIssuer(dir); err != nil {
		return nil, err
	}
	var audit io.Writer
	if af, err := openAudit(dir, c.AuditLog); err != nil {
		return nil, err
	} else if af != nil {
		audit, role.audit = af, af
	}
	if role.eng, err = pebblekv.Open(filepath.Join(dir, "meta"), pebblekv.Options{CacheBytes: int64(c.MetaCacheMB) << 20}); err != nil {
		return nil, fmt.Errorf("open namespace store in %s: %w", dir, err)
	}
	role.srv, err = nsserver.New(c.serverConfig(role.eng, key, role.tokens, audit, sec, log))
	if err != nil {
		role.Close()
		return nil, err
	}
	role.metrics = newNamespaceMetrics(role.srv)
	role.srv.ReportMovement(role.metrics.Move)
	return role, nil
}

// openAudit opens the audit log spec names (DATA stands for dir); nil
// when spec is empty (no audit log).
func openAudit(dir, spec string) (*nsserver.AuditLog, error) {
	p := strings.Replace(spec, "DATA", dir, 1)
	if p == "" {
		return nil, nil
	}
	af, err := nsserver.OpenAuditLog(p)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return af, nil
}

// serverConfig is the namespace service's configuration over store (the
// embedded engine, or a replicated instance's pipeline).
func (c NamespaceConfig) serverConfig(store kv.Store, key *capability.Key, tokens *token.Issuer, audit io.Writer, sec *security, log *slog.Logger) nsserver.Config {
	storage := storageClient(key, sec)
	return nsserver.Config{Engine: store, Sync: c.Sync, Key: key, CapabilityTTL: c.CapTTL, Logger: log,
		RecycleLifetime: c.RecycleLifetime, RecycleMaxBytes: c.RecycleSize, Audit: audit, Tokens: tokens,
		Data: storage, Mover: storage, PhysName: physName,
		Repair: storage, FsckRate: c.fsckRate(), FsckOrphanGrace: c.orphanGrace(),
		Slow: c.slowPolicy()}
}

// startAuth names this instance's token issuer after the URL its
// namespace endpoint got, and builds the authenticators of --auth.
func (r *nsRole) startAuth(ctx context.Context, dir, endpoint string, c AuthConfig, log *slog.Logger) error {
	r.tokens.URL = c.issuerURL(endpoint)
	var err error
	r.auth, err = c.chain(ctx, dir, r.tokens, log)
	return err
}

// handler is the namespace endpoint: WebDAV and the admin API
// (access-logged), the internal protocol (not: heartbeats every second),
// metrics (for the clients metrics lets through).
func (r *nsRole) handler(log *slog.Logger, metrics func(*http.Request) error) http.Handler {
	front := &httpfront.Namespace{NS: r.srv, Key: r.key, Log: log, Auth: r.auth}
	logged := httpfront.AccessLog(front, log)
	return r.metrics.serve(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.URL.Path, "/internal/v1/") {
			front.ServeHTTP(w, req)
			return
		}
		logged.ServeHTTP(w, req)
	}), metrics)
}

// stores opens the filesystems of a storage server: rados://... as a
// RADOS pool (when built with -tags ceph), anything else as a directory
// (O_DIRECT or buffered, as detected or configured; sync fsyncs stripes
// before commit).
func (c StorageConfig) stores() func(string) (backend.Store, error) {
	// librados gives up a little before the storage server's deadline,
	// so a hung cluster is reported by librados's own error.
	timeout := max(c.IOTimeout-c.IOTimeout/4, 0)
	po := posix.Options{Sync: c.SyncData}
	if rados.Available {
		po.CephHealth = func(fsid string) string { return rados.Health(c.CephConf, c.CephUser, fsid, timeout) }
	}
	return func(path string) (backend.Store, error) {
		if strings.HasPrefix(path, "rados://") {
			return rados.Open(path, rados.Options{User: c.CephUser, Conf: c.CephConf, Timeout: timeout})
		}
		return posix.New(path, po), nil
	}
}

// physName names stripe fid of filesystem fs as its backend stores it.
func physName(fs namespace.Filesystem, fid uint64) string {
	if strings.HasPrefix(fs.Path, "rados://") {
		return rados.PhysName(fs.Path, fid)
	}
	return posix.PhysPath(fs.Path, fid)
}

// newStorage builds a storage server reporting to ns.
func newStorage(node, addr string, key *capability.Key, ns message.Namespace, paths []string, c StorageConfig, sec *security, log *slog.Logger) (*storage.Server, error) {
	return storage.New(storage.Config{Node: node, Addr: addr, Key: key, Namespace: ns, Paths: paths,
		Store: c.stores(), Peers: storageClient(key, sec), IOTimeout: ioTimeout(c.IOTimeout),
		StreamMemory: c.StreamMemoryMB << 20, LatencyWindow: c.LatencyWindow, LatencyProbe: latencyProbe(c.LatencyProbe), Logger: log})
}

// httpConfig is the HTTP-TPC setup of a storage server; policy learns this
// instance's own listeners (which copies never reach) as they start. With
// TLS, https remotes are trusted by the system's CAs and --tls-ca-dir's.
func (t TPCConfig) httpConfig(policy *remote.Policy, sec *security) httpfront.TPCConfig {
	h := &remote.HTTP{Policy: policy}
	if sec != nil && sec.tls != nil {
		h.TLS = sec.tls.Outbound()
	}
	return httpfront.TPCConfig{HTTP: h, Markers: t.Markers}
}

// hostPort is the host:port of an http:// or root:// URL.
func hostPort(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		u = u[i+3:]
	}
	if i := strings.IndexByte(u, '/'); i >= 0 {
		u = u[:i]
	}
	return u
}

// ioTimeout is the storage server's I/O deadline for --io-timeout (0:
// none, which storage.Config spells negative).
func ioTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// latencyProbe is the probe period for --latency-probe (0: none, which
// storage.Config spells negative).
func latencyProbe(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// shutdown stops HTTP servers gracefully within 10 s.
func shutdown(srvs ...*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range srvs {
		s.Shutdown(ctx)
	}
}

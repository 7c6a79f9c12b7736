package role

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/token"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/backend/rados"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/httpfront"
	"github.com/kaon-storage/kaon/internal/httpserve"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/metrics"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/nsserver"
	"github.com/kaon-storage/kaon/internal/xrdfront"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// NamespaceParts are what a namespace service is assembled from besides
// its settings: the store and the keys the role opened, and how the role's
// front ends authenticate clients.
type NamespaceParts struct {
	Store  kv.Store        // the embedded engine, or a replicated instance's pipeline
	Key    *capability.Key // the capability key shared with the storage servers
	Tokens *token.Issuer   // this instance's token issuer (nil: it issues none)
	Audit  io.Writer       // nil: no audit log
	Auth   auth.Chain      // nil: loopback clients by their socket's owner
	// Security is the role's TLS (nil: none); the service reaches storage
	// servers through it.
	Security *Security
	// MetricsAllow is who may read /metrics (nil: every client).
	MetricsAllow func(*http.Request) error
	// XRootD are the role's root:// servers (ServeXRootD adds them; nil:
	// none).
	XRootD *XRootDServers
	// Metrics are the process's metrics /metrics shows besides the
	// namespace's (the Go runtime, root:// listeners, the embedded storage
	// server's; nil: none).
	Metrics prometheus.Gatherer
	Log     *slog.Logger
	// A replicated instance's active server: how it hands the role over,
	// and what its predecessor handed over (nsserver.Config).
	StepDown func(ctx context.Context) error
	Inherit  *namespace.InFlight
	// Term is the active role's HA term (0: an embedded engine); Takeover
	// starts a grace window for the previous incarnation's sessions to
	// reclaim their locks.
	Term     uint64
	Takeover bool
	// NSStatus is a replicated instance's status, for the web view's
	// status page (nil: an embedded engine, one server).
	NSStatus func(context.Context) nsapi.NSStatus
}

// Namespace is one namespace service with its front ends' bindings: what
// an embedded namespace server serves for its lifetime, and a replicated
// one while it is active (one per incarnation).
type Namespace struct {
	Service *nsserver.Server
	// HTTP is the namespace endpoint: WebDAV, the admin API, the internal
	// protocol, and /metrics with the namespace's figures; not
	// access-logged (Endpoint).
	HTTP http.Handler
	// XRootD is the root:// binding of the service.
	XRootD xrootd.Namespace
	// Registry has the namespace's own metrics (served on HTTP with
	// NamespaceParts.Metrics).
	Registry *prometheus.Registry
	Key      *capability.Key
	Auth     auth.Chain
	xrd      *XRootDServers
	log      *slog.Logger
	front    *httpfront.Namespace
}

// CloseSessionStreams ends the session streams that are WebSockets
// (httpfront.Namespace.CloseSessionStreams): when the server shuts down,
// or the role is no longer active.
func (n *Namespace) CloseSessionStreams() { n.front.CloseSessionStreams() }

// NewNamespace assembles the namespace service c describes over p.Store;
// the caller runs it (Service.Run).
func NewNamespace(c NamespaceConfig, p NamespaceParts) (*Namespace, error) {
	var level *slog.LevelVar
	p.Log, level = leveled(orDiscard(p.Log))
	peers := storageClient(p.Key, p.Security)
	cfg := nsserver.Config{Engine: p.Store, Sync: c.Sync, Key: p.Key, CapabilityTTL: c.CapTTL, Logger: p.Log,
		RecycleLifetime: c.RecycleLifetime, RecycleMaxBytes: c.RecycleSize, Audit: p.Audit, Tokens: p.Tokens,
		Data: peers, Mover: peers, PhysName: physName, Repair: peers,
		FsckRate: negativeIfNone(c.FsckRate), FsckOrphanGrace: negativeIfNone(c.OrphanGrace), RebuildAfter: negativeIfNone(c.RebuildAfter),
		Slow: c.slowPolicy(), StepDown: p.StepDown, Inherit: p.Inherit, Sessions: c.Sessions, Term: p.Term, Takeover: p.Takeover,
		LogLevel: level}
	cfg.Sessions.MaxAudience = negativeIfNone(c.Sessions.MaxAudience) // 0 there is the default
	srv, err := nsserver.New(cfg)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	metrics.RegisterNamespace(reg, srv)
	srv.ReportMovement(metrics.NewMovement(reg))
	front := &httpfront.Namespace{NS: srv, Key: p.Key, Log: p.Log, Auth: p.Auth, DataClient: peers.HTTP, NSStatus: p.NSStatus, SRRPath: c.SRRPath}
	h := metrics.Serve(metrics.NewHTTP(reg, "mgm", metrics.NamespaceRoute).Instrument(front), gatherers(p.Metrics, reg), p.MetricsAllow)
	return &Namespace{Service: srv, HTTP: h, XRootD: xrdfront.Namespace{NS: srv}, Registry: reg, Key: p.Key, Auth: p.Auth,
		xrd: p.XRootD, log: p.Log, front: front}, nil
}

// Endpoint is n's namespace endpoint as served by a server with an
// embedded store (always ready), access-logged but for its health paths
// (probed every few seconds).
func (n *Namespace) Endpoint() http.Handler {
	return httpfront.Health(accessLogged(n.HTTP, n.log), nil)
}

// accessLogged logs the requests h serves but the internal protocol's
// (storage servers' heartbeats every second).
func accessLogged(h http.Handler, log *slog.Logger) http.Handler {
	logged := httpserve.AccessLog(h, log)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/internal/v1/") {
			h.ServeHTTP(w, r)
			return
		}
		logged.ServeHTTP(w, r)
	})
}

// negativeIfNone is a count or duration setting where 0 means none, as
// the servers' configs spell it (0 there is their default).
func negativeIfNone[T ~int | ~int64](v T) T {
	if v <= 0 {
		return -1
	}
	return v
}

// physName names stripe fid of filesystem fs as its backend stores it.
func physName(fs namespace.Filesystem, fid uint64) string {
	if strings.HasPrefix(fs.Path, "rados://") {
		return rados.PhysName(fs.Path, fid)
	}
	return posix.PhysPath(fs.Path, fid)
}

// namespaceFiles are what a namespace server keeps in its data directory
// besides its store: the capability key, the token issuer's keys, the
// audit log.
type namespaceFiles struct {
	key    *capability.Key
	tokens *token.Issuer
	audit  *nsserver.AuditLog // nil: no audit log
}

func openNamespaceFiles(dir string, c NamespaceConfig) (*namespaceFiles, error) {
	key, err := loadKey(dir, c.KeyFile)
	if err != nil {
		return nil, err
	}
	f := &namespaceFiles{key: key}
	if f.tokens, err = c.Auth.openIssuer(dir); err != nil {
		return nil, err
	}
	if f.audit, err = openAudit(dir, c.AuditLog); err != nil {
		return nil, err
	}
	return f, nil
}

// auditWriter is the audit log as the service takes it (a nil *AuditLog is
// no log, not a writer that fails).
func (f *namespaceFiles) auditWriter() io.Writer {
	if f.audit == nil {
		return nil
	}
	return f.audit
}

func (f *namespaceFiles) close() {
	if f.audit != nil {
		f.audit.Close()
	}
}

// openAudit opens the audit log spec names (DATA stands for dir); nil
// when spec is empty (no audit log).
func openAudit(dir, spec string) (*nsserver.AuditLog, error) {
	p := dataPath(dir, spec)
	if p == "" {
		return nil, nil
	}
	af, err := nsserver.OpenAuditLog(p)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return af, nil
}

// openEmbedded opens the namespace engine stored in dir/meta.
func openEmbedded(dir string, c NamespaceConfig) (*pebblekv.Engine, error) {
	eng, err := pebblekv.Open(filepath.Join(dir, "meta"), pebblekv.Options{CacheBytes: int64(c.MetaCacheMB) << 20})
	if err != nil {
		return nil, fmt.Errorf("open namespace store in %s: %w", dir, err)
	}
	return eng, nil
}

// loadKey is the capability key: keyFile (which must exist: every server
// of an instance shares one) or DATA/keys/capability.key, created if
// missing.
func loadKey(data, keyFile string) (*capability.Key, error) {
	if keyFile != "" {
		if _, err := os.Stat(keyFile); err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		return capability.LoadOrCreateKey(keyFile)
	}
	if err := os.MkdirAll(filepath.Join(data, "keys"), 0o700); err != nil {
		return nil, err
	}
	return capability.LoadOrCreateKey(filepath.Join(data, "keys", "capability.key"))
}

package role

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/backend/rados"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/datafront"
	"github.com/kaon-storage/kaon/internal/metrics"
	"github.com/kaon-storage/kaon/internal/storage"
	"github.com/kaon-storage/kaon/internal/transfer/remote"
)

// StorageParts are what a storage server is assembled from besides its
// settings.
type StorageParts struct {
	Node      string            // stable node name
	URL       string            // its HTTP endpoint's URL, as the namespace and clients reach it
	Key       *capability.Key   // the capability key shared with the namespace
	Namespace message.Namespace // where it registers, claims and commits
	Paths     []string          // its filesystems
	// TPC is where third-party copies may go; the role adds its own
	// listeners as they start (nil: copies reach no loopback address).
	TPC      *remote.Policy
	Security *Security // the role's TLS (nil: none)
	// MetricsAllow is who may read /metrics (nil: every client).
	MetricsAllow func(*http.Request) error
	// XRootD are the role's root:// servers, whose figures /metrics shows
	// (nil: none).
	XRootD *XRootDServers
	Log    *slog.Logger
}

// Storage is a storage server and its HTTP data endpoint.
type Storage struct {
	Server *storage.Server
	// HTTP is the data endpoint: uploads and reads under capabilities,
	// HTTP-TPC, stripes between servers, and /metrics with the storage
	// server's figures.
	HTTP http.Handler
	tpc  *remote.Policy
	xrd  *XRootDServers
	log  *slog.Logger
}

// NewStorage assembles the storage server c describes; the caller runs it
// (Server.Run).
func NewStorage(c StorageConfig, p StorageParts) (*Storage, error) {
	p.Log = orDiscard(p.Log)
	if p.TPC == nil {
		p.TPC = &remote.Policy{}
	}
	srv, err := storage.New(storage.Config{Node: p.Node, Addr: p.URL, Key: p.Key, Namespace: p.Namespace, Paths: p.Paths,
		Store: c.stores(), Peers: storageClient(p.Key, p.Security), IOTimeout: negativeIfNone(c.IOTimeout),
		StreamMemory: c.StreamMemoryMB << 20, LatencyWindow: c.LatencyWindow, LatencyProbe: negativeIfNone(c.LatencyProbe), Logger: p.Log})
	if err != nil {
		return nil, err
	}
	reg := metrics.NewRegistry()
	metrics.RegisterStorage(reg, srv)
	metrics.RegisterXRootD(reg, "fst", p.XRootD.list)
	front := datafront.Storage(srv, p.Key, c.TPC.httpConfig(p.TPC, p.Security), p.Log)
	h := metrics.Serve(metrics.NewHTTP(reg, "fst", metrics.StorageRoute).Instrument(front), reg, p.MetricsAllow)
	return &Storage{Server: srv, HTTP: h, tpc: p.TPC, xrd: p.XRootD, log: p.Log}, nil
}

// stores opens the filesystems of a storage server: rados://... as a
// RADOS pool (when built with -tags ceph), anything else as a directory
// (O_DIRECT or buffered, as detected or configured; SyncData fsyncs
// stripes before commit).
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

// httpConfig is the HTTP-TPC setup of a storage server; policy learns this
// instance's own listeners (which copies never reach) as they start. With
// TLS, https remotes are trusted by the system's CAs and --tls-ca-dir's.
func (t TPCConfig) httpConfig(policy *remote.Policy, sec *Security) datafront.TPCConfig {
	h := &remote.HTTP{Policy: policy}
	if sec != nil && sec.tls != nil {
		h.TLS = sec.tls.Outbound()
	}
	return datafront.TPCConfig{HTTP: h, Markers: t.Markers}
}

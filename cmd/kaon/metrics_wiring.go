package main

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kaon-storage/kaon/internal/metrics"
	"github.com/kaon-storage/kaon/internal/nsserver"
	"github.com/kaon-storage/kaon/internal/storage"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// Metrics wiring: each role has its own registry, served at /metrics on
// its HTTP endpoint (in `kaon up`, the namespace endpoint shows the
// namespace server's, the storage endpoint the storage server's).

// xrdServers are the root:// servers running, by role.
var xrdServers struct {
	sync.Mutex
	byRole map[string][]*xrootd.Server
}

// noteXRootD records a root:// server of role (mgm, fst) for metrics.
func noteXRootD(role string, s *xrootd.Server) {
	xrdServers.Lock()
	defer xrdServers.Unlock()
	if xrdServers.byRole == nil {
		xrdServers.byRole = map[string][]*xrootd.Server{}
	}
	xrdServers.byRole[role] = append(xrdServers.byRole[role], s)
}

func xrootdOf(role string) func() []*xrootd.Server {
	return func() []*xrootd.Server {
		xrdServers.Lock()
		defer xrdServers.Unlock()
		return append([]*xrootd.Server(nil), xrdServers.byRole[role]...)
	}
}

// namespaceMetrics is the namespace server's registry; Move is where
// drain, balance and conversion report.
type namespaceMetrics struct {
	reg  *prometheus.Registry
	http *metrics.HTTP
	Move *metrics.Movement
}

func newNamespaceMetrics(ns *nsserver.Server) *namespaceMetrics {
	reg := metrics.NewRegistry()
	metrics.RegisterNamespace(reg, ns)
	metrics.RegisterXRootD(reg, "mgm", xrootdOf("mgm"))
	return &namespaceMetrics{reg: reg, http: metrics.NewHTTP(reg, "mgm", metrics.NamespaceRoute), Move: metrics.NewMovement(reg)}
}

// serve counts h's requests and answers /metrics.
func (m *namespaceMetrics) serve(h http.Handler) http.Handler {
	return metrics.Serve(m.http.Instrument(h), m.reg)
}

// storageHandler is a storage server's endpoint with its metrics.
func storageHandler(fst *storage.Server, h http.Handler) http.Handler {
	reg := metrics.NewRegistry()
	metrics.RegisterStorage(reg, fst)
	metrics.RegisterXRootD(reg, "fst", xrootdOf("fst"))
	return metrics.Serve(metrics.NewHTTP(reg, "fst", metrics.StorageRoute).Instrument(h), reg)
}

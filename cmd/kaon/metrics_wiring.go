package main

import (
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/httpfront"
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

// serve counts h's requests and answers /metrics to the clients allow
// lets through (metricsAllow).
func (m *namespaceMetrics) serve(h http.Handler, allow func(*http.Request) error) http.Handler {
	return metrics.Serve(m.http.Instrument(h), m.reg, allow)
}

// storageHandler is a storage server's endpoint with its metrics.
func storageHandler(fst *storage.Server, h http.Handler, allow func(*http.Request) error) http.Handler {
	reg := metrics.NewRegistry()
	metrics.RegisterStorage(reg, fst)
	metrics.RegisterXRootD(reg, "fst", xrootdOf("fst"))
	return metrics.Serve(metrics.NewHTTP(reg, "fst", metrics.StorageRoute).Instrument(h), reg, allow)
}

// metricsAllow is who may read a role's /metrics (--metrics-access), the
// admin as chain authenticates it. By default: every client of a
// namespace server whose --auth (methods) is unix alone, as before (it
// serves anonymous clients anyway); clients on this host on one that
// takes tokens or certificates, and on a storage server (methods ""),
// which cannot tell how its instance authenticates clients.
func (c Common) metricsAllow(methods string, chain auth.Chain) (func(*http.Request) error, error) {
	access := c.MetricsAccess
	if access == "" {
		access = metrics.Loopback
		if strings.TrimSpace(strings.Trim(methods, ",")) == "unix" {
			access = metrics.Open
		}
	}
	return metrics.Allow(access, func(r *http.Request) error { return httpfront.Admin(chain, r, "metrics") })
}

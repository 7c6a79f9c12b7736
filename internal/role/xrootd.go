package role

import (
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/httpfront"
	"github.com/kaon-storage/kaon/internal/metrics"
	"github.com/kaon-storage/kaon/internal/storage"
	"github.com/kaon-storage/kaon/internal/transfer/remote"
	"github.com/kaon-storage/kaon/internal/xrdfront"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// XRootDServers are the root:// servers of one role, whose figures its
// /metrics shows (a replicated namespace server's incarnations all show
// the same listener's).
type XRootDServers struct {
	mu      sync.Mutex
	servers []*xrootd.Server
}

func (x *XRootDServers) add(s *xrootd.Server) {
	if x == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.servers = append(x.servers, s)
}

// list is the servers so far (none for a nil x).
func (x *XRootDServers) list() []*xrootd.Server {
	if x == nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]*xrootd.Server(nil), x.servers...)
}

// ServeXRootD serves n's root:// namespace requests on l (TLS and tokens
// as sec sets up; nil: neither), identifying clients as n's HTTP endpoint
// does.
func (n *Namespace) ServeXRootD(l net.Listener, sec *Security) *xrootd.Server {
	return serveNamespaceXRootD(l, n.XRootD, n.Auth, sec, n.xrd, n.log)
}

// ServeXRootD serves s's root:// data listener on l (TLS as sec sets up;
// nil: none); namespace requests arriving there are redirected to
// manager (host:port).
func (s *Storage) ServeXRootD(l net.Listener, manager string, sec *Security) *xrootd.Server {
	return serveStorageXRootD(l, manager, s.Server, s.tpc, sec, s.xrd, s.log)
}

// serveNamespaceXRootD serves root:// namespace requests on l through ns
// (an embedded service's binding, or the HA router), identifying clients
// through chain.
func serveNamespaceXRootD(l net.Listener, ns xrootd.Namespace, chain auth.Chain, sec *Security, servers *XRootDServers, log *slog.Logger) *xrootd.Server {
	cfg := xrootd.Config{Namespace: ns, IdentifyConn: xrdfront.Identifier(chain), Logger: log.With("role", "xrootd-mgm")}
	sec.xrootd(&cfg, chain)
	srv := xrootd.NewServer(cfg)
	servers.add(srv)
	go srv.Serve(l)
	return srv
}

// serveStorageXRootD serves a storage server's root:// data listener on
// l; namespace requests arriving there are redirected to manager
// (host:port). It is the source and the destination of XRootD third-party
// copies, reaching remotes under the tpc policy.
func serveStorageXRootD(l net.Listener, manager string, fst *storage.Server, tpc *remote.Policy, sec *Security, servers *XRootDServers, log *slog.Logger) *xrootd.Server {
	// Request buffers in flight share the storage server's stream budget
	// figure: root:// clients cannot make it hold more than HTTP ones.
	cfg := xrootd.Config{Data: xrdfront.Data{S: fst}, Manager: manager,
		GlobalBudget: fst.StreamMemory(), Logger: log.With("role", "xrootd-fst"),
		TPC: xrdfront.TPC{Remote: &remote.XRootD{Policy: tpc, Auth: sec.tpcAuth(log)}, Log: log}}
	sec.xrootd(&cfg, nil)
	srv := xrootd.NewServer(cfg)
	servers.add(srv)
	go srv.Serve(l)
	fst.SetXrdAddr(l.Addr().String())
	return srv
}

// MetricsAllow is who may read a role's /metrics (--metrics-access), the
// admin as chain authenticates it. By default: every client of a
// namespace server whose --auth (methods) is unix alone (it serves
// anonymous clients anyway); clients on this host on one that takes
// tokens or certificates, and on a storage server (methods ""), which
// cannot tell how its instance authenticates clients.
func (c Common) MetricsAllow(methods string, chain auth.Chain) (func(*http.Request) error, error) {
	access := c.MetricsAccess
	if access == "" {
		access = metrics.Loopback
		if strings.TrimSpace(strings.Trim(methods, ",")) == "unix" {
			access = metrics.Open
		}
	}
	return metrics.Allow(access, func(r *http.Request) error { return httpfront.Admin(chain, r, "metrics") })
}

package role

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kaon-storage/kaon/internal/ha"
	"github.com/kaon-storage/kaon/internal/httpfront"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/etcdkv"
	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/metrics"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/xrdfront"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// startReplicated starts a namespace server of a replicated instance into
// s: its front ends serve the Namespace of its current incarnation while
// it is active and redirect to the active server while it is a standby
// (internal/ha).
func startReplicated(s *Server, c MGMConfig, files *namespaceFiles, sec *Security, log *slog.Logger) error {
	// Wait for the store: its members may start after this server (a
	// whole instance restarting, or members inside the servers).
	remote, err := c.Meta.OpenEtcd()
	for waited := false; kerr.Is(err, kerr.Unavailable); remote, err = c.Meta.OpenEtcd() {
		if !waited {
			log.Warn("waiting for the namespace store", "meta", c.Meta.URL, "err", err)
			waited = true
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return fmt.Errorf("namespace store: %w", err)
	}
	s.onClose(func() { remote.Close() })
	local, err := pebblekv.Open(filepath.Join(c.Data, "meta-replica"), pebblekv.Options{NoSync: true, CacheBytes: int64(c.Namespace.MetaCacheMB) << 20})
	if err != nil {
		return fmt.Errorf("namespace replica: %w", err)
	}
	s.onClose(func() { local.Close() })

	l, addr, err := listen(c.HTTP, s)
	if err != nil {
		return err
	}
	self := ha.Member{ID: advertised(addr, c.Meta.Advertise)}
	self.HTTP = sec.scheme() + self.ID
	ep := Endpoints{HTTP: "http://" + addr}
	ctx, cancel := context.WithCancel(context.Background())
	s.onClose(cancel)
	// The instance's own token keys: DATA/keys/token-keys.json, as on any
	// namespace server (servers that issue tokens get the first one's
	// copy, like the capability key, and the same --issuer-url).
	// The process's metrics are served by every server, active or not
	// (its role, its replica's lag), with the active incarnation's.
	proc := metrics.NewRegistry()
	chain, allow, err := authenticate(ctx, c.Common, c.Namespace.Auth, c.Data, files, self.HTTP, sec, proc, log)
	if err != nil {
		return err
	}
	x := newXRootDServers(metrics.RegisterXRootD(proc), "mgm")
	var xl net.Listener
	if c.XRootD != "" {
		var xaddr string
		if xl, xaddr, err = listen(c.XRootD, s); err != nil {
			return fmt.Errorf("xrootd: %w", err)
		}
		self.XRootD = advertised(xaddr, c.Meta.Advertise)
		ep.XRootD = "root://" + xaddr
	}
	parts := NamespaceParts{Key: files.key, Tokens: files.tokens, Audit: files.auditWriter(), Auth: chain, Security: sec,
		MetricsAllow: allow, Log: log}
	var node *ha.Node
	node, err = ha.New(ha.Config{Remote: remote, Local: local, Self: self, Lease: c.Meta.Lease, KeepHistory: c.Meta.KeepHistory, Logger: log,
		Serve: func(ctx context.Context, store kv.Store, term uint64, handed []byte) (any, error) {
			p := parts
			// Every active role follows another's (or none: a grace
			// window at the instance's first start costs only its time),
			// whose sessions reclaim their locks.
			p.Store, p.StepDown, p.Term, p.Takeover = store, node.StepDown, term, true
			p.NSStatus = func(ctx context.Context) nsapi.NSStatus { return nsStatus(node.Status(ctx), self) }
			if handed != nil {
				var in namespace.InFlight
				if err := json.Unmarshal(handed, &in); err != nil {
					log.Warn("what the previous active server handed over is unreadable (its uploads in flight are aborted)", "err", err)
				} else {
					p.Inherit = &in
				}
			}
			ns, err := NewNamespace(c.Namespace, p)
			if err != nil {
				return nil, err
			}
			go ns.Service.Run(ctx)
			go func() {
				// No longer active: its session streams end, their
				// clients reconnect (to the active server).
				<-ctx.Done()
				ns.CloseSessionStreams()
			}()
			return ns, nil
		},
		HandOver: func(svc any) []byte {
			b, _ := json.Marshal(svc.(*Namespace).Service.HandOver())
			return b
		}})
	if err != nil {
		return err
	}
	metrics.RegisterHA(proc, node.Figures)
	route := func() (*Namespace, ha.Member, error) {
		v := node.View()
		if ns, ok := v.Service.(*Namespace); ok && v.Role == ha.Active {
			return ns, v.Active, nil
		}
		return nil, v.Active, v.Err
	}
	gate := &httpfront.HA{
		Route: func() (http.Handler, string, error) {
			ns, active, err := route()
			if ns != nil {
				return ns.HTTP, "", nil
			}
			return nil, active.HTTP, err
		},
		Status: func(ctx context.Context) nsapi.NSStatus { return nsStatus(node.Status(ctx), self) },
		Auth:   chain,
	}
	if xl != nil {
		xs := serveNamespaceXRootD(xl, xrdfront.HA{Route: func() (xrootd.Namespace, string, error) {
			ns, active, err := route()
			if ns != nil {
				return ns.XRootD, "", nil
			}
			return nil, active.XRootD, err
		}}, chain, sec, x, log)
		s.onClose(func() { xs.Close() })
	}
	served := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if ns, _, _ := route(); ns != nil {
			return gatherers(proc, ns.Registry).Gather()
		}
		return proc.Gather()
	})
	ready := func() error {
		ns, active, err := route()
		switch {
		case ns != nil:
			return nil
		case active.HTTP != "":
			return fmt.Errorf("a standby: the active namespace server is %s", active.HTTP)
		}
		return err
	}
	srv := serveHTTP(sec.listener(l), httpfront.Health(accessLogged(metrics.Serve(gate, served, allow), log), ready))
	s.onClose(func() { shutdown(srv) })
	done := make(chan struct{})
	go func() { node.Run(ctx); close(done) }()
	// Hand the role over before closing the listeners: clients keep being
	// answered (redirected) while a standby takes over.
	s.onClose(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(2 * c.Meta.Lease):
			log.Warn("handing over did not finish in time; the lease will expire instead")
		}
	})
	sec.endpoints(&ep)
	s.Endpoints, s.URL, s.Meta = ep, self.HTTP, c.Meta.URL
	return nil
}

// nsStatus is the wire form of a replicated namespace's status.
func nsStatus(st ha.Status, self ha.Member) nsapi.NSStatus {
	out := nsapi.NSStatus{Engine: nsapi.NSEngine{Name: st.Engine.Engine, Revision: st.Engine.Revision},
		Active: st.Active.HTTP, Self: self.HTTP, Error: st.Err}
	for _, m := range st.Engine.Members {
		out.Engine.Members = append(out.Engine.Members, nsapi.NSEngineMember{Name: m.Name, Endpoint: m.Endpoint, Healthy: m.Healthy,
			Leader: m.Leader, Version: m.Version, DBSize: m.DBSize, DBInUse: m.DBInUse, Error: m.Err})
	}
	for _, s := range st.Servers {
		out.Servers = append(out.Servers, nsapi.NSServer{ID: s.ID, HTTP: s.HTTP, XRootD: s.XRootD, Role: string(s.Role), Since: s.Since,
			Applied: s.Applied, Committed: s.Committed, Updated: s.Updated, Error: s.Error})
	}
	return out
}

// etcdEndpoints parses etcd://H1:P1,H2:P2[/PREFIX] into client URLs and
// the key prefix of the instance (default "kaon/").
func etcdEndpoints(meta string) (eps []string, prefix string, err error) {
	rest, ok := strings.CutPrefix(meta, "etcd://")
	if !ok {
		return nil, "", fmt.Errorf("--meta %q: want etcd://HOST:PORT,HOST:PORT,...[/PREFIX]", meta)
	}
	hosts, prefix, _ := strings.Cut(rest, "/")
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		prefix = "kaon"
	}
	for _, h := range strings.Split(hosts, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return nil, "", fmt.Errorf("--meta %q: %q is not HOST:PORT", meta, h)
		}
		eps = append(eps, "http://"+h)
	}
	return eps, prefix + "/", nil
}

// OpenEtcd connects to the instance's keys in the cluster m.URL names.
func (m MetaConfig) OpenEtcd() (*etcdkv.Engine, error) {
	eps, prefix, err := etcdEndpoints(m.URL)
	if err != nil {
		return nil, err
	}
	return etcdkv.Open(etcdkv.Options{Endpoints: eps, Prefix: prefix, MaxTxnOps: m.TxnOps, MaxRequestBytes: m.RequestBytes,
		RequestTimeout: max(m.Lease/2, 2*time.Second)})
}

// advertised is the host:port others reach addr (a listener's) at.
func advertised(addr, host string) string {
	h, port, _ := net.SplitHostPort(addr)
	if host == "" {
		host = h
		if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
			host, _ = os.Hostname()
		}
	}
	return net.JoinHostPort(host, port)
}

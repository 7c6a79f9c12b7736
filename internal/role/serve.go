package role

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/httpfront"
	"github.com/kaon-storage/kaon/internal/metrics"
	"github.com/kaon-storage/kaon/internal/role/endpoints"
	"github.com/kaon-storage/kaon/internal/transfer/remote"
)

// Endpoints is DATA/endpoints.json (package endpoints).
type Endpoints = endpoints.Endpoints

// Server is a running role: what it serves, and how it stops.
type Server struct {
	// Endpoints are its listeners' URLs, for DATA/endpoints.json.
	Endpoints Endpoints
	// URL is the role's own URL as others reach it: a storage server's, a
	// replicated namespace server's ("" for an embedded one: Endpoints).
	URL string
	// Meta is a replicated namespace server's store (etcd://...).
	Meta string

	closers []func()
}

// onClose runs f when s closes, before what was registered earlier.
func (s *Server) onClose(f func()) { s.closers = append(s.closers, f) }

// Close stops s: its listeners (a replicated namespace server hands its
// active role over first), its services, its stores.
func (s *Server) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// StartUp starts the all-in-one: a namespace server with an embedded
// store and a storage server with c.FS filesystems under DATA/fs, each
// with its HTTP and root:// endpoints. It returns once the storage
// server registered.
func StartUp(c UpConfig, log *slog.Logger) (_ *Server, err error) {
	log = orDiscard(log)
	s := &Server{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	c.Storage.SyncData = c.Namespace.Sync // in up, --sync covers file data too
	if err := os.MkdirAll(c.Data, 0o755); err != nil {
		return nil, err
	}
	sec, err := c.Security.setup(c.Data, c.Namespace.Auth.Methods, listenHosts(c.HTTP, c.XRootD)...)
	if err != nil {
		return nil, err
	}
	files, err := openNamespaceFiles(c.Data, c.Namespace)
	if err != nil {
		return nil, err
	}
	s.onClose(files.close)
	eng, err := openEmbedded(c.Data, c.Namespace)
	if err != nil {
		return nil, err
	}
	s.onClose(func() { eng.Close() })
	nsL, nsAddr, err := listen(c.HTTP, s)
	if err != nil {
		return nil, fmt.Errorf("namespace http: %w", err)
	}
	host, _, _ := net.SplitHostPort(nsAddr)
	fstL, fstAddr, err := listen(net.JoinHostPort(host, "0"), s)
	if err != nil {
		return nil, fmt.Errorf("storage http: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.onClose(cancel)
	// One registry for the process; the namespace endpoint's /metrics also
	// shows the storage server's (one address for every role), which its
	// own endpoint shows too.
	proc, mgmX, fstX := NewProcessMetrics()
	chain, allow, err := authenticate(ctx, c.Common, c.Namespace.Auth, c.Data, files, sec.scheme()+nsAddr, sec, proc, log)
	if err != nil {
		return nil, err
	}
	var fstMetrics prometheus.Gatherer // set before anything is served
	ns, err := NewNamespace(c.Namespace, NamespaceParts{Store: eng, Key: files.key, Tokens: files.tokens, Audit: files.auditWriter(),
		Auth: chain, Security: sec, MetricsAllow: allow, XRootD: mgmX, Log: log,
		Metrics: prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return gatherers(proc, fstMetrics).Gather() })})
	if err != nil {
		return nil, err
	}
	var paths []string
	for i := 1; i <= c.FS; i++ {
		paths = append(paths, filepath.Join(c.Data, "fs", fmt.Sprintf("%02d", i)))
	}
	// A stable node name: the filesystems are recognized by it (and their
	// paths) even when an identity marker is missing, whatever port the
	// storage server gets this time.
	nodeName, _ := os.Hostname()
	if nodeName == "" {
		nodeName = "localhost"
	}
	policy := &remote.Policy{AllowLoopback: c.Storage.TPC.AllowLoopback}
	policy.AddSelf(nsAddr, fstAddr)
	fst, err := NewStorage(c.Storage, StorageParts{Node: nodeName, URL: sec.scheme() + fstAddr, Key: files.key, Namespace: ns.Service,
		Paths: paths, TPC: policy, Security: sec, MetricsAllow: allow, XRootD: fstX, Metrics: proc, Log: log})
	if err != nil {
		return nil, err
	}
	fstMetrics = fst.Registry
	ep := Endpoints{HTTP: "http://" + nsAddr, FSTHTTP: "http://" + fstAddr}
	if c.XRootD != "" {
		// The storage server's root:// listener is on a free port of the
		// namespace listener's host.
		xl, xaddr, err := listen(c.XRootD, s)
		if err != nil {
			return nil, fmt.Errorf("xrootd: %w", err)
		}
		fxl, fxaddr, err := listen(net.JoinHostPort(host, "0"), s)
		if err != nil {
			return nil, fmt.Errorf("xrootd: %w", err)
		}
		xs := ns.ServeXRootD(xl, sec)
		s.onClose(func() { xs.Close() })
		fxs := fst.ServeXRootD(fxl, xaddr, sec)
		s.onClose(func() { fxs.Close() })
		ep.XRootD, ep.FSTXrd = "root://"+xaddr, "root://"+fxaddr
		policy.AddSelf(xaddr, fxaddr)
	}
	nsSrv := serveHTTP(sec.listener(nsL), ns.Endpoint())
	nsSrv.RegisterOnShutdown(ns.CloseSessionStreams)
	fstSrv := serveHTTP(sec.listener(fstL), fst.HTTP)
	go fst.Server.Run(ctx)
	go ns.Service.Run(ctx)
	s.onClose(func() {
		cancel()
		shutdown(nsSrv, fstSrv)
	})
	select {
	case <-fst.Server.Ready():
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("storage server did not register within 30s")
	}
	sec.endpoints(&ep)
	s.Endpoints = ep
	return s, nil
}

// StartMGM starts a namespace server: with an embedded store, or (Meta)
// one of a replicated instance's, running an etcd member of the
// instance's store itself with Meta.Peers.
func StartMGM(c MGMConfig, log *slog.Logger) (_ *Server, err error) {
	log = orDiscard(log)
	s := &Server{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := os.MkdirAll(c.Data, 0o755); err != nil {
		return nil, err
	}
	sec, err := c.Security.setup(c.Data, c.Namespace.Auth.Methods, listenHosts(c.HTTP, c.XRootD)...)
	if err != nil {
		return nil, err
	}
	if c.Meta.Peers != "" {
		stop, err := c.Meta.startMember(c.Data, log)
		if err != nil {
			return nil, err
		}
		s.onClose(stop)
	}
	files, err := openNamespaceFiles(c.Data, c.Namespace)
	if err != nil {
		return nil, err
	}
	s.onClose(files.close)
	if c.Meta.URL != "" {
		return s, startReplicated(s, c, files, sec, log)
	}
	eng, err := openEmbedded(c.Data, c.Namespace)
	if err != nil {
		return nil, err
	}
	s.onClose(func() { eng.Close() })
	l, addr, err := listen(c.HTTP, s)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.onClose(cancel)
	proc := metrics.NewRegistry()
	chain, allow, err := authenticate(ctx, c.Common, c.Namespace.Auth, c.Data, files, sec.scheme()+addr, sec, proc, log)
	if err != nil {
		return nil, err
	}
	x := newXRootDServers(metrics.RegisterXRootD(proc), "mgm")
	ns, err := NewNamespace(c.Namespace, NamespaceParts{Store: eng, Key: files.key, Tokens: files.tokens, Audit: files.auditWriter(),
		Auth: chain, Security: sec, MetricsAllow: allow, XRootD: x, Metrics: proc, Log: log})
	if err != nil {
		return nil, err
	}
	go ns.Service.Run(ctx)
	ep := Endpoints{HTTP: "http://" + addr}
	if c.XRootD != "" {
		xl, xaddr, err := listen(c.XRootD, s)
		if err != nil {
			return nil, fmt.Errorf("xrootd: %w", err)
		}
		xs := ns.ServeXRootD(xl, sec)
		s.onClose(func() { xs.Close() })
		ep.XRootD = "root://" + xaddr
	}
	srv := serveHTTP(sec.listener(l), ns.Endpoint())
	srv.RegisterOnShutdown(ns.CloseSessionStreams)
	s.onClose(func() { shutdown(srv) })
	sec.endpoints(&ep)
	s.Endpoints = ep
	return s, nil
}

// StartFST starts a storage server registering with the namespace
// server(s) of c.Join; it returns once it registered.
func StartFST(c FSTConfig, log *slog.Logger) (_ *Server, err error) {
	log = orDiscard(log)
	s := &Server{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	key, err := capability.LoadOrCreateKey(c.Join.Key)
	if err != nil {
		return nil, err
	}
	sec, err := c.Security.setup(c.Data, "", listenHosts(c.HTTP, c.XRootD)...)
	if err != nil {
		return nil, err
	}
	l, addr, err := listen(c.HTTP, s)
	if err != nil {
		return nil, err
	}
	if c.Join.Node == "" {
		host, _ := os.Hostname()
		_, port, _ := net.SplitHostPort(addr)
		c.Join.Node = host + ":" + port
	}
	mgms := mgmURLs(c.Join.MGM)
	mgm := &cluster.Client{Base: strings.Join(mgms, ","), Secret: key.Internal(), HTTP: sec.httpClient()}
	allow, err := c.Common.MetricsAllow("", auth.Chain{auth.HostRoot{}})
	if err != nil {
		return nil, err
	}
	policy := &remote.Policy{AllowLoopback: c.Storage.TPC.AllowLoopback}
	policy.AddSelf(append(hostsOf(mgms), addr, c.Join.MGMXRootD)...)
	proc := metrics.NewRegistry()
	x := newXRootDServers(metrics.RegisterXRootD(proc), "fst")
	fst, err := NewStorage(c.Storage, StorageParts{Node: c.Join.Node, URL: sec.scheme() + addr, Key: key, Namespace: mgm,
		Paths: c.Join.FS, TPC: policy, Security: sec, MetricsAllow: allow, XRootD: x, Metrics: proc, Log: log})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.onClose(cancel)
	ep := Endpoints{FSTHTTP: "http://" + addr}
	if c.XRootD != "" {
		xl, xaddr, err := listen(c.XRootD, s)
		if err != nil {
			return nil, fmt.Errorf("xrootd: %w", err)
		}
		xs := fst.ServeXRootD(xl, c.Join.MGMXRootD, sec)
		s.onClose(func() { xs.Close() })
		ep.FSTXrd = "root://" + xaddr
		policy.AddSelf(xaddr)
	}
	srv := serveHTTP(sec.listener(l), fst.HTTP)
	go fst.Server.Run(ctx)
	s.onClose(func() {
		cancel()
		shutdown(srv)
	})
	<-fst.Server.Ready()
	sec.endpoints(&ep)
	s.Endpoints, s.URL = ep, sec.scheme()+addr
	return s, nil
}

// authenticate names this instance's token issuer after the URL its
// namespace endpoint got, and builds the authenticators of --auth (their
// refusals counted on reg) and the check of who may read /metrics.
func authenticate(ctx context.Context, c Common, a AuthConfig, dir string, files *namespaceFiles, endpoint string, sec *Security, reg prometheus.Registerer, log *slog.Logger) (auth.Chain, func(*http.Request) error, error) {
	files.tokens.URL = a.issuerURL(endpoint)
	chain, err := a.chain(ctx, dir, files.tokens, files.key, sec, log)
	if err != nil {
		return nil, nil, err
	}
	refused := &auth.Refusals{Name: methodName}
	chain = append(auth.Chain{refused}, chain...)
	allow, err := c.MetricsAllow(a.Methods, chain)
	if err != nil {
		return nil, nil, err
	}
	methods := strings.Split(strings.ReplaceAll(a.Methods, " ", ""), ",")
	if !slices.Contains(methods, "unix") {
		methods = append(methods, "none")
	}
	metrics.RegisterRefusals(reg, refused, methods...)
	return chain, allow, nil
}

// orDiscard is log, or a logger discarding everything for nil.
func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// listen opens addr (port 0 picks a free port), closed with s unless
// served before.
func listen(addr string, s *Server) (net.Listener, string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	s.onClose(func() { l.Close() })
	return l, l.Addr().String(), nil
}

// HTTPServer is the HTTP server every endpoint of a role is served by (a
// test may serve it through httptest). It speaks HTTP/1.1 and HTTP/2:
// over TLS when a client offers only h2 (ALPN prefers http/1.1, so
// curl, davix and gfal keep HTTP/1.1), in plaintext with prior knowledge
// (h2c); the session channel's clients before the WebSocket need HTTP/2.
func HTTPServer(h http.Handler) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	// Frames of HTTP/2's default size: Go's client keeps a buffer of the
	// size the server takes for every stream it sends a body on (512 KiB
	// with Go's server default), which a client of many sessions pays.
	return &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, ConnContext: httpfront.ConnContext, Protocols: &p,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 100000, MaxReadFrameSize: 16 << 10}}
}

func serveHTTP(l net.Listener, h http.Handler) *http.Server {
	srv := HTTPServer(h)
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("http server stopped", "addr", l.Addr(), "err", err)
		}
	}()
	return srv
}

// shutdown stops HTTP servers gracefully within 10 s.
func shutdown(srvs ...*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range srvs {
		s.Shutdown(ctx)
	}
}

// mgmURLs splits a storage server's --mgm list.
func mgmURLs(list string) []string {
	var out []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// hostsOf is the host:port of each URL, for the copy policy.
func hostsOf(urls []string) []string {
	var out []string
	for _, u := range urls {
		if pu, err := url.Parse(u); err == nil && pu.Host != "" {
			out = append(out, pu.Host)
		}
	}
	return out
}

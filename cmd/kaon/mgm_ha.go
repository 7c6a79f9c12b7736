package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/bench"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/ha"
	"github.com/kaon-storage/kaon/internal/httpfront"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/kv/etcdkv"
	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/nsserver"
	"github.com/kaon-storage/kaon/internal/xrdfront"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// MetaConfig says where the namespace lives: the embedded Pebble store
// (default) or a shared etcd cluster several namespace servers use, one
// active and the others standbys (internal/ha).
type MetaConfig struct {
	URL          string        // "" or etcd://H1:P1,H2:P2,H3:P3[/PREFIX]
	Lease        time.Duration // how long a dead active server keeps its role
	TxnOps       int           // the cluster's --max-txn-ops
	RequestBytes int           // the cluster's --max-request-bytes
	Advertise    string        // host others reach this server at
	KeepHistory  time.Duration // history of the store the active server keeps (compacts the rest)
	Peers        string        // etcd members run inside the namespace servers (meta_peers.go)
	Name         string        // this server's member of Peers
}

func (m *MetaConfig) bind(fl *flag.FlagSet) {
	fl.StringVar(&m.URL, "meta", "", "namespace store: empty for the embedded one (DATA/meta), or etcd://H1:P1,H2:P2,H3:P3[/PREFIX] shared by the namespace servers of one instance (one active, the others standbys)")
	fl.DurationVar(&m.Lease, "meta-lease", ha.DefaultLease, "with --meta etcd: how long an active server that died or was cut off keeps its role before a standby takes over")
	fl.IntVar(&m.TxnOps, "meta-txn-ops", 128, "with --meta etcd: the cluster's --max-txn-ops (writes one commit may hold; raise both for faster creates)")
	fl.IntVar(&m.RequestBytes, "meta-request-bytes", 3<<19, "with --meta etcd: the cluster's --max-request-bytes")
	fl.DurationVar(&m.KeepHistory, "meta-history", 5*time.Minute, "with --meta etcd: the active server compacts etcd's history older than this (0: leave it to etcd's --auto-compaction-*)")
	fl.StringVar(&m.Peers, "meta-peers", "", "run an etcd member inside this server: NAME=http://HOST:PEERPORT of every namespace server of the instance, comma-separated (clients on PEERPORT-1, as etcd's 2380/2379); the members are the instance's store (no --meta then)")
	fl.StringVar(&m.Name, "meta-name", "", "with --meta-peers: this server's member (default: the host name)")
	fl.StringVar(&m.Advertise, "advertise", "", "with --meta etcd: host name clients and the other servers reach this server at (default: the --http host, or the host name when it listens on all addresses)")
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

// openEtcd connects to the instance's keys in the cluster.
func (m MetaConfig) openEtcd() (*etcdkv.Engine, error) {
	eps, prefix, err := etcdEndpoints(m.URL)
	if err != nil {
		return nil, err
	}
	return etcdkv.Open(etcdkv.Options{Endpoints: eps, Prefix: prefix, MaxTxnOps: m.TxnOps, MaxRequestBytes: m.RequestBytes,
		RequestTimeout: max(m.Lease/2, 2*time.Second)})
}

// loadKey is the capability key: --key (which must exist: every server of
// an instance shares one) or DATA/keys/capability.key, created if missing.
func loadKey(data, file string) (*capability.Key, error) {
	if file != "" {
		if _, err := os.Stat(file); err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		return capability.LoadOrCreateKey(file)
	}
	if err := os.MkdirAll(filepath.Join(data, "keys"), 0o700); err != nil {
		return nil, err
	}
	return capability.LoadOrCreateKey(filepath.Join(data, "keys", "capability.key"))
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

// incarnation is what the front ends serve while this server is active.
type incarnation struct {
	http http.Handler
	xrd  xrootd.Namespace
	srv  *nsserver.Server
}

// runMGMHA runs a namespace server of a replicated instance.
func runMGMHA(c MGMConfig, sec *security, log *slog.Logger) int {
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "kaon mgm: %s%v\n", what, err)
		return 1
	}
	key, err := loadKey(c.Data, c.Namespace.KeyFile)
	if err != nil {
		return fail("", err)
	}
	// The instance's own token keys: DATA/keys/token-keys.json, as on any
	// namespace server (servers that issue tokens get the first one's
	// copy, like the capability key, and the same --issuer-url).
	tokens, err := c.Namespace.Auth.openIssuer(c.Data)
	if err != nil {
		return fail("", err)
	}
	var audit io.Writer
	if af, err := openAudit(c.Data, c.Namespace.AuditLog); err != nil {
		return fail("", err)
	} else if af != nil {
		defer af.Close()
		audit = af
	}
	// Wait for the store: its members may start after this server (a
	// whole instance restarting, or members inside the servers).
	remote, err := c.Meta.openEtcd()
	for waited := false; kerr.Is(err, kerr.Unavailable); remote, err = c.Meta.openEtcd() {
		if !waited {
			log.Warn("waiting for the namespace store", "meta", c.Meta.URL, "err", err)
			waited = true
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return fail("namespace store: ", err)
	}
	defer remote.Close()
	local, err := pebblekv.Open(filepath.Join(c.Data, "meta-replica"), pebblekv.Options{NoSync: true, CacheBytes: int64(c.Namespace.MetaCacheMB) << 20})
	if err != nil {
		return fail("namespace replica: ", err)
	}
	defer local.Close()

	l, addr, err := listen(c.HTTP)
	if err != nil {
		return fail("", err)
	}
	self := ha.Member{ID: advertised(addr, c.Meta.Advertise)}
	self.HTTP = sec.scheme() + self.ID
	ep := Endpoints{HTTP: "http://" + addr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	authc := c.Namespace.Auth.withSecurity(sec)
	tokens.URL = authc.issuerURL(self.HTTP)
	chain, err := authc.chain(ctx, c.Data, tokens, log)
	if err != nil {
		return fail("", err)
	}
	allow, err := c.Common.metricsAllow(c.Namespace.Auth.Methods, chain)
	if err != nil {
		return fail("", err)
	}
	var xl net.Listener
	if c.XRootD != "" {
		var xaddr string
		if xl, xaddr, err = listen(c.XRootD); err != nil {
			return fail("xrootd: ", err)
		}
		self.XRootD = advertised(xaddr, c.Meta.Advertise)
		ep.XRootD = "root://" + xaddr
	}
	var node *ha.Node
	node, err = ha.New(ha.Config{Remote: remote, Local: local, Self: self, Lease: c.Meta.Lease, KeepHistory: c.Meta.KeepHistory, Logger: log,
		Serve: func(ctx context.Context, store kv.Store, handed []byte) (any, error) {
			cfg := c.Namespace.serverConfig(store, key, tokens, audit, sec, log)
			cfg.StepDown = node.StepDown
			if handed != nil {
				var in namespace.InFlight
				if err := json.Unmarshal(handed, &in); err != nil {
					log.Warn("what the previous active server handed over is unreadable (its uploads in flight are aborted)", "err", err)
				} else {
					cfg.Inherit = &in
				}
			}
			srv, err := nsserver.New(cfg)
			if err != nil {
				return nil, err
			}
			go srv.Run(ctx)
			front := &httpfront.Namespace{NS: srv, Key: key, Log: log, Auth: chain}
			m := newNamespaceMetrics(srv)
			srv.ReportMovement(m.Move)
			return &incarnation{http: m.serve(front, allow), xrd: xrdfront.Namespace{NS: srv}, srv: srv}, nil
		},
		HandOver: func(svc any) []byte {
			b, _ := json.Marshal(svc.(*incarnation).srv.HandOver())
			return b
		}})
	if err != nil {
		return fail("", err)
	}
	route := func() (*incarnation, ha.Member, error) {
		v := node.View()
		if inc, ok := v.Service.(*incarnation); ok && v.Role == ha.Active {
			return inc, v.Active, nil
		}
		return nil, v.Active, v.Err
	}
	gate := &httpfront.HA{
		Route: func() (http.Handler, string, error) {
			inc, active, err := route()
			if inc != nil {
				return inc.http, "", nil
			}
			return nil, active.HTTP, err
		},
		Status: func(ctx context.Context) nsapi.NSStatus { return nsStatus(node.Status(ctx), self) },
		Auth:   chain,
	}
	logged := httpfront.AccessLog(gate, log)
	srv := serveHTTP(sec.listener(l), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/internal/v1/") {
			gate.ServeHTTP(w, r) // heartbeats every second: not access-logged
			return
		}
		logged.ServeHTTP(w, r)
	}))
	if xl != nil {
		xcfg := xrootd.Config{IdentifyConn: xrdfront.Identifier(chain), Logger: log.With("role", "xrootd-mgm"),
			Namespace: xrdfront.HA{Route: func() (xrootd.Namespace, string, error) {
				inc, active, err := route()
				if inc != nil {
					return inc.xrd, "", nil
				}
				return nil, active.XRootD, err
			}}}
		sec.xrootd(&xcfg, chain)
		xs := xrootd.NewServer(xcfg)
		noteXRootD("mgm", xs)
		go xs.Serve(xl)
		defer xs.Close()
	}
	done := make(chan struct{})
	go func() { node.Run(ctx); close(done) }()
	sec.endpoints(&ep)
	if err := writeEndpoints(c.Data, ep); err != nil {
		cancel()
		return fail("", err)
	}
	fmt.Printf("namespace server %s of the instance in %s (key: %s)\n", self.HTTP, c.Meta.URL, keyPath(c))
	printTLS(ep)
	waitSignal()
	// Hand the role over before closing the listeners: clients keep being
	// answered (redirected) while a standby takes over.
	cancel()
	select {
	case <-done:
	case <-time.After(2 * c.Meta.Lease):
		log.Warn("handing over did not finish in time; the lease will expire instead")
	}
	shutdown(srv)
	return 0
}

func keyPath(c MGMConfig) string {
	if c.Namespace.KeyFile != "" {
		return c.Namespace.KeyFile
	}
	return filepath.Join(c.Data, "keys", "capability.key")
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

// benchActive makes this process the active namespace server of the
// instance in meta (its replica in dir) and returns its store, for `bench
// ns --meta`: the namespace runs over the same pipeline as in kaon mgm.
// Its report is what etcd holds per file: the history is compacted and the
// bytes in use compared with those before the run.
func benchActive(meta MetaConfig, dir string, files int) (bench.NSStore, error) {
	remote, err := meta.openEtcd()
	if err != nil {
		return bench.NSStore{}, err
	}
	local, err := pebblekv.Open(filepath.Join(dir, "replica"), pebblekv.Options{NoSync: true})
	if err != nil {
		remote.Close()
		return bench.NSStore{}, err
	}
	node, err := ha.New(ha.Config{Remote: remote, Local: local, Lease: meta.Lease, KeepHistory: meta.KeepHistory,
		Self:   ha.Member{ID: "bench", HTTP: "http://bench"},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Serve:  func(_ context.Context, s kv.Store, _ []byte) (any, error) { return s, nil }})
	if err != nil {
		remote.Close()
		local.Close()
		return bench.NSStore{}, err
	}
	inUse := func() (int64, error) {
		st, err := remote.Status(context.Background())
		if err != nil {
			return 0, err
		}
		if err := remote.Compact(context.Background(), st.Revision); err != nil {
			return 0, err
		}
		if st, err = remote.Status(context.Background()); err != nil {
			return 0, err
		}
		var use int64
		for _, m := range st.Members {
			use = max(use, m.DBInUse)
		}
		return use, nil
	}
	before, err := inUse()
	if err != nil {
		remote.Close()
		local.Close()
		return bench.NSStore{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { node.Run(ctx); close(done) }()
	closeAll := func() {
		cancel()
		<-done
		local.Close()
		remote.Close()
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if p, ok := node.View().Service.(*ha.Pipeline); ok {
			return bench.NSStore{Store: p, Name: "etcd " + meta.URL,
				Close: func() {
					st := p.Stats()
					fmt.Fprintf(os.Stderr, "pipeline: %d batches committed in %d groups (%.1f per group)\n", st.Batches, st.Groups, float64(st.Batches)/float64(max(st.Groups, 1)))
					closeAll()
				},
				Report: func() []string {
					after, err := inUse()
					if err != nil {
						return []string{"etcd size: " + err.Error()}
					}
					return []string{fmt.Sprintf("etcd database in use after compaction: %.1f MiB more than before the run, %.0f bytes per file",
						float64(after-before)/(1<<20), float64(after-before)/float64(max(files, 1)))}
				}}, nil
		}
		if time.Now().After(deadline) {
			closeAll()
			return bench.NSStore{}, fmt.Errorf("not the active namespace server of %s within a minute (another one is active?)", meta.URL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

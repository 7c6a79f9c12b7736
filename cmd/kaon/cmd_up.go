package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/httpfront"
	"github.com/kaon-storage/kaon/internal/transfer/remote"
)

func init() {
	register(command{name: "up", short: "run everything in one process (namespace + storage servers)", run: runUp})
	register(command{name: "mgm", short: "run the namespace server alone", run: runMGM})
	register(command{name: "fst", short: "run a storage server alone (registers with --mgm)", run: runFST})
}

// UpConfig is the all-in-one: the namespace and storage roles' settings,
// and how many filesystems to create.
type UpConfig struct {
	Common
	Listen
	Namespace NamespaceConfig
	Storage   StorageConfig
	Security  SecurityConfig
	FS        int
}

func runUp(args []string) int {
	var c UpConfig
	fl := flag.NewFlagSet("kaon up", flag.ExitOnError)
	c.Common.bind(fl)
	c.Listen.bind(fl, defaultDataDir(), "127.0.0.1:8000", "127.0.0.1:1094", "data directory (namespace, filesystems, keys)")
	c.Namespace.bind(fl)
	c.Storage.bind(fl, false)
	c.Security.bind(fl)
	fl.IntVar(&c.FS, "fs", 6, "number of storage filesystems to create under DATA/fs")
	if err := parseRole(fl, args); err != nil {
		fmt.Fprintln(os.Stderr, "kaon up:", err)
		return 2
	}
	c.Storage.SyncData = c.Namespace.Sync
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "kaon up: %s%v\n", what, err)
		return 1
	}
	log := c.Common.start()
	if err := os.MkdirAll(c.Data, 0o755); err != nil {
		return fail("", err)
	}
	sec, err := c.Security.setup(c.Data, c.Namespace.Auth.Methods, listenHosts(c.HTTP, c.XRootD)...)
	if err != nil {
		return fail("", err)
	}
	role, err := openNamespace(c.Data, c.Namespace, sec, log)
	if err != nil {
		return fail("", err)
	}
	defer role.Close()
	nsL, nsAddr, err := listen(c.HTTP)
	if err != nil {
		return fail("namespace http: ", err)
	}
	host, _, _ := net.SplitHostPort(nsAddr)
	fstL, fstAddr, err := listen(net.JoinHostPort(host, "0"))
	if err != nil {
		return fail("storage http: ", err)
	}
	var paths []string
	for i := 1; i <= c.FS; i++ {
		paths = append(paths, filepath.Join(c.Data, "fs", fmt.Sprintf("%02d", i)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ep := Endpoints{HTTP: "http://" + nsAddr, FSTHTTP: "http://" + fstAddr}
	// A stable node name: the filesystems are recognized by it (and their
	// paths) even when an identity marker is missing, whatever port the
	// storage server gets this time.
	nodeName, _ := os.Hostname()
	if nodeName == "" {
		nodeName = "localhost"
	}
	fst, err := newStorage(nodeName, sec.scheme()+fstAddr, role.key, role.srv, paths, c.Storage, sec, log)
	if err != nil {
		return fail("", err)
	}
	if err := role.startAuth(ctx, c.Data, sec.scheme()+nsAddr, c.Namespace.Auth.withSecurity(sec), log); err != nil {
		return fail("", err)
	}
	policy := &remote.Policy{AllowLoopback: c.Storage.TPC.AllowLoopback}
	policy.AddSelf(nsAddr, fstAddr)
	xrd, err := startXRootD(c.XRootD, host, role.srv, role.auth, fst, policy, sec, &ep, log)
	if err != nil {
		return fail("xrootd: ", err)
	}
	defer xrd()
	policy.AddSelf(hostPort(ep.XRootD), hostPort(ep.FSTXrd))
	allow, err := c.Common.metricsAllow(c.Namespace.Auth.Methods, role.auth)
	if err != nil {
		return fail("", err)
	}
	nsSrv := serveHTTP(sec.listener(nsL), role.handler(log, allow))
	fstSrv := serveHTTP(sec.listener(fstL), storageHandler(fst, httpfront.Storage(fst, role.key, c.Storage.TPC.httpConfig(policy, sec), log), allow))
	go fst.Run(ctx)
	go role.srv.Run(ctx)
	select {
	case <-fst.Ready():
	case <-time.After(30 * time.Second):
		return fail("", fmt.Errorf("storage server did not register within 30s"))
	}
	sec.endpoints(&ep)
	if err := writeEndpoints(c.Data, ep); err != nil {
		return fail("", err)
	}
	printBanner(c.Data, ep, c.FS)
	waitSignal()
	log.Info("shutting down")
	cancel()
	shutdown(nsSrv, fstSrv)
	os.Remove(filepath.Join(c.Data, "endpoints.json"))
	return 0
}

func printBanner(data string, ep Endpoints, nfs int) {
	fmt.Printf(`Kaon is up: namespace server + storage server with %d filesystems
  data:      %s
  http/dav:  %s
`, nfs, data, ep.HTTP)
	if ep.XRootD != "" {
		fmt.Printf("  root://:  %s\n", ep.XRootD)
	}
	printTLS(ep)
	fmt.Printf(`
Try:
  curl -L -T /etc/hosts %[1]s/hosts.txt
  curl -L %[1]s/hosts.txt
  curl -I -H 'Want-Digest: adler32' %[1]s/hosts.txt
  export KAON_URL=%[1]s
  kaon ls -l /
  kaon mkdir /ec && kaon attr set /ec sys.forced.layout=ec:4+2
  kaon fs ls
`, ep.HTTP)
	if ep.XRootD != "" {
		fmt.Printf("  xrdcp /etc/hosts %s//hosts2.txt\n", ep.XRootD)
	}
}

// MGMConfig is the namespace server role.
type MGMConfig struct {
	Common
	Listen
	Namespace NamespaceConfig
	Security  SecurityConfig
	Meta      MetaConfig
}

func runMGM(args []string) int {
	var c MGMConfig
	fl := flag.NewFlagSet("kaon mgm", flag.ExitOnError)
	c.Common.bind(fl)
	c.Listen.bind(fl, defaultDataDir(), "127.0.0.1:8000", "", "namespace data directory")
	c.Namespace.bind(fl)
	c.Security.bind(fl)
	c.Meta.bind(fl)
	fl.StringVar(&c.Namespace.KeyFile, "key", "", "capability key file shared by the namespace servers of an instance (default: DATA/keys/capability.key, created if missing)")
	if err := parseRole(fl, args); err != nil {
		fmt.Fprintln(os.Stderr, "kaon mgm:", err)
		return 2
	}
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "kaon mgm: %s%v\n", what, err)
		return 1
	}
	log := c.Common.start()
	if err := os.MkdirAll(c.Data, 0o755); err != nil {
		return fail("", err)
	}
	sec, err := c.Security.setup(c.Data, c.Namespace.Auth.Methods, listenHosts(c.HTTP, c.XRootD)...)
	if err != nil {
		return fail("", err)
	}
	if c.Meta.Peers != "" {
		// Both ends of these etcd members are ours: group commits as large
		// as the tests' cluster takes, unless the flags say otherwise.
		set := map[string]bool{}
		fl.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["meta-txn-ops"] {
			c.Meta.TxnOps = 4096
		}
		if !set["meta-request-bytes"] {
			c.Meta.RequestBytes = 8 << 20
		}
		stop, err := c.Meta.startMember(c.Data, log)
		if err != nil {
			return fail("", err)
		}
		defer stop()
	}
	if c.Meta.URL != "" {
		return runMGMHA(c, sec, log)
	}
	role, err := openNamespace(c.Data, c.Namespace, sec, log)
	if err != nil {
		return fail("", err)
	}
	defer role.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go role.srv.Run(ctx)
	l, addr, err := listen(c.HTTP)
	if err != nil {
		return fail("", err)
	}
	host, _, _ := net.SplitHostPort(addr)
	ep := Endpoints{HTTP: "http://" + addr}
	if err := role.startAuth(ctx, c.Data, sec.scheme()+addr, c.Namespace.Auth.withSecurity(sec), log); err != nil {
		return fail("", err)
	}
	stop, err := startXRootD(c.XRootD, host, role.srv, role.auth, nil, nil, sec, &ep, log)
	if err != nil {
		return fail("xrootd: ", err)
	}
	defer stop()
	allow, err := c.Common.metricsAllow(c.Namespace.Auth.Methods, role.auth)
	if err != nil {
		return fail("", err)
	}
	srv := serveHTTP(sec.listener(l), role.handler(log, allow))
	sec.endpoints(&ep)
	if err := writeEndpoints(c.Data, ep); err != nil {
		return fail("", err)
	}
	fmt.Printf("namespace server on %s (key: %s)\n", ep.HTTP, keyPath(c))
	printTLS(ep)
	waitSignal()
	shutdown(srv)
	return 0
}

// FSTConfig is the storage server role.
type FSTConfig struct {
	Common
	Listen
	Storage  StorageConfig
	Join     JoinConfig
	Security SecurityConfig
}

func runFST(args []string) int {
	var c FSTConfig
	fl := flag.NewFlagSet("kaon fst", flag.ExitOnError)
	c.Common.bind(fl)
	c.Listen.bind(fl, "", "127.0.0.1:0", "", "directory for endpoints.json (optional)")
	c.Storage.bind(fl, true)
	c.Join.bind(fl)
	c.Security.bind(fl)
	if err := parseRole(fl, args); err != nil {
		fmt.Fprintln(os.Stderr, "kaon fst:", err)
		return 2
	}
	if c.Join.MGM == "" || c.Join.Key == "" {
		fmt.Fprintln(os.Stderr, "kaon fst: --mgm and --key are required")
		return 2
	}
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "kaon fst: %s%v\n", what, err)
		return 1
	}
	log := c.Common.start()
	key, err := capability.LoadOrCreateKey(c.Join.Key)
	if err != nil {
		return fail("", err)
	}
	sec, err := c.Security.setup(c.Data, "", listenHosts(c.HTTP, c.XRootD)...)
	if err != nil {
		return fail("", err)
	}
	l, addr, err := listen(c.HTTP)
	if err != nil {
		return fail("", err)
	}
	if c.Join.Node == "" {
		host, _ := os.Hostname()
		_, port, _ := net.SplitHostPort(addr)
		c.Join.Node = host + ":" + port
	}
	mgms := mgmURLs(c.Join.MGM)
	mgm := &cluster.Client{Base: strings.Join(mgms, ","), Secret: key.Internal(), HTTP: sec.httpClient()}
	fst, err := newStorage(c.Join.Node, sec.scheme()+addr, key, mgm, c.Join.FS, c.Storage, sec, log)
	if err != nil {
		return fail("", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ep := Endpoints{FSTHTTP: "http://" + addr}
	policy := &remote.Policy{AllowLoopback: c.Storage.TPC.AllowLoopback}
	policy.AddSelf(append(hostsOf(mgms), addr, c.Join.MGMXRootD)...)
	stop, err := startFSTXRootD(c.XRootD, c.Join.MGMXRootD, fst, policy, sec, &ep, log)
	if err != nil {
		return fail("xrootd: ", err)
	}
	defer stop()
	policy.AddSelf(hostPort(ep.FSTXrd))
	allow, err := c.Common.metricsAllow("", auth.Chain{auth.HostRoot{}})
	if err != nil {
		return fail("", err)
	}
	srv := serveHTTP(sec.listener(l), storageHandler(fst, httpfront.Storage(fst, key, c.Storage.TPC.httpConfig(policy, sec), log), allow))
	go fst.Run(ctx)
	<-fst.Ready()
	sec.endpoints(&ep)
	if c.Data != "" {
		_ = os.MkdirAll(c.Data, 0o755)
		if err := writeEndpoints(c.Data, ep); err != nil {
			fmt.Fprintln(os.Stderr, "kaon fst:", err)
		}
	}
	fmt.Printf("storage server on %s%s registered with %s\n", sec.scheme(), addr, c.Join.MGM)
	waitSignal()
	cancel()
	shutdown(srv)
	return 0
}

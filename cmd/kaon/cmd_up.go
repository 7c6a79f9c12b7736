package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
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

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/httpfront"
	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsserver"
	"github.com/kaon-storage/kaon/internal/storage"
)

func init() {
	register(command{name: "up", short: "run everything in one process (namespace + storage servers)", run: runUp})
	register(command{name: "mgm", short: "run the namespace server alone", run: runMGM})
	register(command{name: "fst", short: "run a storage server alone (registers with --mgm)", run: runFST})
}

// Endpoints is written to DIR/endpoints.json once a process serves.
type Endpoints struct {
	HTTP    string `json:"http"`
	XRootD  string `json:"xrootd,omitempty"`
	FSTHTTP string `json:"fst_http,omitempty"`
	FSTXrd  string `json:"fst_xrootd,omitempty"`
	PID     int    `json:"pid"`
}

func defaultDataDir() string {
	if d := os.Getenv("KAON_DATA"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".kaon")
}

func newLogger(verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// posixStores opens every filesystem of a storage server as a directory
// written with O_DIRECT; sync fsyncs stripes before commit.
func posixStores(sync bool) func(string) backend.Store {
	return func(root string) backend.Store { return posix.New(root, posix.Options{Direct: true, Sync: sync}) }
}

// storageHandler serves a storage server's HTTP listener: the client data
// endpoint (access-logged) and the internal storage RPC (not: an erasure-
// coded read across servers makes one stripe request per frame; refusals
// are logged).
func storageHandler(fst *storage.Server, key *capability.Key, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(httpfront.DataPath, httpfront.AccessLog(httpfront.Data(fst, log), log))
	internal := cluster.StorageHandler(fst, key.Internal(), log)
	mux.Handle(cluster.StripePath, internal)
	mux.Handle(cluster.ReadFilePath, internal)
	return mux
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

func writeEndpoints(dir string, e Endpoints) error {
	e.PID = os.Getpid()
	b, _ := json.MarshalIndent(e, "", "  ")
	tmp := filepath.Join(dir, ".endpoints.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "endpoints.json"))
}

// nsRole is a namespace server with its store.
type nsRole struct {
	eng *pebblekv.Engine
	srv *nsserver.Server
	key *capability.Key
}

// handler is the namespace endpoint (WebDAV, admin API, internal protocol).
func (r *nsRole) handler(log *slog.Logger) http.Handler {
	return &httpfront.Namespace{NS: r.srv, Key: r.key, Log: log}
}

// metaCacheMB sizes the namespace engine's block cache (flag --meta-cache).
var metaCacheMB = pebblekv.DefaultCacheBytes >> 20

// nsFlags are the namespace server's settings shared by up and mgm.
type nsFlags struct {
	sync            *bool
	capTTL          *time.Duration
	recycleLifetime *time.Duration
	recycleSize     *int64
	auditLog        *string
}

func bindNSFlags(fl *flag.FlagSet) nsFlags {
	return nsFlags{
		sync:            fl.Bool("sync", true, "make namespace commits and file data durable before acknowledging (false: benchmarks only)"),
		capTTL:          fl.Duration("cap-ttl", 5*time.Minute, "lifetime of redirect capabilities"),
		recycleLifetime: fl.Duration("recycle-lifetime", 30*24*time.Hour, "recycle bin entries older than this are purged (0 = kept)"),
		recycleSize:     fl.Int64("recycle-size", 0, "the oldest recycle bin entries are purged while it holds more bytes than this (0 = no limit)"),
		auditLog:        fl.String("audit-log", "DATA/audit.log", "audit log file, one JSON line per mutation and refused request (empty = off)"),
	}
}

func openNamespace(dir string, f nsFlags, log *slog.Logger) (*nsRole, error) {
	if err := os.MkdirAll(filepath.Join(dir, "keys"), 0o700); err != nil {
		return nil, err
	}
	key, err := capability.LoadOrCreateKey(filepath.Join(dir, "keys", "capability.key"))
	if err != nil {
		return nil, err
	}
	var audit io.Writer
	if p := strings.Replace(*f.auditLog, "DATA", dir, 1); p != "" {
		af, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		audit = af
	}
	eng, err := pebblekv.Open(filepath.Join(dir, "meta"), pebblekv.Options{CacheBytes: int64(metaCacheMB) << 20})
	if err != nil {
		return nil, fmt.Errorf("open namespace store in %s: %w", dir, err)
	}
	srv, err := nsserver.New(nsserver.Config{Engine: eng, Sync: *f.sync, Key: key, CapabilityTTL: *f.capTTL, Logger: log,
		RecycleLifetime: *f.recycleLifetime, RecycleMaxBytes: *f.recycleSize, Audit: audit,
		Data: cluster.NewStorageClient(key.Internal()), PhysName: func(fs namespace.Filesystem, fid uint64) string { return posix.PhysPath(fs.Path, fid) }})
	if err != nil {
		eng.Close()
		return nil, err
	}
	return &nsRole{eng: eng, srv: srv, key: key}, nil
}

// startPprof serves net/http/pprof on its own listener, never on a public
// endpoint.
func startPprof(addr string) {
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go http.ListenAndServe(addr, mux)
}

func waitSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	<-ch
}

func runUp(args []string) int {
	fl := flag.NewFlagSet("kaon up", flag.ExitOnError)
	data := fl.String("data", defaultDataDir(), "data directory (namespace, filesystems, keys)")
	httpAddr := fl.String("http", "127.0.0.1:8000", "namespace HTTP/WebDAV listen address (port 0 = free port)")
	xrdAddr := fl.String("xrootd", "127.0.0.1:1094", "namespace root:// listen address (empty = off, port 0 = free port)")
	nfs := fl.Int("fs", 6, "number of storage filesystems to create under DATA/fs")
	nsf := bindNSFlags(fl)
	sync := nsf.sync
	verbose := fl.Bool("v", false, "debug logging")
	pprofAddr := fl.String("pprof", "", "serve Go profiling on this address (e.g. 127.0.0.1:6060)")
	fl.IntVar(&metaCacheMB, "meta-cache", metaCacheMB, "namespace engine block cache in MiB")
	streamMB := fl.Int64("stream-memory", storage.DefaultStreamMemory>>20, "MiB of buffers all client streams of the storage server may hold together (more streams wait)")
	fl.Parse(args)
	startPprof(*pprofAddr)
	log := newLogger(*verbose)
	if err := os.MkdirAll(*data, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "kaon up:", err)
		return 1
	}
	role, err := openNamespace(*data, nsf, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon up:", err)
		return 1
	}
	defer role.eng.Close()
	nsL, nsAddr, err := listen(*httpAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon up: namespace http:", err)
		return 1
	}
	host, _, _ := net.SplitHostPort(nsAddr)
	fstL, fstAddr, err := listen(net.JoinHostPort(host, "0"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon up: storage http:", err)
		return 1
	}
	var paths []string
	for i := 1; i <= *nfs; i++ {
		paths = append(paths, filepath.Join(*data, "fs", fmt.Sprintf("%02d", i)))
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
	fst, err := storage.New(storage.Config{Node: nodeName, Addr: "http://" + fstAddr, Key: role.key,
		Namespace: role.srv, Paths: paths, Store: posixStores(*sync), Peers: cluster.NewStorageClient(role.key.Internal()),
		StreamMemory: *streamMB << 20, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon up:", err)
		return 1
	}
	xrd, err := startXRootD(*xrdAddr, host, role.srv, fst, &ep, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon up: xrootd:", err)
		return 1
	}
	defer xrd()
	nsSrv := serveHTTP(nsL, role.handler(log))
	fstSrv := serveHTTP(fstL, storageHandler(fst, role.key, log))
	go fst.Run(ctx)
	go role.srv.Run(ctx)
	select {
	case <-fst.Ready():
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "kaon up: storage server did not register within 30s")
		return 1
	}
	if err := writeEndpoints(*data, ep); err != nil {
		fmt.Fprintln(os.Stderr, "kaon up:", err)
		return 1
	}
	printBanner(*data, ep, *nfs)
	waitSignal()
	log.Info("shutting down")
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	nsSrv.Shutdown(sctx)
	fstSrv.Shutdown(sctx)
	os.Remove(filepath.Join(*data, "endpoints.json"))
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

func runMGM(args []string) int {
	fl := flag.NewFlagSet("kaon mgm", flag.ExitOnError)
	data := fl.String("data", defaultDataDir(), "namespace data directory")
	httpAddr := fl.String("http", "127.0.0.1:8000", "HTTP/WebDAV listen address")
	xrdAddr := fl.String("xrootd", "", "root:// listen address (empty = off)")
	nsf := bindNSFlags(fl)
	fl.IntVar(&metaCacheMB, "meta-cache", metaCacheMB, "namespace engine block cache in MiB")
	fl.Parse(args)
	log := newLogger(false)
	if err := os.MkdirAll(*data, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "kaon mgm:", err)
		return 1
	}
	role, err := openNamespace(*data, nsf, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon mgm:", err)
		return 1
	}
	defer role.eng.Close()
	mctx, mcancel := context.WithCancel(context.Background())
	defer mcancel()
	go role.srv.Run(mctx)
	l, addr, err := listen(*httpAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon mgm:", err)
		return 1
	}
	host, _, _ := net.SplitHostPort(addr)
	ep := Endpoints{HTTP: "http://" + addr}
	stop, err := startXRootD(*xrdAddr, host, role.srv, nil, &ep, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon mgm: xrootd:", err)
		return 1
	}
	defer stop()
	srv := serveHTTP(l, role.handler(log))
	if err := writeEndpoints(*data, ep); err != nil {
		fmt.Fprintln(os.Stderr, "kaon mgm:", err)
		return 1
	}
	fmt.Printf("namespace server on %s (key: %s)\n", ep.HTTP, filepath.Join(*data, "keys", "capability.key"))
	waitSignal()
	srv.Shutdown(context.Background())
	return 0
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runFST(args []string) int {
	fl := flag.NewFlagSet("kaon fst", flag.ExitOnError)
	mgmURL := fl.String("mgm", "", "namespace server URL (http://host:port)")
	keyFile := fl.String("key", "", "capability key file shared with the namespace server")
	httpAddr := fl.String("http", "127.0.0.1:0", "data HTTP listen address")
	xrdAddr := fl.String("xrootd", "", "data root:// listen address (empty = off)")
	mgmXrd := fl.String("mgm-xrootd", "", "root:// host:port of the namespace server, for redirects from this data listener")
	data := fl.String("data", "", "directory for endpoints.json (optional)")
	nodeName := fl.String("node", "", "stable node name (default: hostname:port of --http)")
	syncData := fl.Bool("sync", true, "fsync file data before committing (false: benchmarks only)")
	streamMB := fl.Int64("stream-memory", storage.DefaultStreamMemory>>20, "MiB of buffers all client streams may hold together (more streams wait)")
	var fsPaths multiFlag
	fl.Var(&fsPaths, "fs", "filesystem directory to serve (repeatable)")
	fl.Parse(args)
	if *mgmURL == "" || *keyFile == "" {
		fmt.Fprintln(os.Stderr, "kaon fst: --mgm and --key are required")
		return 2
	}
	log := newLogger(false)
	key, err := capability.LoadOrCreateKey(*keyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon fst:", err)
		return 1
	}
	l, addr, err := listen(*httpAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon fst:", err)
		return 1
	}
	client := &cluster.Client{Base: *mgmURL, Secret: key.Internal()}
	if *nodeName == "" {
		host, _ := os.Hostname()
		_, port, _ := net.SplitHostPort(addr)
		*nodeName = host + ":" + port
	}
	fst, err := storage.New(storage.Config{Node: *nodeName, Addr: "http://" + addr, Key: key, Namespace: client,
		Paths: fsPaths, Store: posixStores(*syncData), Peers: cluster.NewStorageClient(key.Internal()),
		StreamMemory: *streamMB << 20, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon fst:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ep := Endpoints{FSTHTTP: "http://" + addr}
	stop, err := startFSTXRootD(*xrdAddr, *mgmXrd, fst, &ep, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon fst: xrootd:", err)
		return 1
	}
	defer stop()
	srv := serveHTTP(l, storageHandler(fst, key, log))
	go fst.Run(ctx)
	<-fst.Ready()
	if *data != "" {
		_ = os.MkdirAll(*data, 0o755)
		if err := writeEndpoints(*data, ep); err != nil {
			fmt.Fprintln(os.Stderr, "kaon fst:", err)
		}
	}
	fmt.Printf("storage server on http://%s registered with %s\n", addr, *mgmURL)
	waitSignal()
	cancel()
	srv.Shutdown(context.Background())
	return 0
}

package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kaon-storage/kaon/internal/role"
	"github.com/kaon-storage/kaon/internal/role/endpoints"
)

// The server roles: their flags here, their assembly in internal/role.

func init() {
	addVerb(newUpCmd)
	addVerb(newMGMCmd)
	addVerb(newFSTCmd)
}

func newUpCmd() *cobra.Command {
	var c role.UpConfig
	cmd := leaf("up", "run everything in one process (namespace + storage servers)", func(*cobra.Command, []string) int { return runUp(c) })
	fl := cmd.Flags()
	bindCommon(fl, &c.Common)
	bindListen(fl, &c.Listen, defaultDataDir(), "127.0.0.1:8000", "127.0.0.1:1094", "data directory (namespace, filesystems, keys)")
	bindNamespace(fl, &c.Namespace)
	bindStorage(fl, &c.Storage, false)
	bindSecurity(fl, &c.Security)
	fl.IntVar(&c.FS, "fs", 6, "number of storage filesystems to create under DATA/fs")
	return cmd
}

func runUp(c role.UpConfig) int {
	log := startCommon(c.Common)
	limitMemory(c.Storage.StreamMemoryMB<<20, log)
	s, err := role.StartUp(c, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon up:", err)
		return 1
	}
	if err := endpoints.Write(c.Data, s.Endpoints); err != nil {
		s.Close()
		fmt.Fprintln(os.Stderr, "kaon up:", err)
		return 1
	}
	printBanner(c.Data, s.Endpoints, c.FS)
	waitSignal()
	log.Info("shutting down")
	s.Close()
	endpoints.Remove(c.Data)
	return 0
}

func printBanner(data string, ep role.Endpoints, nfs int) {
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

// printTLS tells where the TLS endpoints and the CA are.
func printTLS(ep role.Endpoints) {
	if ep.HTTPS == "" {
		return
	}
	fmt.Printf("  https:    %s\n", ep.HTTPS)
	if ep.Roots != "" {
		fmt.Printf("  roots://: %s\n", ep.Roots)
	}
	if ep.CA != "" {
		fmt.Printf("  CA:       %s (curl --cacert; X509_CERT_DIR=%s for xrdcp, gfal, davix --capath)\n", ep.CA, ep.CADir)
	} else {
		fmt.Printf("  CA dir:   %s\n", ep.CADir)
	}
}

func newMGMCmd() *cobra.Command {
	var c role.MGMConfig
	cmd := leaf("mgm", "run the namespace server alone", func(cmd *cobra.Command, _ []string) int {
		if c.Meta.Peers != "" {
			// Both ends of these etcd members are ours: group commits as
			// large as the tests' cluster takes, unless the flags say
			// otherwise.
			if !cmd.Flags().Changed("meta-txn-ops") {
				c.Meta.TxnOps = 4096
			}
			if !cmd.Flags().Changed("meta-request-bytes") {
				c.Meta.RequestBytes = 8 << 20
			}
		}
		return runMGM(c)
	})
	fl := cmd.Flags()
	bindCommon(fl, &c.Common)
	bindListen(fl, &c.Listen, defaultDataDir(), "127.0.0.1:8000", "", "namespace data directory")
	bindNamespace(fl, &c.Namespace)
	bindSecurity(fl, &c.Security)
	bindMeta(fl, &c.Meta)
	fl.StringVar(&c.Namespace.KeyFile, "key", "", "capability key file shared by the namespace servers of an instance (default: DATA/keys/capability.key, created if missing)")
	return cmd
}

func runMGM(c role.MGMConfig) int {
	s, err := role.StartMGM(c, startCommon(c.Common))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon mgm:", err)
		return 1
	}
	if err := endpoints.Write(c.Data, s.Endpoints); err != nil {
		s.Close()
		fmt.Fprintln(os.Stderr, "kaon mgm:", err)
		return 1
	}
	if s.Meta != "" {
		fmt.Printf("namespace server %s of the instance in %s (key: %s)\n", s.URL, s.Meta, c.Namespace.KeyPath(c.Data))
	} else {
		fmt.Printf("namespace server on %s (key: %s)\n", s.Endpoints.HTTP, c.Namespace.KeyPath(c.Data))
	}
	printTLS(s.Endpoints)
	waitSignal()
	s.Close()
	return 0
}

func newFSTCmd() *cobra.Command {
	var c role.FSTConfig
	cmd := leaf("fst", "run a storage server alone (registers with --mgm)", func(*cobra.Command, []string) int { return runFST(c) })
	fl := cmd.Flags()
	bindCommon(fl, &c.Common)
	bindListen(fl, &c.Listen, "", "127.0.0.1:0", "", "directory for endpoints.json (optional)")
	bindStorage(fl, &c.Storage, true)
	bindJoin(fl, &c.Join)
	bindSecurity(fl, &c.Security)
	return cmd
}

func runFST(c role.FSTConfig) int {
	if c.Join.MGM == "" || c.Join.Key == "" {
		fmt.Fprintln(os.Stderr, "kaon fst: --mgm and --key are required")
		return 2
	}
	log := startCommon(c.Common)
	limitMemory(c.Storage.StreamMemoryMB<<20, log)
	s, err := role.StartFST(c, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kaon fst:", err)
		return 1
	}
	if c.Data != "" {
		_ = os.MkdirAll(c.Data, 0o755)
		if err := endpoints.Write(c.Data, s.Endpoints); err != nil {
			fmt.Fprintln(os.Stderr, "kaon fst:", err)
		}
	}
	fmt.Printf("storage server on %s registered with %s\n", s.URL, c.Join.MGM)
	waitSignal()
	s.Close()
	return 0
}

// startCommon applies the common settings: profiling, and the role's
// logger.
func startCommon(c role.Common) *slog.Logger {
	servePprof(c.Pprof)
	return c.Logger()
}

// limitMemory sets the Go runtime's soft memory limit of a storage
// server's process so that its resident set stays within the stream
// budget + 25 %: the limit is that minus the pages of the binary already
// resident (RssFile: the runtime does not count them), and at least the
// budget + 32 MiB; GOMEMLIMIT, when set, wins. Streams hold at most the
// budget, but without a limit the collector lets the heap grow to twice
// what is live before it runs: 256 parallel ec:4+2 reads with a 256 MiB
// budget peaked at 382 MiB RSS (docs/DESIGN-NOTES.md). A soft limit never
// fails an allocation: past it the collector runs more often (at most
// half the CPU; stream buffers hold no pointers, so a cycle is short),
// which is the cost when the rest of the process (the namespace of `kaon
// up`) outgrows the margin.
func limitMemory(budget int64, log *slog.Logger) {
	if budget <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := max(budget+budget/4-residentFile(), budget+32<<20)
	debug.SetMemoryLimit(limit)
	log.Debug("soft memory limit", "MiB", limit>>20)
}

// residentFile is the process's resident file-backed memory (its binary
// and libraries) in bytes, 0 if unknown.
func residentFile() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// servePprof serves net/http/pprof on its own listener (never on a
// public endpoint); "" = off.
func servePprof(addr string) {
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

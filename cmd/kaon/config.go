package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/nsserver"
	"github.com/kaon-storage/kaon/internal/storage"
)

// Configuration. Every role's settings are one struct, bound to flags by
// one function, and the all-in-one `up` binds the same structs the
// separate roles do, so it cannot drift from them:
//
//	kaon mgm  = Common + Listen + Namespace
//	kaon fst  = Common + Listen + Storage + the namespace server to join
//	kaon up   = Common + Listen + Namespace + Storage + how many filesystems
//
// A config file (--config FILE, TOML) sets the same settings by flag name
// ("cap-ttl = \"10m\"", "fs = [\"/d1\", \"/d2\"]"); flags given on the
// command line override it.

// Common are the settings every server role has.
type Common struct {
	Verbose       bool   // debug logging
	Pprof         string // serve Go profiling on this address
	Config        string // the config file the settings came from
	MetricsAccess string // who may read /metrics: open, loopback, admin ("": the role's default, metricsAllow)
}

func (c *Common) bind(fl *flag.FlagSet) {
	fl.BoolVar(&c.Verbose, "v", false, "debug logging")
	fl.StringVar(&c.Pprof, "pprof", "", "serve Go profiling on this address (e.g. 127.0.0.1:6060)")
	fl.StringVar(&c.Config, "config", "", "read settings from this TOML file (keys are flag names; flags override it)")
	fl.StringVar(&c.MetricsAccess, "metrics-access", "",
		"who may read /metrics: open, loopback (clients on this host) or admin (default: open on a namespace server with --auth unix only, else loopback)")
}

// Listen is where a server role serves.
type Listen struct {
	Data   string // data directory
	HTTP   string // HTTP listen address
	XRootD string // root:// listen address ("" = off)
}

func (l *Listen) bind(fl *flag.FlagSet, data, http, xrootd, dataHelp string) {
	fl.StringVar(&l.Data, "data", data, dataHelp)
	fl.StringVar(&l.HTTP, "http", http, "HTTP listen address (port 0 = a free port)")
	fl.StringVar(&l.XRootD, "xrootd", xrootd, "root:// listen address (empty = off, port 0 = a free port)")
}

// NamespaceConfig is the namespace server's own settings.
type NamespaceConfig struct {
	Sync            bool
	CapTTL          time.Duration
	MetaCacheMB     int
	RecycleLifetime time.Duration
	RecycleSize     int64
	AuditLog        string // "DATA/..." is below the data directory
	FsckRate        int
	OrphanGrace     time.Duration
	SlowFactor      float64
	SlowMin         time.Duration
	SlowPlacement   bool
	Auth            AuthConfig
	KeyFile         string // capability key shared by the servers of an instance (mgm --key); default DATA/keys/capability.key
}

func (n *NamespaceConfig) bind(fl *flag.FlagSet) {
	fl.BoolVar(&n.Sync, "sync", true, "make commits (and, in up, file data) durable before acknowledging (false: benchmarks only)")
	fl.DurationVar(&n.CapTTL, "cap-ttl", 5*time.Minute, "lifetime of redirect capabilities (each is good for one upload)")
	fl.IntVar(&n.MetaCacheMB, "meta-cache", pebblekv.DefaultCacheBytes>>20, "namespace engine block cache in MiB")
	fl.DurationVar(&n.RecycleLifetime, "recycle-lifetime", 30*24*time.Hour, "recycle bin entries older than this are purged (0 = kept)")
	fl.Int64Var(&n.RecycleSize, "recycle-size", 0, "the oldest recycle bin entries are purged while it holds more bytes than this (0 = no limit)")
	fl.StringVar(&n.AuditLog, "audit-log", "DATA/audit.log", "audit log: one JSON line per mutation and refused request (empty = off)")
	fl.IntVar(&n.FsckRate, "fsck-rate", nsserver.DefaultFsckRate, "fsck: files per second of the namespace pass after scans (0 = unthrottled)")
	fl.DurationVar(&n.OrphanGrace, "fsck-orphan-grace", nsserver.DefaultOrphanGrace, "fsck repair drops an orphan stripe only once it was found this long ago")
	fl.Float64Var(&n.SlowFactor, "slow-factor", nsserver.DefaultSlowFactor, "a filesystem whose p90 I/O latency is this many times the median of its group's filesystems on other disks is slow (0 = no slow-disk detection)")
	fl.DurationVar(&n.SlowMin, "slow-min", nsserver.DefaultSlowMin, "... and above this for small operations (10x for large ones)")
	fl.BoolVar(&n.SlowPlacement, "slow-placement", false, "keep placing new files on slow filesystems (they are only marked and warned about)")
	n.Auth.bind(fl)
}

// slowPolicy is the slow-disk detection the flags ask for.
func (n NamespaceConfig) slowPolicy() nsserver.SlowPolicy {
	return nsserver.SlowPolicy{Factor: n.SlowFactor, Min: n.SlowMin, KeepPlacing: n.SlowPlacement, Off: n.SlowFactor <= 0}
}

// orphanGrace is the grace for nsserver.Config (which spells none
// negative).
func (n NamespaceConfig) orphanGrace() time.Duration {
	if n.OrphanGrace <= 0 {
		return -1
	}
	return n.OrphanGrace
}

// fsckRate is the namespace pass rate for nsserver.Config (which spells
// unthrottled negative).
func (n NamespaceConfig) fsckRate() int {
	if n.FsckRate <= 0 {
		return -1
	}
	return n.FsckRate
}

// StorageConfig is a storage server's own settings.
type StorageConfig struct {
	SyncData       bool
	StreamMemoryMB int64
	TPC            TPCConfig
	IOTimeout      time.Duration // I/O deadline per filesystem (and librados operation timeout)
	CephConf       string        // ceph.conf for RADOS filesystems that name none (and Ceph's health)
	CephUser       string        // Ceph client id for them
	LatencyWindow  time.Duration // span of the latency percentiles reported for slow-disk detection
	LatencyProbe   time.Duration // period of the small I/O probe of every writable filesystem
}

// TPCConfig is how a storage server runs third-party copies.
type TPCConfig struct {
	AllowLoopback bool
	Markers       time.Duration
}

func (t *TPCConfig) bind(fl *flag.FlagSet) {
	fl.BoolVar(&t.AllowLoopback, "tpc-allow-loopback", false,
		"let third-party copies reach loopback addresses (another instance on this host; such peers see Kaon's own uid)")
	fl.DurationVar(&t.Markers, "tpc-markers", 5*time.Second, "period of HTTP-TPC performance markers")
}

// bind binds the storage settings; in up, --sync is the namespace's and
// covers file data too (syncFlag false).
func (s *StorageConfig) bind(fl *flag.FlagSet, syncFlag bool) {
	if syncFlag {
		fl.BoolVar(&s.SyncData, "sync", true, "fsync file data before committing (false: benchmarks only)")
	}
	fl.Int64Var(&s.StreamMemoryMB, "stream-memory", storage.DefaultStreamMemory>>20,
		"MiB of buffers all client streams of the storage server may hold together (more streams wait)")
	s.TPC.bind(fl)
	fl.DurationVar(&s.IOTimeout, "io-timeout", storage.DefaultIOTimeout,
		"no filesystem call (or RADOS operation) is waited for longer: past it the client gets 503/kXR_IOError and the filesystem is offline until it answers (0 = wait forever)")
	fl.StringVar(&s.CephConf, "ceph-conf", "", "ceph.conf for RADOS filesystems that name none, and for the Ceph health of CephFS mounts (default: Ceph's own search)")
	fl.StringVar(&s.CephUser, "ceph-user", "", "Ceph client id for RADOS filesystems that name none (default: Ceph's, admin)")
	fl.DurationVar(&s.LatencyWindow, "latency-window", storage.DefaultLatencyWindow, "I/O latency percentiles (slow-disk detection) cover this much recent time")
	fl.DurationVar(&s.LatencyProbe, "latency-probe", storage.DefaultLatencyProbe, "write, read and remove a small probe stripe on every writable filesystem this often (0 = never)")
}

// JoinConfig is how a separate storage server finds its namespace server.
type JoinConfig struct {
	MGM       string   // namespace server URL
	Key       string   // capability key file shared with it
	MGMXRootD string   // its root:// host:port, for redirects from the data listener
	Node      string   // stable node name
	FS        []string // filesystem directories
}

func (j *JoinConfig) bind(fl *flag.FlagSet) {
	fl.StringVar(&j.MGM, "mgm", "", "namespace server URL (http://host:port); every server of a replicated instance, comma-separated")
	fl.StringVar(&j.Key, "key", "", "capability key file shared with the namespace server")
	fl.StringVar(&j.MGMXRootD, "mgm-xrootd", "", "root:// host:port of the namespace server, for redirects from this data listener")
	fl.StringVar(&j.Node, "node", "", "stable node name (default: hostname:port of --http)")
	fl.Var((*stringList)(&j.FS), "fs", "filesystem directory to serve (repeatable)")
}

// stringList is a repeatable flag.
type stringList []string

func (m *stringList) String() string     { return strings.Join(*m, ",") }
func (m *stringList) Set(v string) error { *m = append(*m, v); return nil }

// parseRole parses a role's flags: the config file named by --config
// first, then the command line over it.
func parseRole(fl *flag.FlagSet, args []string) error {
	var file string
	for i, a := range args {
		switch {
		case a == "--config" || a == "-config":
			if i+1 < len(args) {
				file = args[i+1]
			}
		case strings.HasPrefix(a, "--config=") || strings.HasPrefix(a, "-config="):
			file = a[strings.IndexByte(a, '=')+1:]
		}
	}
	if file != "" {
		if err := applyConfigFile(fl, file); err != nil {
			return err
		}
	}
	return fl.Parse(args)
}

// applyConfigFile sets fl's flags from a TOML file whose keys are flag
// names; a value may be a string, number, boolean or (for repeatable
// flags) an array.
func applyConfigFile(fl *flag.FlagSet, file string) error {
	var m map[string]any
	if _, err := toml.DecodeFile(file, &m); err != nil {
		return fmt.Errorf("config %s: %w", file, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "config" || fl.Lookup(k) == nil {
			return fmt.Errorf("config %s: %q is not a setting of %s", file, k, fl.Name())
		}
		vals := []any{m[k]}
		if arr, ok := m[k].([]any); ok {
			vals = arr
		}
		for _, v := range vals {
			s := fmt.Sprint(v)
			if d, ok := v.(time.Duration); ok {
				s = d.String()
			}
			if err := fl.Set(k, s); err != nil {
				return fmt.Errorf("config %s: %s = %v: %w", file, k, v, err)
			}
		}
	}
	return nil
}

func defaultDataDir() string {
	if d := os.Getenv("KAON_DATA"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".kaon")
}

package role

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/auth/token"
	"github.com/kaon-storage/kaon/internal/auth/x509auth"
	"github.com/kaon-storage/kaon/internal/ha"
	"github.com/kaon-storage/kaon/internal/kv/pebblekv"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/nsserver"
	"github.com/kaon-storage/kaon/internal/sessions"
	"github.com/kaon-storage/kaon/internal/srr"
	"github.com/kaon-storage/kaon/internal/storage"
)

// Settings. Every role's settings are one struct of the groups below, and
// the all-in-one reuses the separate roles' groups, so it cannot drift
// from them:
//
//	kaon mgm  = Common + Listen + Namespace + Security + Meta
//	kaon fst  = Common + Listen + Storage + Join + Security
//	kaon up   = Common + Listen + Namespace + Storage + Security + how many filesystems
//
// cmd/kaon binds each group to flags by one function (the flag names are
// the config file's keys); the Default* functions give the values a flag
// not given has, which kaontest uses too.

// Common are the settings every server role has.
type Common struct {
	Verbose       bool   // debug logging
	Pprof         string // serve Go profiling on this address
	Config        string // the config file the settings came from
	MetricsAccess string // who may read /metrics: open, loopback, admin ("": the role's default, MetricsAllow)
}

// Listen is where a server role serves.
type Listen struct {
	Data   string // data directory
	HTTP   string // HTTP listen address
	XRootD string // root:// listen address ("" = off)
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
	RebuildAfter    time.Duration // 0: only by hand
	SlowFactor      float64
	SlowMin         time.Duration
	SlowPlacement   bool
	Auth            AuthConfig
	KeyFile         string              // capability key shared by the servers of an instance (mgm --key); default DATA/keys/capability.key
	Sessions        nsapi.SessionConfig // client sessions' timing (fusex conf changes it at run time)
	SRRPath         string              // where the HTTP front serves the WLCG Storage Resource Report ("" = not there)
}

// DefaultNamespace is the namespace settings of a server given no flags.
func DefaultNamespace() NamespaceConfig {
	return NamespaceConfig{Sync: true, CapTTL: 5 * time.Minute, MetaCacheMB: pebblekv.DefaultCacheBytes >> 20,
		RecycleLifetime: 30 * 24 * time.Hour, AuditLog: "DATA/audit.log",
		FsckRate: nsserver.DefaultFsckRate, OrphanGrace: nsserver.DefaultOrphanGrace, RebuildAfter: nsserver.DefaultRebuildAfter,
		SlowFactor: nsserver.DefaultSlowFactor, SlowMin: nsserver.DefaultSlowMin,
		Auth: DefaultAuth(), Sessions: sessions.Defaults(), SRRPath: srr.DefaultPath}
}

// slowPolicy is the slow-disk detection the settings ask for.
func (n NamespaceConfig) slowPolicy() nsserver.SlowPolicy {
	return nsserver.SlowPolicy{Factor: n.SlowFactor, Min: n.SlowMin, KeepPlacing: n.SlowPlacement, Off: n.SlowFactor <= 0}
}

// KeyPath is the capability key file of a namespace server in data.
func (n NamespaceConfig) KeyPath(data string) string {
	if n.KeyFile != "" {
		return n.KeyFile
	}
	return filepath.Join(data, "keys", "capability.key")
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

// DefaultStorage is the storage settings of a server given no flags.
func DefaultStorage() StorageConfig {
	return StorageConfig{SyncData: true, StreamMemoryMB: storage.DefaultStreamMemory >> 20, TPC: DefaultTPC(),
		IOTimeout: storage.DefaultIOTimeout, LatencyWindow: storage.DefaultLatencyWindow, LatencyProbe: storage.DefaultLatencyProbe}
}

// TPCConfig is how a storage server runs third-party copies.
type TPCConfig struct {
	AllowLoopback bool
	Markers       time.Duration
}

// DefaultTPC is the third-party copy settings given no flags.
func DefaultTPC() TPCConfig { return TPCConfig{Markers: 5 * time.Second} }

// JoinConfig is how a separate storage server finds its namespace server.
type JoinConfig struct {
	MGM       string   // namespace server URL(s), comma-separated
	Key       string   // capability key file shared with it
	MGMXRootD string   // its root:// host:port, for redirects from the data listener
	Node      string   // stable node name
	FS        []string // filesystem directories
}

// AuthConfig is how a namespace server authenticates clients: the
// accepted methods, the token issuers it trusts, and its own issuer.
type AuthConfig struct {
	Methods   string        // --auth: unix, token, x509, gsi, krb5 (comma-separated; orders root://'s protocols)
	Issuers   []string      // --token-issuer ISSUER[=JWKS][,base=/p][,user=U][,map=FILE][,authz=user|capability]
	Audiences []string      // --token-audience
	IssuerURL string        // --issuer-url: iss of this instance's tokens
	MaxTTL    time.Duration // --token-max-ttl: issued and accepted tokens' longest lifetime
	// Plaintext is --auth-plaintext: "refuse" or "allow" bearer tokens
	// over plaintext HTTP ("": refuse with --tls, allow without).
	Plaintext string
	// Krb5Keytab is --krb5-keytab: the service keys of krb5 (root://) and
	// Negotiate (https).
	Krb5Keytab string
	// Gateways is --gateway-key FILE[,no_root_squash]: the keys of the
	// hosts trusted to assert their callers' uids (auth/gateway).
	Gateways []string
}

// DefaultAuth is the authentication settings given no flags.
func DefaultAuth() AuthConfig { return AuthConfig{Methods: "unix", MaxTTL: token.DefaultMaxTTL} }

// SecurityConfig is how a server role serves TLS and whom it accepts. Every
// server role has it; without TLS nothing changes (plaintext, unix peers
// on loopback, everyone else nobody).
type SecurityConfig struct {
	TLS     bool
	Require bool
	Cert    string
	Key     string
	CADir   string
	TLSDir  string // "DATA/..." is below the data directory
	GridMap string
	VOMSDir string // trusted VOMS servers per VO (.lsc files)
	VOMSMap string // FQAN → user, before the grid-mapfile ("": none)
}

// DefaultSecurity is the TLS settings given no flags.
func DefaultSecurity() SecurityConfig {
	return SecurityConfig{TLSDir: "DATA/tls", GridMap: x509auth.DefaultGridMapfile, VOMSDir: x509auth.DefaultVOMSDir}
}

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
	Peers        string        // etcd members run inside the namespace servers (member.go)
	Name         string        // this server's member of Peers
}

// DefaultMeta is the namespace store settings given no flags.
func DefaultMeta() MetaConfig {
	return MetaConfig{Lease: ha.DefaultLease, TxnOps: 128, RequestBytes: 3 << 19, KeepHistory: 5 * time.Minute}
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

// MGMConfig is the namespace server role.
type MGMConfig struct {
	Common
	Listen
	Namespace NamespaceConfig
	Security  SecurityConfig
	Meta      MetaConfig
}

// FSTConfig is the storage server role.
type FSTConfig struct {
	Common
	Listen
	Storage  StorageConfig
	Join     JoinConfig
	Security SecurityConfig
}

// Logger is the role's logger (debug with Verbose).
func (c Common) Logger() *slog.Logger {
	level := slog.LevelInfo
	if c.Verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// dataPath is spec with a leading DATA standing for dir.
func dataPath(dir, spec string) string { return strings.Replace(spec, "DATA", dir, 1) }

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/spf13/pflag"

	"github.com/kaon-storage/kaon/internal/role"
	"github.com/kaon-storage/kaon/internal/tlsconf"
)

// Flags. Every role's settings are one struct of groups (internal/role:
// Common, Listen, Namespace, Storage, Join, Auth, Security, Meta), each
// group bound to flags by one function here, and the all-in-one `up`
// binds the same groups the separate roles do, so it cannot drift from
// them. A flag not given has the group's role.Default* value.
//
// A config file (--config FILE, TOML) sets the same settings by flag name
// ("cap-ttl = \"10m\"", "fs = [\"/d1\", \"/d2\"]"); flags given on the
// command line override it.

func bindCommon(fl *pflag.FlagSet, c *role.Common) {
	fl.BoolVarP(&c.Verbose, "v", "v", false, "debug logging")
	fl.StringVar(&c.Pprof, "pprof", "", "serve Go profiling on this address (e.g. 127.0.0.1:6060)")
	fl.StringVar(&c.Config, "config", "", "read settings from this TOML file (keys are flag names; flags override it)")
	fl.StringVar(&c.MetricsAccess, "metrics-access", "",
		"who may read /metrics: open, loopback (clients on this host) or admin (default: open on a namespace server with --auth unix only, else loopback)")
}

func bindListen(fl *pflag.FlagSet, l *role.Listen, data, http, xrootd, dataHelp string) {
	fl.StringVar(&l.Data, "data", data, dataHelp)
	fl.StringVar(&l.HTTP, "http", http, "HTTP listen address (port 0 = a free port)")
	fl.StringVar(&l.XRootD, "xrootd", xrootd, "root:// listen address (empty = off, port 0 = a free port)")
}

func bindNamespace(fl *pflag.FlagSet, n *role.NamespaceConfig) {
	d := role.DefaultNamespace()
	fl.BoolVar(&n.Sync, "sync", d.Sync, "make commits (and, in up, file data) durable before acknowledging (false: benchmarks only)")
	fl.DurationVar(&n.CapTTL, "cap-ttl", d.CapTTL, "lifetime of redirect capabilities (each is good for one upload)")
	fl.IntVar(&n.MetaCacheMB, "meta-cache", d.MetaCacheMB, "namespace engine block cache in MiB")
	fl.StringVar(&n.SRRPath, "srr-path", d.SRRPath, "where the HTTP front serves the WLCG Storage Resource Report (JSON, to any client; \"\" = only through kaon srr)")
	fl.DurationVar(&n.RecycleLifetime, "recycle-lifetime", d.RecycleLifetime, "recycle bin entries older than this are purged (0 = kept)")
	fl.Int64Var(&n.RecycleSize, "recycle-size", d.RecycleSize, "the oldest recycle bin entries are purged while it holds more bytes than this (0 = no limit)")
	fl.StringVar(&n.AuditLog, "audit-log", d.AuditLog, "audit log: one JSON line per mutation and refused request (empty = off)")
	fl.IntVar(&n.FsckRate, "fsck-rate", d.FsckRate, "fsck: files per second of the namespace pass after scans (0 = unthrottled)")
	fl.DurationVar(&n.OrphanGrace, "fsck-orphan-grace", d.OrphanGrace, "fsck repair drops an orphan stripe only once it was found this long ago")
	fl.DurationVar(&n.RebuildAfter, "rebuild-after", d.RebuildAfter,
		"a filesystem unreadable this long (I/O errors, its storage server dead) is declared lost and everything it held is rebuilt on the others of its group (0 = only by hand: fs config ID configstatus=lost)")
	fl.Float64Var(&n.SlowFactor, "slow-factor", d.SlowFactor, "a filesystem whose p90 I/O latency is this many times the median of its group's filesystems on other disks is slow (0 = no slow-disk detection)")
	fl.DurationVar(&n.SlowMin, "slow-min", d.SlowMin, "... and above this for small operations (10x for large ones)")
	fl.BoolVar(&n.SlowPlacement, "slow-placement", d.SlowPlacement, "keep placing new files on slow filesystems (they are only marked and warned about)")
	fl.DurationVar(&n.Sessions.Heartbeat, "session-heartbeat", d.Sessions.Heartbeat, "client sessions: the heartbeat clients keep (volatile after 1.5 of them)")
	fl.DurationVar(&n.Sessions.Lease, "session-lease", d.Sessions.Lease, "client sessions: how long a lease (subscription) lasts unless renewed")
	fl.DurationVar(&n.Sessions.Offline, "session-offline", d.Sessions.Offline, "client sessions: offline after this long without a heartbeat")
	fl.DurationVar(&n.Sessions.Evict, "session-evict", d.Sessions.Evict, "client sessions: evicted (locks released) after this long without a heartbeat")
	fl.DurationVar(&n.Sessions.Grace, "session-grace", d.Sessions.Grace, "client sessions: after a takeover, how long locks wait for the previous active server's sessions to reclaim theirs")
	fl.IntVar(&n.Sessions.MaxAudience, "session-max-audience", d.Sessions.MaxAudience, "client sessions: size and mtime updates are not pushed to a directory with more subscribers than this (0: always pushed)")
	bindAuth(fl, &n.Auth)
}

func bindAuth(fl *pflag.FlagSet, a *role.AuthConfig) {
	d := role.DefaultAuth()
	fl.StringVar(&a.Methods, "auth", d.Methods,
		"accepted authentication methods, comma-separated: unix (loopback peers; others are nobody), token (bearer tokens), x509 (https client certificates), gsi (root:// grid proxies), krb5 (Kerberos tickets: root:// krb5, https Negotiate), gateway (uids asserted by gateway hosts: --gateway-key); root:// offers token, gsi and krb5 in this order; without unix a client none applies to is refused")
	fl.StringArrayVar(&a.Issuers, "token-issuer", nil,
		"trusted token issuer ISSUER=JWKS (JWKS: a file or an https:// URL; ISSUER alone: its discovery document), options ,base=/PATH ,user=LOCALUSER ,map=FILE (one of user= or map= is required) ,authz=user|capability (default user: the mapped user's mode bits and ACLs decide, scopes narrow; capability: the scopes authorize by themselves) (repeatable)")
	fl.StringArrayVar(&a.Audiences, "token-audience", nil, "token audience this service accepts besides its own URL and the WLCG/SciTokens 'any' (repeatable)")
	fl.StringVar(&a.IssuerURL, "issuer-url", d.IssuerURL, "iss of the tokens this instance issues, where it publishes its keys (default: its HTTP URL)")
	fl.StringVar(&a.Plaintext, "auth-plaintext", d.Plaintext, "bearer tokens over plaintext http: refuse or allow (default: refuse with --tls, a token sent in the clear is a leaked one; allow without)")
	fl.StringVar(&a.Krb5Keytab, "krb5-keytab", d.Krb5Keytab, "keytab with the service keys of --auth krb5: xrootd/HOST@REALM (offered to root:// clients) and HTTP/HOST@REALM (https Negotiate); user@REALM maps to the local user")
	fl.StringArrayVar(&a.Gateways, "gateway-key", nil, "key file FILE[,no_root_squash] of hosts trusted as gateways (--auth gateway): a kaon mount there with -o gateway=FILE acts as each caller's uid and gids, without tokens; uid 0 is nobody unless no_root_squash (repeatable)")
	fl.DurationVar(&a.MaxTTL, "token-max-ttl", d.MaxTTL, "longest lifetime of the tokens this instance issues, and of any issuer's tokens it accepts (exp - iat; exp - now without iat)")
}

func bindTPC(fl *pflag.FlagSet, t *role.TPCConfig) {
	d := role.DefaultTPC()
	fl.BoolVar(&t.AllowLoopback, "tpc-allow-loopback", d.AllowLoopback,
		"let third-party copies reach loopback addresses (another instance on this host; such peers see Kaon's own uid)")
	fl.DurationVar(&t.Markers, "tpc-markers", d.Markers, "period of HTTP-TPC performance markers")
}

// bindStorage binds the storage settings; in up, --sync is the
// namespace's and covers file data too (syncFlag false).
func bindStorage(fl *pflag.FlagSet, s *role.StorageConfig, syncFlag bool) {
	d := role.DefaultStorage()
	if syncFlag {
		fl.BoolVar(&s.SyncData, "sync", d.SyncData, "fsync file data before committing (false: benchmarks only)")
	}
	fl.Int64Var(&s.StreamMemoryMB, "stream-memory", d.StreamMemoryMB,
		"MiB of buffers all client streams of the storage server may hold together (more streams wait)")
	bindTPC(fl, &s.TPC)
	fl.DurationVar(&s.IOTimeout, "io-timeout", d.IOTimeout,
		"no filesystem call (or RADOS operation) is waited for longer: past it the client gets 503/kXR_IOError and the filesystem is offline until it answers (0 = wait forever)")
	fl.StringVar(&s.CephConf, "ceph-conf", d.CephConf, "ceph.conf for RADOS filesystems that name none, and for the Ceph health of CephFS mounts (default: Ceph's own search)")
	fl.StringVar(&s.CephUser, "ceph-user", d.CephUser, "Ceph client id for RADOS filesystems that name none (default: Ceph's, admin)")
	fl.DurationVar(&s.LatencyWindow, "latency-window", d.LatencyWindow, "I/O latency percentiles (slow-disk detection) cover this much recent time")
	fl.DurationVar(&s.LatencyProbe, "latency-probe", d.LatencyProbe, "write, read and remove a small probe stripe on every writable filesystem this often (0 = never)")
}

func bindJoin(fl *pflag.FlagSet, j *role.JoinConfig) {
	fl.StringVar(&j.MGM, "mgm", "", "namespace server URL (http://host:port); every server of a replicated instance, comma-separated")
	fl.StringVar(&j.Key, "key", "", "capability key file shared with the namespace server")
	fl.StringVar(&j.MGMXRootD, "mgm-xrootd", "", "root:// host:port of the namespace server, for redirects from this data listener")
	fl.StringVar(&j.Node, "node", "", "stable node name (default: hostname:port of --http)")
	fl.StringArrayVar(&j.FS, "fs", nil, "filesystem directory to serve (repeatable)")
}

func bindSecurity(fl *pflag.FlagSet, s *role.SecurityConfig) {
	d := role.DefaultSecurity()
	fl.BoolVar(&s.TLS, "tls", d.TLS, "serve https:// and roots:// (plaintext stays accepted on the same ports unless --require-tls); internal RPC over TLS")
	fl.BoolVar(&s.Require, "require-tls", d.Require, "refuse plaintext clients on every listener (implies --tls)")
	fl.StringVar(&s.Cert, "tls-cert", d.Cert, "the site's host certificate (PEM; default: one issued by a local CA generated under --tls-dir)")
	fl.StringVar(&s.Key, "tls-key", d.Key, "the host certificate's private key (PEM)")
	fl.StringVar(&s.CADir, "tls-ca-dir", d.CADir, "trusted CA certificates, hashed layout (client certificates, peers; default: the local CA's, or "+tlsconf.DefaultCADir+" with --tls-cert)")
	fl.StringVar(&s.TLSDir, "tls-dir", d.TLSDir, "where the local CA and the generated host certificate live (share it with storage servers, as the capability key)")
	fl.StringVar(&s.GridMap, "grid-mapfile", d.GridMap, "certificate DN → local user map (x509 and gsi authentication; a DN it does not name is refused)")
	fl.StringVar(&s.VOMSDir, "voms-dir", d.VOMSDir, "VOMS servers trusted per VO (<dir>/<vo>/<host>.lsc): whose attributes in proxies are read (x509, gsi)")
	fl.StringVar(&s.VOMSMap, "voms-mapfile", d.VOMSMap, "VOMS FQAN → local user map (\"/vo/Role=r\" user, \"/vo/group/*\" user), asked before the grid-mapfile")
}

func bindMeta(fl *pflag.FlagSet, m *role.MetaConfig) {
	d := role.DefaultMeta()
	fl.StringVar(&m.URL, "meta", d.URL, "namespace store: empty for the embedded one (DATA/meta), or etcd://H1:P1,H2:P2,H3:P3[/PREFIX] shared by the namespace servers of one instance (one active, the others standbys)")
	fl.DurationVar(&m.Lease, "meta-lease", d.Lease, "with --meta etcd: how long an active server that died or was cut off keeps its role before a standby takes over")
	fl.IntVar(&m.TxnOps, "meta-txn-ops", d.TxnOps, "with --meta etcd: the cluster's --max-txn-ops (writes one commit may hold; raise both for faster creates)")
	fl.IntVar(&m.RequestBytes, "meta-request-bytes", d.RequestBytes, "with --meta etcd: the cluster's --max-request-bytes")
	fl.DurationVar(&m.KeepHistory, "meta-history", d.KeepHistory, "with --meta etcd: the active server compacts etcd's history older than this (0: leave it to etcd's --auto-compaction-*)")
	fl.StringVar(&m.Peers, "meta-peers", d.Peers, "run an etcd member inside this server: NAME=http://HOST:PEERPORT of every namespace server of the instance, comma-separated (clients on PEERPORT-1, as etcd's 2380/2379); the members are the instance's store (no --meta then)")
	fl.StringVar(&m.Name, "meta-name", d.Name, "with --meta-peers: this server's member (default: the host name)")
	fl.StringVar(&m.Advertise, "advertise", d.Advertise, "with --meta etcd: host name clients and the other servers reach this server at (default: the --http host, or the host name when it listens on all addresses)")
}

// applyConfigFile sets the flags fl of the command name from a TOML file
// whose keys are flag names; a value may be a string, number, boolean or
// (for repeatable flags) an array. The command line is parsed over it.
func applyConfigFile(fl *pflag.FlagSet, name, file string) error {
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
			return fmt.Errorf("config %s: %q is not a setting of %s", file, k, name)
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

// Package nsserver is the namespace service (EOS: MGM): the one API every
// front end calls, by path and by inode. It authorizes every request once,
// against an auth.Principal; applies Kaon's policy (immutable committed
// files, parent creation on upload, truncation); mints the capabilities
// that send clients to storage servers; computes checksums on request;
// and audits. Front ends (HTTP, XRootD, FUSE clients) only authenticate
// and translate.
//
// The schedulers are packages of their own, each fed by the namespace
// through a small interface and wired here: fleet (the registry of
// filesystems the storage servers' heartbeats keep current, spaces,
// placement, slow disks), movement (drain, balance, conversion) and fsck
// (checks, findings, repairs). This package keeps their API: the calls
// operators make, authorized and audited, and the types callers see.
//
// Files: server.go (this: configuration, cluster protocol), authz.go,
// audit.go, ops.go (metadata operations), open.go (data access: grants),
// checksum.go, uploads.go (pending uploads nobody writes), sessions.go
// (client sessions, leases and locks: package sessions), tokens.go,
// recycle.go, quota.go, versions.go, ha.go, access.go (access rules,
// rate limits, who is connected), stat.go (node ls, ns stat),
// savedconfig.go (config save|load), debug.go (log levels),
// iostat.go (io stat), admin.go (filesystems, file
// info, statfs), and the schedulers' calls: fleet.go, movement.go,
// fsck.go.
package nsserver

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaon-storage/kaon/internal/access"
	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/token"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/fsck"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/kv"
	"github.com/kaon-storage/kaon/internal/movement"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/sessions"
)

// Config configures the namespace service.
type Config struct {
	Engine            kv.Store // where the namespace lives
	Sync              bool     // namespace mutations durable before they return
	Key               *capability.Key
	HeartbeatInterval time.Duration // how often storage servers report; default 1s
	CapabilityTTL     time.Duration // lifetime of capabilities; default 5m
	// Data reads a file through a storage server, for checksums computed
	// on request. Nil: such requests fail.
	Data DataReader
	// PhysName names stripe fid on filesystem fs as its backend stores it
	// (for `file info`); nil: not shown.
	PhysName func(fs namespace.Filesystem, fid uint64) string
	Logger   *slog.Logger
	Now      func() time.Time // clock; default time.Now
	// RecycleLifetime and RecycleMaxBytes bound the recycle bin: entries
	// older than the lifetime are purged, then the oldest while it holds
	// more than the size (0: no bound). Enforced while Run runs.
	RecycleLifetime time.Duration
	RecycleMaxBytes int64
	// Audit receives the audit log (JSON lines); nil: none.
	Audit io.Writer
	// Mover orders stripe moves and conversions at storage servers
	// (drain, balance, conversion; cluster.StorageClient). Nil: data
	// movement fails, saying so.
	Mover movement.Mover
	// Repair reaches storage servers for fsck repairs; nil: none.
	Repair fsck.Repairer
	// FsckRate is the namespace pass's pace in files per second (0:
	// DefaultFsckRate, negative: unthrottled); FsckOrphanGrace how long
	// ago an orphan must have been found before a repair drops it (0:
	// DefaultOrphanGrace, negative: none).
	FsckRate        int
	FsckOrphanGrace time.Duration
	// RebuildAfter is how long a filesystem may be unreadable before it
	// is declared lost and everything it held is rebuilt on the others
	// (0: DefaultRebuildAfter, negative: only when an operator declares
	// it lost).
	RebuildAfter time.Duration
	// Slow configures slow-disk detection (fleet.SlowPolicy).
	Slow SlowPolicy
	// Tokens signs this instance's bearer tokens (tokens.go); nil: none.
	Tokens *token.Issuer
	// StepDown hands the active role of a replicated namespace to a
	// standby (internal/ha); nil: not replicated.
	StepDown func(ctx context.Context) error
	// Inherit is set when this server took the active role over from one
	// that stepped down cleanly (internal/ha): what that one handed over
	// (Server.HandOver). Its pending uploads stay pending, their storage
	// servers commit them here. Nil: every pending upload is aborted at
	// start (a restart, or a takeover after a crash: nobody writes them).
	Inherit *namespace.InFlight
	// Sessions configures client sessions (zero fields: sessions.Defaults).
	Sessions nsapi.SessionConfig
	// Term is this incarnation's HA term, which every pushed event
	// carries (0: an embedded engine); Takeover says it follows another
	// active server, whose sessions reclaim their locks in a grace window.
	Term     uint64
	Takeover bool
	// LogLevel is the level of Logger, which kaon debug sets at runtime
	// (nil: it cannot be).
	LogLevel *slog.LevelVar
}

// DataReader reaches file data through the storage server at addr
// (cluster.StorageClient over the internal protocol): ReadFile reads the
// whole content of the file a read capability names, Truncate runs an
// update session of one truncation with an update capability.
type DataReader interface {
	ReadFile(ctx context.Context, addr, token string) (io.ReadCloser, error)
	Truncate(ctx context.Context, addr, token string, size int64) error
}

// Server is the namespace service. It is safe for concurrent use.
type Server struct {
	ns   *namespace.Namespace
	key  *capability.Key
	reg  *fleet.Registry
	ttl  time.Duration
	data DataReader
	phys func(fs namespace.Filesystem, fid uint64) string
	log  *slog.Logger
	now  func() time.Time

	cfg      Config
	auditLog *auditor
	refusals refusals // the latest, for the admin's status page

	sumMu      sync.Mutex
	sumPending map[string]*sumCall // checksums being computed on request, by fid/type

	mv   *movement.Service // drains, balancers, conversions
	fsck *fsck.Service     // checks, findings, repairs

	sess    *sessions.Service // client sessions, leases, locks (sessions.go)
	writers writers           // uploads storage servers report writing (uploads.go)
	sweep   sweepTiming       // of the pending uploads nobody writes

	access   *access.Service  // access rules, rate limits, clients (access.go)
	accessMu sync.Mutex       // changes of the access rules (read, change, store)
	fstLevel atomic.Value     // string: the storage servers' log level (debug.go)
	iostat   fleet.Accounting // I/O by user and application (iostat.go)

	// openRace, when set, runs in Open between the scope decision and
	// the namespace's step (tests: a file appearing in between).
	openRace func()
}

// New opens the namespace in cfg.Engine and the filesystem registry, and
// aborts the uploads a previous process left unfinished (their writers
// are gone), unless cfg.Inherit hands them over.
func New(cfg Config) (*Server, error) {
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = time.Second
	}
	if cfg.CapabilityTTL <= 0 {
		cfg.CapabilityTTL = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, auditLog: newAuditor(cfg.Audit), key: cfg.Key, ttl: cfg.CapabilityTTL, data: cfg.Data, phys: cfg.PhysName, log: cfg.Logger, now: cfg.Now,
		sumPending: map[string]*sumCall{}, sweep: defaultSweep}
	ns, err := namespace.Open(cfg.Engine, namespace.Options{Sync: cfg.Sync, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	s.ns = ns
	if err := s.loadAccess(); err != nil {
		return nil, err
	}
	if cfg.Inherit != nil {
		n, err := ns.Adopt(*cfg.Inherit)
		if err != nil {
			return nil, err
		}
		s.log.Info("kept the uploads in flight the previous active server handed over", "count", n, "claimed", len(cfg.Inherit.Claimed))
	} else if n, err := ns.AbortStale(cfg.Now()); err != nil {
		return nil, err
	} else if n > 0 {
		s.log.Info("aborted unfinished uploads from a previous run", "count", n)
	}
	if n, err := ns.AbortMoves(); err != nil {
		return nil, err
	} else if n > 0 {
		s.log.Info("rolled back stripe moves a previous run left unfinished", "count", n)
	}
	if s.reg, err = fleet.Load(ns, fleet.Config{Interval: cfg.HeartbeatInterval, Slow: cfg.Slow, Log: cfg.Logger}); err != nil {
		return nil, err
	}
	s.sess = sessions.New(sessions.Config{SessionConfig: cfg.Sessions, Term: cfg.Term, Takeover: cfg.Takeover, Now: cfg.Now, Log: cfg.Logger})
	rebuildAfter := cfg.RebuildAfter
	switch {
	case rebuildAfter == 0:
		rebuildAfter = DefaultRebuildAfter
	case rebuildAfter < 0:
		rebuildAfter = 0
	}
	s.mv = movement.New(movement.Config{NS: ns, Fleet: s.reg, Mover: cfg.Mover, Key: cfg.Key, TTL: cfg.CapabilityTTL,
		RebuildAfter: rebuildAfter, Now: cfg.Now, Log: cfg.Logger})
	s.fsck = fsck.NewService(fsck.Config{NS: ns, Fleet: s.reg, Repairer: cfg.Repair, Key: cfg.Key, TTL: cfg.CapabilityTTL,
		Rate: cfg.FsckRate, OrphanGrace: cfg.FsckOrphanGrace, PhysName: cfg.PhysName, Now: cfg.Now, Log: cfg.Logger})
	return s, nil
}

// Run does the service's background work (recycle bin expiry, fsck's
// namespace pass, data movement, pending uploads nobody writes, client
// sessions fed by the change feed) until ctx ends.
func (s *Server) Run(ctx context.Context) {
	go s.fsck.Run(ctx)
	go s.mv.Run(ctx)
	go s.sweepUploads(ctx, s.now())
	go s.sess.Run(ctx)
	go s.feedSessions(ctx)
	s.expireRecycled(ctx, s.cfg.RecycleLifetime, s.cfg.RecycleMaxBytes)
}

var _ message.Namespace = (*Server)(nil)

// Heartbeat implements message.Namespace: it records what a storage
// server reports and answers with its filesystems and pending deletions.
func (s *Server) Heartbeat(_ context.Context, hb message.Heartbeat) (message.HeartbeatReply, error) {
	s.writers.note(hb.Node, hb.Uploads, s.now())
	s.iostat.Note(hb.Node, hb.Accounting, s.now())
	var done []namespace.Deletion
	for _, d := range hb.Done {
		done = append(done, namespace.Deletion(d))
	}
	if err := s.ns.AckDeletions(done); err != nil {
		return message.HeartbeatReply{}, err
	}
	as, err := s.reg.Heartbeat(hb)
	if err != nil {
		return message.HeartbeatReply{}, err
	}
	s.mv.Acked(done)
	s.reg.JudgeSlow()
	s.fsck.Assign(as)
	reply := message.HeartbeatReply{Filesystems: as, Interval: s.reg.Interval()}
	reply.LogLevel, _ = s.fstLevel.Load().(string)
	for _, a := range as {
		ds, err := s.ns.Deletions(a.ID, 1000)
		if err != nil {
			return reply, err
		}
		for _, d := range ds {
			reply.Deletions = append(reply.Deletions, message.Deletion(d))
		}
	}
	return reply, nil
}

// Claim implements message.Namespace.
func (s *Server) Claim(_ context.Context, fid uint64) error {
	_, err := s.ns.ClaimUpload(fid)
	return err
}

// Commit implements message.Namespace.
func (s *Server) Commit(ctx context.Context, c message.Commit) error {
	f, err := s.ns.Commit(c.Fid, c.Size, c.Checksums)
	if err != nil && !kerr.Is(err, kerr.Quota) {
		return err
	}
	// The upload's end: audited as its owner's.
	what := "fid " + strconv.FormatUint(c.Fid, 10)
	owner := auth.Principal{Method: "upload"}
	if f != nil {
		what, _ = s.pathOf(f)
		owner.UID, owner.GID, owner.Name = f.UID, f.GID, strconv.FormatUint(uint64(f.UID), 10)
	}
	return s.audit(ctx, owner, "commit", what, "", err)
}

// pathOf is the path of a file just committed (for the audit log).
func (s *Server) pathOf(f *namespace.Inode) (string, error) {
	_, p, err := s.ns.ByID(f.ID)
	return p, err
}

// Abort implements message.Namespace.
func (s *Server) Abort(_ context.Context, fid uint64) error {
	err := s.ns.Abort(fid)
	if kerr.Is(err, kerr.NotFound) {
		return nil // already committed or aborted
	}
	return err
}

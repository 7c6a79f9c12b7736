// Package storage is the storage server core (EOS: FST). It keeps stripes
// and replicas on its filesystems through the data seam (backend.Store),
// reaches the stripes other storage servers hold through Peers (package
// cluster), verifies the capability of every request, computes checksums
// while bytes stream, encodes/decodes erasure-coded files as their entry
// server, bounds the memory of its streams, carries out the namespace
// server's data movement orders (move.go: stripes copied or rebuilt,
// conversions staged), and reports to the namespace server through
// message.Namespace. Protocols are elsewhere: the HTTP data
// endpoint in datafront, root:// in xrdfront, the internal RPC in cluster
// (this package depends only on its transport-free message vocabulary).
package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Config configures a storage server.
type Config struct {
	Node    string // stable node name, normally host:port of Addr
	Addr    string // advertised HTTP base URL, http://host:port
	XrdAddr string // advertised root:// host:port, if any
	Release string // software version, reported in heartbeats (kaon node ls)
	// LogLevel is the level of Logger, which the namespace server sets
	// (kaon debug); nil: it stays.
	LogLevel  *slog.LevelVar
	Key       *capability.Key
	Namespace message.Namespace
	Paths     []string // filesystem roots to offer at start
	// Store returns the backend of the filesystem at path (posix.New for a
	// directory, a RADOS pool for rados://...). It must neither create
	// anything (a filesystem is made only when the namespace registers it:
	// Store.Initialize) nor block on the storage. An error (a kind of
	// store this binary cannot serve) is reported as the filesystem's
	// reason to be offline.
	Store func(path string) (backend.Store, error)
	// IOTimeout is the I/O deadline: no call on a filesystem is waited
	// for longer (see guard.go). 0 means DefaultIOTimeout, negative none.
	IOTimeout time.Duration
	// Peers reaches the stripes other storage servers hold; nil when this
	// server is alone (uploads and reads needing another server then fail).
	Peers Peers
	// StreamMemory bounds the buffers of all client streams (uploads this
	// server is the entry of, erasure-coded reads) together; streams over
	// it wait. Default DefaultStreamMemory.
	StreamMemory int64
	// LatencyWindow is the span of the latency percentiles heartbeats
	// report; LatencyProbe the period of the probe of idle filesystems
	// (latency.go). 0: defaults; a negative probe period: no probe.
	LatencyWindow time.Duration
	LatencyProbe  time.Duration
	Logger        *slog.Logger
}

// mount is one filesystem root this server offers: its store behind the
// I/O guard, and what the heartbeat last learnt about it.
type mount struct {
	path   string
	raw    backend.Store // the store itself (for the heartbeat's probes)
	store  backend.Store // raw under the guard
	g      *guard
	broken string // why the store could not be opened

	mu       sync.Mutex
	usage    backend.Usage
	usageErr error
	markerID uint32 // the id in the identity marker, until one is assigned
	info     backend.Info
	infoAt   time.Time
	applied  *backend.Settings // the settings last given to Configure
	setupErr string            // why they could not all be applied
}

// infoEvery is how often the heartbeat asks a store what it is (a
// statfs, and for Ceph a health query to the cluster's monitors).
const infoEvery = 10 * time.Second

// refresh asks the store for its usage (and, every infoEvery, its info
// and, while it has no id, its marker), waiting at most wait.
func (m *mount) refresh(wait time.Duration, unassigned bool) {
	if m.broken != "" {
		return
	}
	m.g.probe("usage", wait, func() {
		u, err := m.raw.Usage()
		m.mu.Lock()
		m.usage, m.usageErr = u, err
		m.mu.Unlock()
	})
	m.mu.Lock()
	stale := time.Since(m.infoAt) > infoEvery
	m.mu.Unlock()
	if stale {
		m.g.probe("info", wait, func() {
			in := m.raw.Info()
			m.mu.Lock()
			m.info, m.infoAt = in, time.Now()
			m.mu.Unlock()
		})
	}
	if unassigned {
		m.g.probe("marker", wait, func() {
			id, _ := m.raw.Identity()
			m.mu.Lock()
			m.markerID = id.FsID
			m.mu.Unlock()
		})
	}
}

// configure gives the store set unless it has it already; caller runs it
// as a probe.
func (m *mount) configure(set backend.Settings) {
	m.mu.Lock()
	same := m.applied != nil && *m.applied == set
	m.mu.Unlock()
	if same {
		return
	}
	why := ""
	if err := m.raw.Configure(set); err != nil {
		why = reason(err)
	}
	m.mu.Lock()
	m.applied, m.setupErr = &set, why
	m.infoAt = time.Time{} // the write mode may have changed: ask again
	m.mu.Unlock()
}

// local reports whether reads may be handed to the kernel (sendfile): a
// local disk, where they cannot hang past the guard.
func (m *mount) local() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.info.Kind == backend.KindPosix && m.info.IO == backend.IODirect
}

type filesystem struct {
	id     uint32
	root   string
	store  backend.Store // its mount's, under the guard
	status atomic.Value  // config status string
	files  atomic.Int64  // stripes, as last counted while online
	// noSums: the filesystem keeps no block sums (fs config
	// blocksums=off), so a mount on its host may hand a stripe's
	// descriptor to the kernel (FUSE passthrough), which reads it without
	// any storage server: an update of its stripes is applied before the
	// commit's reply (update.go).
	noSums atomic.Bool
	// unapplied: stripes given a journal since the server started (fid
	// -> the prepare's mark), until a look finds none (current).
	unapplied sync.Map

	// offline is the reason the filesystem cannot be used ("" when it can):
	// its root or identity marker is missing or another filesystem's, so
	// what is at its path now is not what was registered.
	offline atomic.Value

	// fsck (fsck.go): the schedule and counters of its scans.
	scan                         scanState
	scansDone, scansFailed       atomic.Int64
	stripesWalked, bytesScrubbed atomic.Int64
	scanned, scrubbed            atomic.Int64 // by the scan running now
	lastScanDone                 atomic.Int64 // unix ns

	// bitrot (heal.go): bad blocks found in its stripes, and repairs.
	bitrot bitrotCounters

	// leftovers: its stripes left unfinished by a previous run were
	// looked at (leftover.go); 2 while that runs, 1 once done.
	leftovers atomic.Int32

	// changing serializes, by fid, the two ways a stripe's bytes change
	// after it was written: an update rolled forward (journal.go apply)
	// and a bad block rewritten from another copy (heal.go), which must
	// never put back bytes of a version the stripe no longer holds.
	changing [32]sync.Mutex

	// journaling serializes, by fid, the replacement of a stripe's
	// journal (a prepare) with fsck's drop of an obsolete one, so the
	// drop never takes a journal prepared after it looked (journal.go).
	journalMu  sync.Mutex
	journaling map[uint64]*journalLock
}

// lockStripe holds the change lock of the stripe of fid on f.
func (f *filesystem) lockStripe(fid uint64) func() {
	m := &f.changing[fid%uint64(len(f.changing))]
	m.Lock()
	return m.Unlock
}

func (f *filesystem) configStatus() string { s, _ := f.status.Load().(string); return s }

func (f *filesystem) offlineReason() string { s, _ := f.offline.Load().(string); return s }

// writable refuses new stripes on a filesystem an operator took out of
// rw, even if a placement decided before the change still names it, and
// on one that is offline.
func (f *filesystem) writable() error {
	if why := f.offlineReason(); why != "" {
		return kerr.New(kerr.Unavailable, "write", f.root, "filesystem is offline: "+why)
	}
	if st := f.configStatus(); st != "rw" {
		return kerr.New(kerr.ReadOnly, "write", f.root, "filesystem is "+st)
	}
	return nil
}

// Server is one storage server.
type Server struct {
	cfg Config
	log *slog.Logger

	mu     sync.RWMutex
	fs     map[uint32]*filesystem
	paths  []string          // roots offered, including unnumbered ones
	mounts map[string]*mount // by root, one per root for the process
	doneMu sync.Mutex
	done   []message.Deletion

	budget  *budget
	acct    accounting  // I/O by user and application (accounting.go)
	bg      *background // copies that give way to client streams
	writing writing     // uploads claimed and not finished, for heartbeats
	heal    *healer     // repairs of bad copies reads found (heal.go)
	act     activity    // uploads and reads in flight, third-party copies (activity.go)

	applying sync.WaitGroup // update commits' applies after their reply (update.go)

	ready chan struct{}
	once  sync.Once
}

// New creates a storage server; call Run to start heartbeating. The
// filesystem roots in cfg.Paths are offered to the namespace server; a
// root is created only when the namespace registers it for the first time
// (see apply), never on a later start.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Store == nil {
		return nil, errors.New("storage: Config.Store is required")
	}
	switch {
	case cfg.IOTimeout == 0:
		cfg.IOTimeout = DefaultIOTimeout
	case cfg.IOTimeout < 0:
		cfg.IOTimeout = 0
	}
	s := &Server{cfg: cfg, log: cfg.Logger, fs: map[uint32]*filesystem{}, mounts: map[string]*mount{},
		ready: make(chan struct{}), budget: newBudget(cfg.StreamMemory), bg: newBackground(), heal: newHealer()}
	for _, p := range cfg.Paths {
		m, err := s.offer(p)
		if err != nil {
			return nil, err
		}
		if m.broken != "" {
			return nil, fmt.Errorf("filesystem %s: %s", m.path, m.broken)
		}
	}
	return s, nil
}

// offer adds root to the filesystems reported in heartbeats and returns
// its mount. Directories are made absolute; other places (rados://...)
// are taken as they are.
func (s *Server) offer(p string) (*mount, error) {
	abs := p
	if !strings.Contains(p, "://") {
		var err error
		if abs, err = filepath.Abs(p); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.mounts[abs]; m != nil {
		return m, nil
	}
	m := &mount{path: abs, g: newGuard(abs, s.cfg.IOTimeout)}
	m.g.io = newIOStats(s.cfg.LatencyWindow)
	st, err := s.cfg.Store(abs)
	if err != nil {
		m.broken = "cannot open: " + reason(err)
		s.log.Error("cannot serve filesystem", "path", abs, "err", err)
	} else {
		m.raw = st
		m.store = &guarded{Store: st, g: m.g, sendfile: m.local}
	}
	s.paths = append(s.paths, abs)
	s.mounts[abs] = m
	return m, nil
}

// idOf is the id of filesystem root: the one assigned in this run, else
// the one its identity marker had when last read. Caller holds s.mu.
func (s *Server) idOf(root string) uint32 {
	for id, f := range s.fs {
		if f.root == root {
			return id
		}
	}
	m := s.mounts[root]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.markerID
}

// beatWait is how long a heartbeat waits for the answers of its
// filesystems; a filesystem that takes longer is reported with what it
// said last (and goes offline once its question passes the I/O deadline).
const beatWait = 2 * time.Second

// SetXrdAddr sets the root:// host:port advertised in heartbeats; call
// before Run.
func (s *Server) SetXrdAddr(a string) {
	s.mu.Lock()
	s.cfg.XrdAddr = a
	s.mu.Unlock()
}

// Ready is closed after the first successful heartbeat.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Run heartbeats until ctx ends; it also probes the latency of idle
// filesystems and runs their fsck scans (when the namespace takes them).
func (s *Server) Run(ctx context.Context) {
	s.heal.setContext(ctx)
	if s.cfg.LatencyProbe >= 0 {
		go s.probeLatency(ctx, cmp.Or(s.cfg.LatencyProbe, DefaultLatencyProbe))
	}
	if ns, ok := s.cfg.Namespace.(message.Fsck); ok {
		go s.fsckLoop(ctx, ns)
	}
	interval := time.Second
	for {
		reply, initialized, err := s.beat(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("heartbeat failed", "node", s.cfg.Node, "err", err)
		} else {
			if reply.Interval > 0 {
				interval = reply.Interval
			}
			go s.delete(reply.Deletions)
			s.checkLeftovers(ctx)
			if initialized {
				continue // report the new filesystems at once
			}
			s.once.Do(func() { close(s.ready) })
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// beat sends one heartbeat and applies the reply; initialized reports
// whether it initialized a filesystem the namespace just registered.
func (s *Server) beat(ctx context.Context) (reply message.HeartbeatReply, initialized bool, err error) {
	s.mu.RLock()
	mounts := make([]*mount, 0, len(s.paths))
	assigned := map[string]bool{}
	for _, f := range s.fs {
		assigned[f.root] = true
	}
	for _, p := range s.paths {
		mounts = append(mounts, s.mounts[p])
	}
	s.mu.RUnlock()
	// Every filesystem is asked at once: a hung one delays no other.
	var wg sync.WaitGroup
	for _, m := range mounts {
		wg.Add(1)
		go func() { defer wg.Done(); m.refresh(min(beatWait, s.cfg.IOTimeout+time.Second), !assigned[m.path]) }()
	}
	wg.Wait()

	io := s.nodeIO()
	s.mu.RLock()
	hb := message.Heartbeat{Node: s.cfg.Node, Addr: s.cfg.Addr, XrdAddr: s.cfg.XrdAddr, Release: s.cfg.Release, IO: &io,
		Accounting: s.acct.report()}
	for _, m := range mounts {
		hb.Filesystems = append(hb.Filesystems, s.report(m))
	}
	s.mu.RUnlock()
	s.doneMu.Lock()
	hb.Done, s.done = s.done, nil
	s.doneMu.Unlock()
	hb.Uploads = s.writing.list()
	reply, err = s.cfg.Namespace.Heartbeat(ctx, hb)
	if err != nil {
		s.doneMu.Lock()
		s.done = append(s.done, hb.Done...)
		s.doneMu.Unlock()
		return reply, false, err
	}
	s.setLogLevel(reply.LogLevel)
	return reply, s.apply(reply.Filesystems), nil
}

// setLogLevel applies the log level the namespace sent ("": none).
func (s *Server) setLogLevel(level string) {
	var l slog.Level
	if level == "" || s.cfg.LogLevel == nil || l.UnmarshalText([]byte(level)) != nil || l == s.cfg.LogLevel.Level() {
		return
	}
	s.cfg.LogLevel.Set(l)
	s.log.Info("log level set by the namespace server (kaon debug)", "level", l)
}

// report is what the heartbeat says about m. Caller holds s.mu.
func (s *Server) report(m *mount) message.FsReport {
	r := message.FsReport{Path: m.path, ID: s.idOf(m.path), Health: "ok"}
	f := s.fs[r.ID]
	if f != nil && f.root != m.path {
		f = nil
	}
	if f != nil {
		r.Offline = f.offlineReason()
		r.Files = f.files.Load()
	}
	if m.broken != "" {
		r.Offline = m.broken
	} else if why := m.g.offline(); why != "" {
		r.Offline = why
		if f != nil {
			s.setOffline(f, why)
		}
	}
	m.mu.Lock()
	u, uerr, in, setupErr := m.usage, m.usageErr, m.info, m.setupErr
	m.mu.Unlock()
	r.Kind, r.Backend, r.IO, r.FsType, r.BackendHealth = in.Kind, in.Backend, in.IO, in.FsType, in.Health
	r.Latency = m.g.io.latency()
	if r.Offline == "" {
		r.Capacity, r.Used = u.Capacity, u.Used
		switch {
		case uerr == nil:
		case f == nil && kerr.Is(uerr, kerr.NotFound):
			r.Offline = reason(uerr) // nothing there (yet)
		default:
			r.Health = reason(uerr)
		}
		if f != nil && r.Offline == "" {
			r.Files = u.Files
			f.files.Store(u.Files)
		}
	}
	switch {
	case r.Offline != "":
		r.Health = "offline: " + r.Offline
	case r.Health != "ok":
	case m.g.fullReason() != "":
		r.Health = "full: " + m.g.fullReason()
	case setupErr != "":
		r.Health = "settings not applied: " + setupErr
	}
	return r
}

// reason is the message of err without operation and path.
func reason(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) && ke.Msg != "" {
		return ke.Msg
	}
	return err.Error()
}

// apply adopts the namespace's view: ids for our paths, paths added by an
// operator (fs add), config status. A filesystem the namespace registered
// but never saw initialized gets its root and identity marker now; any
// other is checked against its marker and goes offline, never recreated,
// when its root or marker is missing or not its own (a disk that is not
// mounted, a mount that went away, another filesystem's disk).
func (s *Server) apply(as []message.FsAssignment) (initialized bool) {
	for _, a := range as {
		m, err := s.offer(a.Path)
		if err != nil {
			s.log.Error("cannot serve filesystem", "fsid", a.ID, "path", a.Path, "err", err)
			continue
		}
		s.mu.Lock()
		f := s.fs[a.ID]
		if f == nil || f.root != m.path {
			f = &filesystem{id: a.ID, root: m.path, store: m.store}
			f.offline.Store("not checked yet")
			s.fs[a.ID] = f
		}
		f.status.Store(a.ConfigStatus)
		f.setFsck(a.Fsck)
		f.noSums.Store(a.NoBlockSums)
		s.mu.Unlock()
		if m.broken != "" {
			s.setOffline(f, m.broken)
			continue
		}
		if why := m.g.hung(); why != "" {
			s.setOffline(f, why)
			continue
		}
		want := backend.Identity{FsID: a.ID, UUID: a.UUID}
		set := backend.Settings{IO: a.IO, CephPool: a.CephPool, ObjectSize: a.ObjectSize, NoBlockSums: a.NoBlockSums}
		var why string
		var made bool
		ran := m.g.probe("setup", min(beatWait, s.cfg.IOTimeout+time.Second), func() {
			m.configure(set)
			if a.Init {
				if _, err := m.raw.Identity(); kerr.Is(err, kerr.NotFound) {
					if err := m.raw.Initialize(want); err != nil {
						why = "cannot initialize: " + err.Error()
						return
					}
					made = true
				}
			}
			why = m.raw.CheckIdentity(want)
		})
		if !ran {
			continue // still asking: the state stays as it was
		}
		if made {
			s.log.Info("initialized filesystem", "fsid", a.ID, "path", a.Path)
			initialized = true
		}
		if why == "" {
			m.g.answered(nil) // the storage answers again
		}
		s.setOffline(f, why)
	}
	return initialized
}

// setOffline records why f is unusable ("" = usable) and logs changes.
func (s *Server) setOffline(f *filesystem, why string) {
	was := f.offlineReason()
	if was == why {
		return
	}
	f.offline.Store(why)
	switch {
	case why != "":
		s.log.Error("filesystem offline", "fsid", f.id, "path", f.root, "reason", why)
	case was != "not checked yet":
		s.log.Info("filesystem back online", "fsid", f.id, "path", f.root)
	}
}

func (s *Server) delete(ds []message.Deletion) {
	var done []message.Deletion
	for _, d := range ds {
		f := s.local(d.FsID)
		if f == nil || f.offlineReason() != "" {
			continue // kept queued until the filesystem is back
		}
		if err := f.store.Remove(d.Fid); err == nil || kerr.Is(err, kerr.NotFound) {
			done = append(done, d)
		}
	}
	s.doneMu.Lock()
	s.done = append(s.done, done...)
	s.doneMu.Unlock()
}

// local returns the filesystem fsid if this server holds it.
func (s *Server) local(fsid uint32) *filesystem {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.fs[fsid]
}

// Verify checks a capability token against what a request names (the
// one check of every protocol: HTTP data and stripe endpoints, root://).
func (s *Server) Verify(token string, a capability.Access) (*capability.Capability, error) {
	return s.cfg.Key.Verify(token, time.Now(), a)
}

// create starts a new stripe of fid on f.
func (f *filesystem) create(fid uint64, o backend.CreateOptions) (backend.Writer, error) {
	if err := f.writable(); err != nil {
		return nil, err
	}
	return f.store.Create(fid, o)
}

// Package storage is the storage server core (EOS: FST). It keeps stripes
// and replicas on its filesystems through the data seam (backend.Store),
// reaches the stripes other storage servers hold through Peers (package
// cluster), verifies the capability of every request, computes checksums
// while bytes stream, encodes/decodes erasure-coded files as their entry
// server, bounds the memory of its streams, and reports to the namespace
// server through message.Namespace. Protocols are elsewhere: the HTTP data
// endpoint in httpfront, root:// in xrdkaon, the internal RPC in cluster
// (this package depends only on its transport-free message vocabulary).
package storage

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
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
	Node      string // stable node name, normally host:port of Addr
	Addr      string // advertised HTTP base URL, http://host:port
	XrdAddr   string // advertised root:// host:port, if any
	Key       *capability.Key
	Namespace message.Namespace
	Paths     []string // filesystem roots to offer at start
	// Store returns the backend of the filesystem at path (posix.New for a
	// directory). It must not create anything: a filesystem is made only
	// when the namespace registers it (Store.Initialize).
	Store func(path string) backend.Store
	// Peers reaches the stripes other storage servers hold; nil when this
	// server is alone (uploads and reads needing another server then fail).
	Peers Peers
	// StreamMemory bounds the buffers of all client streams (uploads this
	// server is the entry of, erasure-coded reads) together; streams over
	// it wait. Default DefaultStreamMemory.
	StreamMemory int64
	Logger       *slog.Logger
}

type filesystem struct {
	id     uint32
	root   string
	store  backend.Store
	status atomic.Value // config status string
	files  atomic.Int64 // stripes, as last counted while online

	// offline is the reason the filesystem cannot be used ("" when it can):
	// its root or identity marker is missing or another filesystem's, so
	// what is at its path now is not what was registered.
	offline atomic.Value
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
	paths  []string                 // roots offered, including unnumbered ones
	stores map[string]backend.Store // by root, one per root for the process
	doneMu sync.Mutex
	done   []message.Deletion

	budget *budget

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
	s := &Server{cfg: cfg, log: cfg.Logger, fs: map[uint32]*filesystem{}, stores: map[string]backend.Store{},
		ready: make(chan struct{}), budget: newBudget(cfg.StreamMemory)}
	for _, p := range cfg.Paths {
		if _, err := s.offer(p); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// offer adds root to the filesystems reported in heartbeats and returns
// its store.
func (s *Server) offer(p string) (backend.Store, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.stores[abs]; st != nil {
		return st, nil
	}
	s.paths = append(s.paths, abs)
	s.stores[abs] = s.cfg.Store(abs)
	return s.stores[abs], nil
}

// idOf is the id of filesystem root: the one assigned in this run, else the
// one in its identity marker (read once per beat only until it is
// assigned). Caller holds s.mu.
func (s *Server) idOf(root string) uint32 {
	for id, f := range s.fs {
		if f.root == root {
			return id
		}
	}
	id, _ := s.stores[root].Identity()
	return id.FsID
}

// SetXrdAddr sets the root:// host:port advertised in heartbeats; call
// before Run.
func (s *Server) SetXrdAddr(a string) {
	s.mu.Lock()
	s.cfg.XrdAddr = a
	s.mu.Unlock()
}

// Ready is closed after the first successful heartbeat.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Run heartbeats until ctx ends.
func (s *Server) Run(ctx context.Context) {
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
	hb := message.Heartbeat{Node: s.cfg.Node, Addr: s.cfg.Addr, XrdAddr: s.cfg.XrdAddr}
	for _, p := range s.paths {
		r := message.FsReport{Path: p, ID: s.idOf(p), Health: "ok"}
		f := s.fs[r.ID]
		if f != nil && f.root != p {
			f = nil
		}
		if f != nil {
			r.Offline = f.offlineReason()
			r.Files = f.files.Load()
		}
		if r.Offline == "" {
			u, err := s.stores[p].Usage()
			r.Capacity, r.Used = u.Capacity, u.Used
			switch {
			case err == nil:
			case f == nil && kerr.Is(err, kerr.NotFound):
				r.Offline = reason(err) // nothing there (yet)
			default:
				r.Health = reason(err)
			}
			if f != nil && r.Offline == "" {
				r.Files = u.Files
				f.files.Store(u.Files)
			}
		}
		if r.Offline != "" {
			r.Health = "offline: " + r.Offline
		}
		hb.Filesystems = append(hb.Filesystems, r)
	}
	s.mu.RUnlock()
	s.doneMu.Lock()
	hb.Done, s.done = s.done, nil
	s.doneMu.Unlock()
	reply, err = s.cfg.Namespace.Heartbeat(ctx, hb)
	if err != nil {
		s.doneMu.Lock()
		s.done = append(s.done, hb.Done...)
		s.doneMu.Unlock()
		return reply, false, err
	}
	return reply, s.apply(reply.Filesystems), nil
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
		st, err := s.offer(a.Path)
		if err != nil {
			s.log.Error("cannot serve filesystem", "fsid", a.ID, "path", a.Path, "err", err)
			continue
		}
		s.mu.Lock()
		f := s.fs[a.ID]
		if f == nil || f.root != a.Path {
			f = &filesystem{id: a.ID, root: a.Path, store: st}
			f.offline.Store("not checked yet")
			s.fs[a.ID] = f
		}
		f.status.Store(a.ConfigStatus)
		s.mu.Unlock()
		want := backend.Identity{FsID: a.ID, UUID: a.UUID}
		if a.Init {
			if _, err := f.store.Identity(); kerr.Is(err, kerr.NotFound) {
				if err := f.store.Initialize(want); err != nil {
					s.setOffline(f, "cannot initialize: "+err.Error())
					continue
				}
				s.log.Info("initialized filesystem", "fsid", a.ID, "path", a.Path)
				initialized = true
			}
		}
		s.setOffline(f, f.store.CheckIdentity(want))
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

// Package storage is the storage server (EOS: FST). It keeps stripe and
// replica files on local directories ("filesystems"), verifies the
// capability on every request, computes checksums while bytes stream,
// encodes/decodes erasure-coded files as their entry server, and reports to
// the namespace server through cluster.Namespace.
package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/directio"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Config configures a storage server.
type Config struct {
	Node      string // stable node name, normally host:port of Addr
	Addr      string // advertised HTTP base URL, http://host:port
	XrdAddr   string // advertised root:// host:port, if any
	Key       *capability.Key
	Namespace cluster.Namespace
	Paths     []string // filesystem roots to offer at start
	SyncData  bool     // fsync stripe files before committing them
	Logger    *slog.Logger
}

type filesystem struct {
	id     uint32
	root   string
	status atomic.Value // config status string
	files  atomic.Int64
	bucket sync.Map // bucket dirs known to exist
}

func (f *filesystem) configStatus() string { s, _ := f.status.Load().(string); return s }

// writable refuses new stripes on a filesystem an operator took out of
// rw, even if a placement decided before the change still names it.
func (f *filesystem) writable() error {
	if st := f.configStatus(); st != "rw" {
		return kerr.New(kerr.ReadOnly, "write", f.root, "filesystem is "+st)
	}
	return nil
}

// Server is one storage server.
type Server struct {
	cfg  Config
	log  *slog.Logger
	http *http.Client

	mu     sync.RWMutex
	fs     map[uint32]*filesystem
	paths  []string // roots offered, including unnumbered ones
	doneMu sync.Mutex
	done   []cluster.Deletion

	ready chan struct{}
	once  sync.Once
}

// New creates a storage server; call Run to start heartbeating.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, fs: map[uint32]*filesystem{}, ready: make(chan struct{}),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true,
			WriteBufferSize: 256 << 10, ReadBufferSize: 256 << 10}}}
	for _, p := range cfg.Paths {
		if err := s.addPath(p); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Server) addPath(p string) error {
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return fmt.Errorf("filesystem %s: %w", abs, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.paths {
		if q == abs {
			return nil
		}
	}
	s.paths = append(s.paths, abs)
	return nil
}

// idOf is the id of filesystem root: the one assigned in this run, else the
// one in its marker file (read once per beat only until it is assigned).
// Caller holds s.mu.
func (s *Server) idOf(root string) uint32 {
	for id, f := range s.fs {
		if f.root == root {
			return id
		}
	}
	return markerID(root)
}

func markerID(root string) uint32 {
	b, err := os.ReadFile(filepath.Join(root, ".kaon-fsid"))
	if err != nil {
		return 0
	}
	id, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	return uint32(id)
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
		reply, err := s.beat(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("heartbeat failed", "node", s.cfg.Node, "err", err)
		} else {
			s.once.Do(func() { close(s.ready) })
			if reply.Interval > 0 {
				interval = reply.Interval
			}
			go s.delete(reply.Deletions)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

func (s *Server) beat(ctx context.Context) (cluster.HeartbeatReply, error) {
	s.mu.RLock()
	hb := cluster.Heartbeat{Node: s.cfg.Node, Addr: s.cfg.Addr, XrdAddr: s.cfg.XrdAddr}
	for _, p := range s.paths {
		r := cluster.FsReport{Path: p, ID: s.idOf(p), Health: "ok"}
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err != nil {
			r.Health = err.Error()
		} else {
			r.Capacity = st.Blocks * uint64(st.Bsize)
			r.Used = (st.Blocks - st.Bavail) * uint64(st.Bsize)
		}
		if unix.Access(p, unix.W_OK) != nil {
			r.Health = "not writable"
		}
		if f := s.fs[r.ID]; f != nil {
			r.Files = f.files.Load()
		}
		hb.Filesystems = append(hb.Filesystems, r)
	}
	s.mu.RUnlock()
	s.doneMu.Lock()
	hb.Done, s.done = s.done, nil
	s.doneMu.Unlock()
	reply, err := s.cfg.Namespace.Heartbeat(ctx, hb)
	if err != nil {
		s.doneMu.Lock()
		s.done = append(s.done, hb.Done...)
		s.doneMu.Unlock()
		return reply, err
	}
	s.apply(reply.Filesystems)
	return reply, nil
}

// apply adopts the namespace's view: ids for our paths, new paths added by
// an operator (fs add), and config status.
func (s *Server) apply(as []cluster.FsAssignment) {
	for _, a := range as {
		if err := s.addPath(a.Path); err != nil {
			s.log.Error("cannot serve filesystem", "fsid", a.ID, "path", a.Path, "err", err)
			continue
		}
		s.mu.Lock()
		f := s.fs[a.ID]
		if f == nil {
			if markerID(a.Path) != a.ID {
				_ = os.WriteFile(filepath.Join(a.Path, ".kaon-fsid"), []byte(strconv.FormatUint(uint64(a.ID), 10)+"\n"), 0o600)
			}
			f = &filesystem{id: a.ID, root: a.Path}
			f.files.Store(countFiles(a.Path))
			s.fs[a.ID] = f
		}
		f.status.Store(a.ConfigStatus)
		s.mu.Unlock()
	}
}

func countFiles(root string) int64 {
	var n int64
	buckets, _ := os.ReadDir(root)
	for _, b := range buckets {
		if b.IsDir() {
			ents, _ := os.ReadDir(filepath.Join(root, b.Name()))
			n += int64(len(ents))
		}
	}
	return n
}

func (s *Server) delete(ds []cluster.Deletion) {
	var done []cluster.Deletion
	for _, d := range ds {
		f := s.local(d.FsID)
		if f == nil {
			continue
		}
		err := os.Remove(PhysPath(f.root, d.Fid))
		if err == nil {
			f.files.Add(-1)
		}
		if err == nil || errors.Is(err, os.ErrNotExist) {
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

// Verify checks a capability token against the fid a request names.
func (s *Server) Verify(token string, fid uint64) (*capability.Capability, error) {
	c, err := s.cfg.Key.Verify(token, time.Now())
	if err != nil {
		return nil, err
	}
	if c.Fid != fid {
		return nil, kerr.New(kerr.Permission, "capability", c.Path, "capability is for another file")
	}
	return c, nil
}

// create opens a new physical file for writing on f.
// With overlap the file writes in the background (see directio.Create).
func (f *filesystem) create(fid uint64, overlap bool) (*directio.File, error) {
	if err := f.writable(); err != nil {
		return nil, err
	}
	p := PhysPath(f.root, fid)
	dir := filepath.Dir(p)
	if _, ok := f.bucket.Load(dir); !ok {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		f.bucket.Store(dir, true)
	}
	file, err := directio.Create(p, 0o600, overlap)
	if err == nil {
		f.files.Add(1)
	}
	return file, err
}

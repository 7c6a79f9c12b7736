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
	// StreamMemory bounds the buffers of all client streams (uploads this
	// server is the entry of, erasure-coded reads) together; streams over
	// it wait. Default DefaultStreamMemory.
	StreamMemory int64
	Logger       *slog.Logger
}

type filesystem struct {
	id     uint32
	root   string
	uuid   string       // identity the namespace registered; "" until known
	status atomic.Value // config status string
	files  atomic.Int64
	bucket sync.Map // bucket dirs known to exist

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
	cfg  Config
	log  *slog.Logger
	http *http.Client

	mu     sync.RWMutex
	fs     map[uint32]*filesystem
	paths  []string // roots offered, including unnumbered ones
	doneMu sync.Mutex
	done   []cluster.Deletion

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
	s := &Server{cfg: cfg, log: cfg.Logger, fs: map[uint32]*filesystem{}, ready: make(chan struct{}), budget: newBudget(cfg.StreamMemory),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true,
			WriteBufferSize: 256 << 10, ReadBufferSize: 256 << 10}}}
	for _, p := range cfg.Paths {
		if err := s.offer(p); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// offer adds root to the filesystems reported in heartbeats.
func (s *Server) offer(p string) error {
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
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
	id, _, _ := readMarker(root)
	return id
}

// The identity marker at the root of every filesystem: written once, when
// the namespace registers the filesystem, and checked on every heartbeat.
// Format: "fsid=N\nuuid=U\n" (a bare "N\n" from version 1 is read as fsid N
// without uuid).
const markerName = ".kaon-fsid"

func readMarker(root string) (id uint32, uuid string, err error) {
	b, err := os.ReadFile(filepath.Join(root, markerName))
	if err != nil {
		return 0, "", err
	}
	text := strings.TrimSpace(string(b))
	if n, err := strconv.ParseUint(text, 10, 32); err == nil {
		return uint32(n), "", nil
	}
	for _, line := range strings.Split(text, "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "fsid":
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return 0, "", fmt.Errorf("bad fsid in %s", markerName)
			}
			id = uint32(n)
		case "uuid":
			uuid = v
		}
	}
	if id == 0 {
		return 0, "", fmt.Errorf("no fsid in %s", markerName)
	}
	return id, uuid, nil
}

func writeMarker(root string, id uint32, uuid string) error {
	tmp := filepath.Join(root, "."+markerName+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "fsid=%d\nuuid=%s\n", id, uuid)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(root, markerName))
	}
	if err == nil {
		err = syncDir(root)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
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
func (s *Server) beat(ctx context.Context) (reply cluster.HeartbeatReply, initialized bool, err error) {
	s.mu.RLock()
	hb := cluster.Heartbeat{Node: s.cfg.Node, Addr: s.cfg.Addr, XrdAddr: s.cfg.XrdAddr}
	for _, p := range s.paths {
		r := cluster.FsReport{Path: p, ID: s.idOf(p), Health: "ok"}
		f := s.fs[r.ID]
		if f != nil && f.root != p {
			f = nil
		}
		if f != nil {
			r.Offline = f.offlineReason()
			r.Files = f.files.Load()
		} else if _, err := os.Stat(p); err != nil {
			r.Offline = "root directory: " + errText(err)
		}
		if r.Offline == "" {
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
		} else {
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

// errText is err without the path os errors repeat.
func errText(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// apply adopts the namespace's view: ids for our paths, paths added by an
// operator (fs add), config status. A filesystem the namespace registered
// but never saw initialized gets its root and identity marker now; any
// other is checked against its marker and goes offline, never recreated,
// when its root or marker is missing or not its own (a disk that is not
// mounted, a mount that went away, another filesystem's disk).
func (s *Server) apply(as []cluster.FsAssignment) (initialized bool) {
	for _, a := range as {
		if err := s.offer(a.Path); err != nil {
			s.log.Error("cannot serve filesystem", "fsid", a.ID, "path", a.Path, "err", err)
			continue
		}
		s.mu.Lock()
		f := s.fs[a.ID]
		if f == nil || f.root != a.Path {
			f = &filesystem{id: a.ID, root: a.Path}
			f.offline.Store("not checked yet")
			s.fs[a.ID] = f
		}
		f.uuid = a.UUID
		f.status.Store(a.ConfigStatus)
		s.mu.Unlock()
		if a.Init {
			if _, _, err := readMarker(a.Path); errors.Is(err, os.ErrNotExist) {
				if err := initFilesystem(a.Path, a.ID, a.UUID); err != nil {
					s.setOffline(f, "cannot initialize: "+err.Error())
					continue
				}
				s.log.Info("initialized filesystem", "fsid", a.ID, "path", a.Path)
				initialized = true
			}
		}
		s.setOffline(f, checkIdentity(f))
	}
	return initialized
}

// checkIdentity says why f's root is not the registered filesystem ("" if
// it is).
func checkIdentity(f *filesystem) string {
	if st, err := os.Stat(f.root); err != nil {
		return "root directory: " + errText(err)
	} else if !st.IsDir() {
		return "root is not a directory"
	}
	id, uuid, err := readMarker(f.root)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "identity marker " + markerName + " missing (filesystem not mounted?)"
	case err != nil:
		return "identity marker: " + errText(err)
	case id != f.id:
		return fmt.Sprintf("identity marker names fs %d, not fs %d", id, f.id)
	case uuid == "" && f.uuid != "":
		// Written before markers carried a uuid: adopt it now.
		if err := writeMarker(f.root, f.id, f.uuid); err != nil {
			return "cannot upgrade identity marker: " + err.Error()
		}
	case f.uuid != "" && uuid != f.uuid:
		return fmt.Sprintf("identity marker is of another instance's fs %d (uuid %s, expected %s)", id, uuid, f.uuid)
	}
	return ""
}

// initFilesystem creates root (if missing) and its identity marker; it
// refuses a directory that already holds something.
func initFilesystem(root string, id uint32, uuid string) error {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Name() != "lost+found" {
			return fmt.Errorf("%s is not empty (%s); refusing to initialize over existing data", root, e.Name())
		}
	}
	return writeMarker(root, id, uuid)
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
	default:
		f.files.Store(countFiles(f.root))
		if was != "not checked yet" {
			s.log.Info("filesystem back online", "fsid", f.id, "path", f.root)
		}
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
		if f == nil || f.offlineReason() != "" {
			continue // kept queued until the filesystem is back
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
		// Never create anything in a root that is not (or no longer) the
		// registered filesystem: a missing bucket is made only after the
		// identity marker has been seen.
		if why := checkIdentity(f); why != "" {
			return nil, kerr.New(kerr.Unavailable, "write", f.root, "filesystem is offline: "+why)
		}
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
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

// Package mgm is the namespace server (EOS: MGM). It owns the namespace,
// the filesystem registry and placement; it answers metadata requests
// itself and sends data requests to storage servers with a signed,
// expiring capability.
package mgm

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	pathpkg "path"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/httpfront"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// Config configures a namespace server.
type Config struct {
	Namespace         *namespace.Namespace
	Key               *capability.Key
	HeartbeatInterval time.Duration // how often storage servers report; default 1s
	CapabilityTTL     time.Duration // lifetime of redirect capabilities; default 5m
	Logger            *slog.Logger
}

// Server is the namespace server.
type Server struct {
	ns  *namespace.Namespace
	key *capability.Key
	reg *registry
	ttl time.Duration
	log *slog.Logger

	sumMu      sync.Mutex
	sumPending map[string]*sumCall // checksums being computed on request, by fid/type
}

// New creates a namespace server.
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
	reg, err := loadRegistry(cfg.Namespace.Engine(), cfg.HeartbeatInterval)
	if err != nil {
		return nil, err
	}
	return &Server{ns: cfg.Namespace, key: cfg.Key, reg: reg, ttl: cfg.CapabilityTTL, log: cfg.Logger}, nil
}

// Namespace returns the namespace the server owns.
func (s *Server) Namespace() *namespace.Namespace { return s.ns }

// Heartbeat implements cluster.Namespace.
func (s *Server) Heartbeat(_ context.Context, hb cluster.Heartbeat) (cluster.HeartbeatReply, error) {
	var done []namespace.Deletion
	for _, d := range hb.Done {
		done = append(done, namespace.Deletion(d))
	}
	if err := s.ns.AckDeletions(done); err != nil {
		return cluster.HeartbeatReply{}, err
	}
	as, err := s.reg.heartbeat(hb)
	if err != nil {
		return cluster.HeartbeatReply{}, err
	}
	reply := cluster.HeartbeatReply{Filesystems: as, Interval: s.reg.interval}
	for _, a := range as {
		ds, err := s.ns.Deletions(a.ID, 1000)
		if err != nil {
			return reply, err
		}
		for _, d := range ds {
			reply.Deletions = append(reply.Deletions, cluster.Deletion(d))
		}
	}
	return reply, nil
}

// Claim implements cluster.Namespace.
func (s *Server) Claim(_ context.Context, fid uint64) error {
	_, err := s.ns.ClaimUpload(fid)
	return err
}

// Commit implements cluster.Namespace.
func (s *Server) Commit(_ context.Context, c cluster.Commit) error {
	_, err := s.ns.Commit(c.Fid, c.Size, c.Checksums)
	return err
}

// Abort implements cluster.Namespace.
func (s *Server) Abort(_ context.Context, fid uint64) error {
	err := s.ns.Abort(fid)
	if kerr.Is(err, kerr.NotFound) {
		return nil // already committed or aborted
	}
	return err
}

// Redirect is where a client must go for data.
type Redirect struct {
	Addr  string // storage server HTTP base URL
	Fid   uint64
	Token string
	Cap   *capability.Capability
}

// URL is the HTTP data URL of the redirect.
func (r Redirect) URL() string {
	return fmt.Sprintf("%s%s%x?cap=%s", r.Addr, httpfront.DataPath, r.Fid, url.QueryEscape(r.Token))
}

// XrdAddr is the root:// host:port of the storage server, if it has one.
func (s *Server) XrdAddr(httpAddr string) string { return s.reg.xrdAddr(httpAddr) }

// OpenWrite starts an upload of path and returns where to send the bytes.
// With mkpath, missing parent directories are created first (as XRootD
// does for uploads), unless the nearest existing one has sys.mkpath=off.
func (s *Server) OpenWrite(c namespace.Caller, path string, o namespace.CreateOptions, mkpath bool) (Redirect, error) {
	p, err := namespace.CleanPath(path)
	if err != nil {
		return Redirect{}, kerr.WithOp(err, "create")
	}
	f, err := s.ns.BeginCreate(c, p, o, s.reg.place)
	if mkpath && kerr.Is(err, kerr.NotFound) {
		if err = s.makeParents(c, p); err == nil {
			f, err = s.ns.BeginCreate(c, p, o, s.reg.place)
		}
	}
	if err != nil {
		return Redirect{}, err
	}
	cp := &capability.Capability{Fid: f.ID, Write: true, Path: p, Layout: f.Layout, UID: c.UID, GID: c.GID,
		Expires: time.Now().Add(s.ttl).Unix()}
	for t := range f.Checksums {
		cp.Checksums = append(cp.Checksums, t)
	}
	for _, fsid := range f.Locations {
		cp.Targets = append(cp.Targets, capability.Target{FsID: fsid, Addr: s.reg.addr(fsid)})
	}
	return Redirect{Addr: cp.Targets[0].Addr, Fid: f.ID, Token: s.key.Sign(cp), Cap: cp}, nil
}

// makeParents creates the missing directories above clean path p; the
// caller needs write permission on the nearest existing one.
func (s *Server) makeParents(c namespace.Caller, p string) error {
	dir := pathpkg.Dir(p)
	for anc := dir; ; anc = pathpkg.Dir(anc) {
		n, err := s.ns.Stat(c, anc)
		if kerr.Is(err, kerr.NotFound) {
			continue
		}
		if err != nil {
			return kerr.WithOp(err, "create")
		}
		if !n.IsDir {
			return kerr.New(kerr.NotDir, "create", p, anc+" is not a directory")
		}
		if n.XAttrs[namespace.AttrMkPath] == "off" {
			return kerr.New(kerr.NotFound, "create", p, "parent directory does not exist ("+anc+" has "+namespace.AttrMkPath+"=off)")
		}
		break
	}
	return kerr.WithOp(s.ns.Mkdir(c, dir, 0o755, true), "create")
}

// OpenRead authorizes a read of path and picks the storage server to serve
// it: the first readable replica, or for EC the first readable stripe's
// server (it gathers the rest).
func (s *Server) OpenRead(c namespace.Caller, path string) (Redirect, *namespace.Inode, error) {
	n, err := s.ns.Stat(c, path)
	if err != nil {
		return Redirect{}, nil, err
	}
	if n.IsDir {
		return Redirect{}, n, kerr.New(kerr.IsDir, "read", path, "is a directory")
	}
	if !n.Permits(c, 4) {
		return Redirect{}, n, kerr.New(kerr.Permission, "read", path, "read permission denied")
	}
	p, _ := namespace.CleanPath(path)
	cp := &capability.Capability{Fid: n.ID, Path: p, Layout: n.Layout, Size: n.Size, Sums: n.Checksums,
		UID: c.UID, GID: c.GID, Expires: time.Now().Add(s.ttl).Unix()}
	entry := ""
	for _, fsid := range n.Locations {
		addr, ok := s.reg.readable(fsid)
		if ok && entry == "" {
			entry = addr
		}
		cp.Targets = append(cp.Targets, capability.Target{FsID: fsid, Addr: s.reg.addr(fsid)})
	}
	if entry == "" && len(n.Locations) == 0 {
		entry = s.reg.anyAddr() // an empty file has no stripes; any server answers
	}
	if entry == "" {
		return Redirect{}, n, kerr.New(kerr.IO, "read", p, "no storage server holding this file is reachable")
	}
	return Redirect{Addr: entry, Fid: n.ID, Token: s.key.Sign(cp), Cap: cp}, n, nil
}

// Filesystems lists the registry for `fs ls`.
func (s *Server) Filesystems() []FsState { return s.reg.list() }

// AddFilesystem registers a new filesystem on a storage server node.
func (s *Server) AddFilesystem(nodeName, path, group string) (FsState, error) {
	if nodeName == "" || path == "" || path[0] != '/' {
		return FsState{}, kerr.New(kerr.Invalid, "fs add", nodeName+":"+path, "need a node and an absolute path")
	}
	if group != "" && spaceOf(group) == "" {
		return FsState{}, kerr.New(kerr.Invalid, "fs add", group, "bad group name")
	}
	s.reg.mu.Lock()
	defer s.reg.mu.Unlock()
	if _, ok := s.reg.nodes[nodeName]; !ok {
		return FsState{}, kerr.New(kerr.NotFound, "fs add", nodeName, "no storage server with that node name has registered")
	}
	f, err := s.reg.addLocked(nodeName, path, group)
	if err != nil {
		return FsState{}, err
	}
	return *f, nil
}

// ReinitFilesystem lets the storage server create filesystem id anew.
func (s *Server) ReinitFilesystem(id uint32) error { return s.reg.reinit(id) }

// ConfigFilesystem sets a filesystem key (configstatus, group).
func (s *Server) ConfigFilesystem(id uint32, key, value string) error {
	return s.reg.config(id, key, value)
}

// Stripe describes one physical file of a logical file.
type Stripe struct {
	Index    int    `json:"index"`
	FsID     uint32 `json:"fsid"`
	Node     string `json:"node"`
	PhysPath string `json:"physpath"`
}

// FileInfo returns a file's stripes and their physical paths.
func (s *Server) FileInfo(c namespace.Caller, path string) (*namespace.Inode, []Stripe, error) {
	n, err := s.ns.Stat(c, path)
	if err != nil || n.IsDir {
		return n, nil, err
	}
	var out []Stripe
	for i, fsid := range n.Locations {
		out = append(out, Stripe{Index: i, FsID: fsid, Node: s.reg.addr(fsid), PhysPath: posix.PhysPath(s.reg.path(fsid), n.ID)})
	}
	return n, out, nil
}

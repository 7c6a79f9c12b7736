package nsserver

import (
	"cmp"
	"context"
	pathpkg "path"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Open authorizes p to read or write path and returns the grant. A write
// with truncate (or create, of a missing file) is an upload that replaces
// the file atomically at commit; a write without them, or with Update,
// of an existing file is an update session that changes it in place.
// Symbolic links on path are followed (symlink.go), except by an
// exclusive create, which a link in the way refuses as open(2) does.
func (s *Server) Open(ctx context.Context, p auth.Principal, path string, r nsapi.OpenRequest) (*nsapi.Grant, error) {
	read := !r.Write && !r.Create && !r.Truncate
	named := clean(path) // what a root:// client names again at the storage server
	if !r.Exclusive {
		op, what := auth.ScopeCreate, "write"
		if read {
			op, what = auth.ScopeRead, "read"
		}
		to, _, err := s.follow(p, op, path, what)
		switch {
		case kerr.Is(err, kerr.NotFound) && r.MkPath:
			// missing parent directories, made below
		case err != nil && read:
			return nil, s.refused(ctx, p, what, path, err)
		case err != nil:
			return nil, s.audit(ctx, p, what, path, "", err)
		default:
			path = to
		}
	}
	if read {
		if err := scope(p, auth.ScopeRead, path, "read"); err != nil {
			return nil, s.refused(ctx, p, "read", path, err)
		}
		g, err := s.openRead(p, path, named, r.App)
		return g, s.refused(ctx, p, "read", path, err)
	}
	// Whether the open replaces or updates an existing file is known only
	// to the namespace's own step: a Stat made here would race with a
	// create. So a principal whose scopes allow creating but not
	// modifying opens exclusively, and the namespace refuses to touch a
	// file that exists by then (replace is the modify scope's).
	if err := scope(p, auth.ScopeCreate, path, "write"); err != nil {
		return nil, s.audit(ctx, p, "write", path, "", err)
	}
	modify := scope(p, auth.ScopeModify, path, "write")
	if s.openRace != nil {
		s.openRace()
	}
	g, err := s.open(p, path, named, r, modify)
	return g, s.audit(ctx, p, "write", path, "", err)
}

// open starts an upload or an update session of path (named: the path
// the client named, which its capability carries); modify is nil when p
// may change an existing file, else the reason it may not.
func (s *Server) open(p auth.Principal, path, named string, r nsapi.OpenRequest, modify error) (*nsapi.Grant, error) {
	c := caller(p)
	if !r.Truncate && (r.Update || !r.Create) {
		n, err := s.ns.Stat(c, path)
		switch {
		case err == nil && modify != nil:
			return nil, modify
		case err == nil:
			return s.openUpdate(p, clean(path), named, n, r.App)
		case !kerr.Is(err, kerr.NotFound) || !r.Create:
			return nil, err
		case r.Update:
			// A ranged write of a missing file updates a new empty one,
			// created only if still missing (one created meanwhile is
			// updated, if p may modify it).
			n, err = s.ns.CreateEmpty(c, path, namespace.CreateOptions{Mode: r.Mode, Exclusive: true})
			if kerr.Is(err, kerr.Exists) {
				if modify != nil {
					return nil, modify
				}
				n, err = s.ns.Stat(c, path)
			}
			if err != nil {
				return nil, err
			}
			return s.openUpdate(p, clean(path), named, n, r.App)
		}
	}
	if r.Rewrite != 0 && s.sess.Locked(r.Rewrite) { // locks are the file's id's, which a rewrite changes
		return nil, kerr.New(kerr.Busy, "open", path, "the file is locked: it is changed in place, not rewritten")
	}
	g, err := s.openWrite(p, path, named, namespace.CreateOptions{Exclusive: r.Exclusive || modify != nil, Mode: r.Mode, SizeHint: r.Size,
		Rewrite: r.Rewrite, RewriteVersion: r.RewriteVersion, SetMode: r.SetMode, MTime: r.MTime}, r.MkPath && r.Rewrite == 0, r.App)
	if kerr.Is(err, kerr.Exists) && !r.Exclusive && modify != nil {
		return nil, modify // it exists: replacing it is a modification
	}
	return g, err
}

// openWrite starts an upload of path. With mkpath, missing parent
// directories are created first (as XRootD does for uploads), unless the
// nearest existing one has sys.mkpath=off.
func (s *Server) openWrite(pr auth.Principal, path, named string, o namespace.CreateOptions, mkpath bool, app string) (*nsapi.Grant, error) {
	c := caller(pr)
	p, err := nsapi.CleanPath(path)
	if err != nil {
		return nil, kerr.WithOp(err, "create")
	}
	f, err := s.ns.BeginCreate(c, p, o, s.reg.Place)
	if mkpath && kerr.Is(err, kerr.NotFound) {
		if err = s.makeParents(c, p); err == nil {
			f, err = s.ns.BeginCreate(c, p, o, s.reg.Place)
		}
	}
	if err != nil {
		return nil, err
	}
	cp := &capability.Capability{Fid: f.ID, Write: true, Path: cmp.Or(named, p), Layout: f.Layout, UID: pr.UID, GID: pr.GID, App: app,
		Expires: s.now().Add(s.ttl).Unix()}
	for t := range f.Checksums {
		cp.Checksums = append(cp.Checksums, t)
	}
	for _, fsid := range f.Locations {
		cp.Targets = append(cp.Targets, capability.Target{FsID: fsid, Addr: s.reg.Node(fsid).HTTP})
	}
	return &nsapi.Grant{File: entryOf(p, f), Token: s.key.Sign(cp), Server: nodeOf(s.reg.Node(f.Locations[0]))}, nil
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
		if n.XAttrs[nsapi.AttrMkPath] == "off" {
			return kerr.New(kerr.NotFound, "create", p, "parent directory does not exist ("+anc+" has "+nsapi.AttrMkPath+"=off)")
		}
		break
	}
	return kerr.WithOp(s.ns.Mkdir(c, dir, 0o755, true), "create")
}

// openRead authorizes a read of path (named: the path the client named,
// "" for path; its capability carries it) and picks the storage server to
// serve it: the first readable replica, or for EC the first readable
// stripe's server (it gathers the rest).
func (s *Server) openRead(pr auth.Principal, path, named, app string) (*nsapi.Grant, error) {
	n, err := s.ns.Stat(caller(pr), path)
	if err != nil {
		return nil, err
	}
	if n.IsDir {
		return nil, kerr.New(kerr.IsDir, "read", path, "is a directory")
	}
	if n.IsLink() { // replaced by a link since Open followed the path
		return nil, kerr.New(kerr.Busy, "read", path, "became a symbolic link while being opened; retry")
	}
	if !s.canRead(pr, n) {
		return nil, kerr.New(kerr.Permission, "read", path, "read permission denied")
	}
	p, _ := nsapi.CleanPath(path)
	cp := &capability.Capability{Fid: n.ID, Path: cmp.Or(named, p), Layout: n.Layout, Size: n.Size, Sums: n.CurrentChecksums(),
		DataVersion: n.DataVersion, Stale: n.Stale, UID: pr.UID, GID: pr.GID, App: app, Expires: s.now().Add(s.ttl).Unix()}
	entry := s.targets(cp, n.Locations)
	if entry.HTTP == "" && len(n.Locations) == 0 {
		entry = s.reg.AnyNode() // an empty file has no stripes; any server answers
	}
	if entry.HTTP == "" {
		return nil, kerr.New(kerr.Unavailable, "read", p, "no storage server holding this file is reachable")
	}
	return &nsapi.Grant{File: entryOf(p, n), Token: s.key.Sign(cp), Server: nodeOf(entry)}, nil
}

// targets lists the filesystems locs as cp's targets and returns the
// first reachable storage server holding a current stripe of them; if
// none reports on time, the first whose reports are only late.
func (s *Server) targets(cp *capability.Capability, locs []uint32) fleet.Node {
	var entry, late fleet.Node
	for i, fsid := range locs {
		if node, ok := s.reg.Readable(fsid); ok && entry.HTTP == "" && !cp.IsStale(i) {
			entry = node
		} else if node, ok := s.reg.ReadableLate(fsid); ok && late.HTTP == "" && !cp.IsStale(i) {
			late = node
		}
		cp.Targets = append(cp.Targets, capability.Target{FsID: fsid, Addr: s.reg.Node(fsid).HTTP})
	}
	return cmp.Or(entry, late)
}

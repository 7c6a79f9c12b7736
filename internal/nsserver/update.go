package nsserver

// Files that change in place (issue 22): update sessions and
// truncations. The service grants an update session of a committed file
// (a write capability with Update, the file's data version and its stale
// stripes) and records each change a storage server commits
// (CommitUpdate, message.Updates) as the file's next data version.

import (
	"cmp"
	"context"
	pathpkg "path"
	"strconv"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

var _ message.Updates = (*Server)(nil)

// openUpdate grants an update session of committed file n at path p: the
// storage server it names runs it (the first current stripe's, which
// reaches the others).
func (s *Server) openUpdate(pr auth.Principal, p, named string, n *namespace.Inode, app string) (*nsapi.Grant, error) {
	if n.IsDir {
		return nil, kerr.New(kerr.IsDir, "open", p, "is a directory")
	}
	if n.IsLink() { // replaced by a link since Open followed the path
		return nil, kerr.New(kerr.Busy, "open", p, "became a symbolic link while being opened; retry")
	}
	if !s.ns.Permits(caller(pr), n, namespace.Update) {
		return nil, kerr.New(kerr.Permission, "open", p, "write permission denied")
	}
	if namespace.IsVersionDir(pathpkg.Base(pathpkg.Dir(p))) {
		return nil, kerr.New(kerr.ReadOnly, "open", p, "a kept version of a file is not changed in place")
	}
	l, err := layout.Parse(n.Layout)
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, "open", p, err)
	}
	cp := &capability.Capability{Fid: n.ID, Write: true, Update: true, Path: cmp.Or(named, p), Layout: n.Layout, Size: n.Size,
		DataVersion: n.DataVersion, Stale: n.Stale, UID: pr.UID, GID: pr.GID, App: app, Expires: s.now().Add(s.ttl).Unix()}
	for t := range n.Checksums {
		cp.Checksums = append(cp.Checksums, t)
	}
	locs := n.Locations
	if len(locs) == 0 {
		// An empty file has no stripes: the session creates them where
		// its parent's space places a new file.
		dir, err := s.ns.Stat(namespace.Caller{}, pathpkg.Dir(p))
		if err != nil {
			return nil, err
		}
		if locs, err = s.reg.Place(l, dir.XAttrs[nsapi.AttrSpace]); err != nil {
			return nil, kerr.WithOp(err, "open")
		}
		cp.Fresh = true
	}
	entry := s.targets(cp, locs)
	if entry.HTTP == "" {
		return nil, kerr.New(kerr.Unavailable, "open", p, "no storage server holding a current stripe of this file is reachable")
	}
	return &nsapi.Grant{File: entryOf(p, n), Token: s.key.Sign(cp), Server: nodeOf(entry)}, nil
}

// CommitUpdate implements message.Updates: the file gets its next data
// version.
func (s *Server) CommitUpdate(ctx context.Context, u message.UpdateCommit) (message.FileVersion, error) {
	f, err := s.ns.CommitUpdate(namespace.DataUpdate{Fid: u.Fid, Base: u.Base, Tag: u.Tag, Size: u.Size, Locations: u.Locations,
		Stale: u.Stale, Sums: u.Checksums})
	what := "fid " + strconv.FormatUint(u.Fid, 10)
	owner := auth.Principal{Method: "update"}
	if f != nil {
		what, _ = s.pathOf(f)
		owner.UID, owner.GID, owner.Name = f.UID, f.GID, strconv.FormatUint(uint64(f.UID), 10)
	}
	if err := s.audit(ctx, owner, "update", what, "", err); err != nil {
		return message.FileVersion{}, err
	}
	return versionOf(f), nil
}

// MarkStale implements message.Updates.
func (s *Server) MarkStale(_ context.Context, fid, version uint64, stripe int) error {
	return s.ns.MarkStale(fid, version, stripe)
}

// FileVersion implements message.Updates.
func (s *Server) FileVersion(ctx context.Context, fid uint64) (message.FileVersion, error) {
	f, _, err := s.ns.ByID(fid)
	if err != nil {
		return message.FileVersion{}, err
	}
	// Storage servers act on the answer for good (apply an update's
	// journals, roll a stripe forward): what it says must be durable.
	if err := s.ns.Durable(ctx); err != nil {
		return message.FileVersion{}, err
	}
	if f.IsDir {
		return message.FileVersion{}, kerr.New(kerr.IsDir, "update", "fid "+strconv.FormatUint(fid, 10), "is a directory")
	}
	return versionOf(f), nil
}

func versionOf(f *namespace.Inode) message.FileVersion {
	return message.FileVersion{DataVersion: f.DataVersion, Tag: f.DataTag, Size: f.Size, Locations: f.Locations, Stale: f.Stale}
}

// truncate changes the size of committed file n at p in place: an update
// session of one truncation, run by a storage server.
func (s *Server) truncate(ctx context.Context, pr auth.Principal, p string, n *namespace.Inode, size int64) error {
	if size < 0 {
		return kerr.New(kerr.Invalid, "truncate", p, "negative size")
	}
	g, err := s.openUpdate(pr, p, "", n, "")
	if err != nil {
		return kerr.WithOp(err, "truncate")
	}
	if s.data == nil {
		return kerr.New(kerr.Unsupported, "truncate", p, "this namespace server cannot reach file data")
	}
	return kerr.WithOp(s.data.Truncate(ctx, g.Server.HTTP, g.Token, size), "truncate")
}

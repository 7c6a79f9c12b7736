package httpfront

import (
	"context"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Admin API: entries and their attributes, versions.

func (a api) stat(ctx context.Context, c auth.Principal, r nsapi.PathRequest) (nsapi.Entry, error) {
	return a.ns.Stat(ctx, c, r.Path)
}

// list lists a directory; a file lists as itself.
func (a api) list(ctx context.Context, c auth.Principal, r nsapi.PathRequest) ([]nsapi.Entry, error) {
	p, err := nsapi.CleanPath(r.Path)
	if err != nil {
		return nil, kerr.WithOp(err, "ls")
	}
	e, err := a.ns.Stat(ctx, c, p)
	if err != nil {
		return nil, err
	}
	if !e.IsDir {
		return []nsapi.Entry{e}, nil
	}
	return a.ns.List(ctx, c, p)
}

func (a api) fileInfo(ctx context.Context, c auth.Principal, r nsapi.PathRequest) (nsapi.Entry, error) {
	return a.ns.FileInfo(ctx, c, r.Path)
}

// mkdir, chmod and chown answer the entry as it is after the change, so
// that a client caching attributes (kaon mount) needs no stat after
// them; an entry the caller may not stat is answered empty (ID 0).
func (a api) mkdir(ctx context.Context, c auth.Principal, r nsapi.MkdirRequest) (*nsapi.Entry, error) {
	return a.changed(ctx, c, r.Path, a.ns.Mkdir(ctx, c, r.Path, uint32(r.Mode), r.Parents))
}

func (a api) chmod(ctx context.Context, c auth.Principal, r nsapi.ChmodRequest) (*nsapi.Entry, error) {
	return a.changed(ctx, c, r.Path, a.ns.Chmod(ctx, c, r.Path, uint32(r.Mode)))
}

func (a api) chown(ctx context.Context, c auth.Principal, r nsapi.ChownRequest) (*nsapi.Entry, error) {
	return a.changed(ctx, c, r.Path, a.ns.Chown(ctx, c, r.Path, r.UID, r.GID))
}

// changed answers a change of path that ended with err: its entry now.
func (a api) changed(ctx context.Context, c auth.Principal, path string, err error) (*nsapi.Entry, error) {
	if err != nil {
		return nil, err
	}
	e, err := a.ns.Stat(ctx, c, path)
	if err != nil {
		return &nsapi.Entry{}, nil
	}
	return &e, nil
}

func (a api) touch(ctx context.Context, c auth.Principal, r nsapi.TouchRequest) (nsapi.Entry, error) {
	return a.ns.Touch(ctx, c, r.Path, r.Exclusive, uint32(r.Mode))
}

func (a api) symlink(ctx context.Context, c auth.Principal, r nsapi.SymlinkRequest) (nsapi.Entry, error) {
	return a.ns.Symlink(ctx, c, r.Target, r.Path)
}

func (a api) truncate(ctx context.Context, c auth.Principal, r nsapi.TruncateRequest) (done, error) {
	return done{}, a.ns.Truncate(ctx, c, r.Path, r.Size)
}

func (a api) utimes(ctx context.Context, c auth.Principal, r nsapi.UtimesRequest) (done, error) {
	return done{}, a.ns.SetMTime(ctx, c, r.Path, r.MTime, r.Now)
}

func (a api) statFS(ctx context.Context, c auth.Principal, r nsapi.PathRequest) (nsapi.SpaceStats, error) {
	return a.ns.StatFS(ctx, c, r.Path)
}

func (a api) remove(ctx context.Context, c auth.Principal, r nsapi.RemoveRequest) (done, error) {
	return done{}, a.ns.Remove(ctx, c, r.Path, nsapi.RemoveOptions{Any: true, Recursive: r.Recursive})
}

func (a api) rename(ctx context.Context, c auth.Principal, r nsapi.RenameRequest) (done, error) {
	_, err := a.ns.Rename(ctx, c, r.From, r.To, r.Overwrite)
	return done{}, err
}

func (a api) setAttr(ctx context.Context, c auth.Principal, r nsapi.AttrRequest) (done, error) {
	return done{}, a.ns.SetXAttr(ctx, c, r.Path, r.Name, r.Value)
}

func (a api) removeAttr(ctx context.Context, c auth.Principal, r nsapi.AttrRequest) (done, error) {
	return done{}, a.ns.RemoveXAttr(ctx, c, r.Path, r.Name)
}

// attrs lists extended attributes as name/value pairs sorted by name.
func (a api) attrs(ctx context.Context, c auth.Principal, r nsapi.PathRequest) ([][2]string, error) {
	return a.ns.XAttrs(ctx, c, r.Path)
}

func (a api) versions(ctx context.Context, c auth.Principal, r nsapi.PathRequest) ([]nsapi.Version, error) {
	return a.ns.Versions(ctx, c, r.Path)
}

func (a api) restoreVersion(ctx context.Context, c auth.Principal, r nsapi.RestoreVersionRequest) (nsapi.Entry, error) {
	return a.ns.RestoreVersion(ctx, c, r.Path, r.Version)
}

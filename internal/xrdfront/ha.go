package xrdfront

import (
	"context"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// HA serves the manager listener of one namespace server of a replicated
// instance (internal/ha): requests go to this server's namespace while it
// is the active one, are redirected (kXR_redirect) to the active server's
// root:// listener while it is a standby, and otherwise fail with the
// reason (kXR_wait while an election runs, kXR_ServerError "namespace
// unavailable" without a quorum).
type HA struct {
	// Route returns this server's namespace when it is active; else the
	// active server's root:// host:port, or why there is none.
	Route func() (ns xrootd.Namespace, active string, err error)
}

var _ xrootd.Namespace = HA{}

func (h HA) ns() (xrootd.Namespace, error) {
	ns, active, err := h.Route()
	switch {
	case ns != nil:
		return ns, nil
	case active != "":
		host, port, perr := xrootd.SplitHostPort(active)
		if perr == nil {
			return nil, &xrootd.RedirectError{Host: host, Port: port}
		}
		return nil, kerr.New(kerr.Down, "redirect", active, "the active namespace server's root:// address is unusable")
	case err == nil:
		// An active server is known but serves no root://.
		return nil, kerr.New(kerr.Down, "redirect", "", "the active namespace server has no root:// listener")
	}
	return nil, err
}

func (h HA) Stat(ctx context.Context, id xrootd.Identity, p string) (xrootd.FileInfo, error) {
	ns, err := h.ns()
	if err != nil {
		return xrootd.FileInfo{}, err
	}
	return ns.Stat(ctx, id, p)
}

func (h HA) List(ctx context.Context, id xrootd.Identity, p string) ([]xrootd.FileInfo, error) {
	ns, err := h.ns()
	if err != nil {
		return nil, err
	}
	return ns.List(ctx, id, p)
}

func (h HA) Mkdir(ctx context.Context, id xrootd.Identity, p string, mode uint32, parents bool) error {
	ns, err := h.ns()
	if err != nil {
		return err
	}
	return ns.Mkdir(ctx, id, p, mode, parents)
}

func (h HA) Remove(ctx context.Context, id xrootd.Identity, p string) error {
	ns, err := h.ns()
	if err != nil {
		return err
	}
	return ns.Remove(ctx, id, p)
}

func (h HA) Rmdir(ctx context.Context, id xrootd.Identity, p string) error {
	ns, err := h.ns()
	if err != nil {
		return err
	}
	return ns.Rmdir(ctx, id, p)
}

func (h HA) Rename(ctx context.Context, id xrootd.Identity, from, to string) error {
	ns, err := h.ns()
	if err != nil {
		return err
	}
	return ns.Rename(ctx, id, from, to)
}

func (h HA) Chmod(ctx context.Context, id xrootd.Identity, p string, mode uint32) error {
	ns, err := h.ns()
	if err != nil {
		return err
	}
	return ns.Chmod(ctx, id, p, mode)
}

func (h HA) Truncate(ctx context.Context, id xrootd.Identity, p string, size int64) error {
	ns, err := h.ns()
	if err != nil {
		return err
	}
	return ns.Truncate(ctx, id, p, size)
}

func (h HA) Checksum(ctx context.Context, id xrootd.Identity, p, algo string) (string, error) {
	ns, err := h.ns()
	if err != nil {
		return "", err
	}
	return ns.Checksum(ctx, id, p, algo)
}

func (h HA) Locate(ctx context.Context, id xrootd.Identity, p string) ([]string, error) {
	ns, err := h.ns()
	if err != nil {
		return nil, err
	}
	return ns.Locate(ctx, id, p)
}

func (h HA) StatFS(ctx context.Context, id xrootd.Identity, p string) (xrootd.StatFS, error) {
	ns, err := h.ns()
	if err != nil {
		return xrootd.StatFS{}, err
	}
	return ns.StatFS(ctx, id, p)
}

func (h HA) Open(ctx context.Context, id xrootd.Identity, p string, req xrootd.OpenRequest) (xrootd.Redirect, error) {
	ns, err := h.ns()
	if err != nil {
		return xrootd.Redirect{}, err
	}
	return ns.Open(ctx, id, p, req)
}

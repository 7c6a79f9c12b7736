package nsserver

import (
	"context"
	"fmt"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// What the operator's verbs tell about the instance: its storage servers
// (node ls, node config) and the namespace's figures (ns stat).

// Nodes lists the storage servers (admin only).
func (s *Server) Nodes(_ context.Context, p auth.Principal) ([]nsapi.NodeRow, error) {
	if err := requireRoot(p, "node ls"); err != nil {
		return nil, err
	}
	var out []nsapi.NodeRow
	for _, n := range s.reg.Nodes() {
		row := nsapi.NodeRow{Name: n.Name, HTTP: n.HTTP, XRootD: n.XRootD, State: "offline", LastBeat: n.LastBeat, Release: n.Release,
			Filesystems: n.Filesystems, Booted: n.Booted, ReadRate: n.Rates.Read, WriteRate: n.Rates.Write, OpRate: n.Rates.Ops}
		if n.Alive {
			row.State = "online"
		}
		out = append(out, row)
	}
	return out, nil
}

// ConfigNode sets key=value (a key of fs config) on every filesystem of
// storage server node (admin only).
func (s *Server) ConfigNode(ctx context.Context, p auth.Principal, node, key, value string) (err error) {
	what := fmt.Sprintf("node %s %s=%s", node, key, value)
	defer func() { err = s.audit(ctx, p, "node config", what, "", err) }()
	if err := requireRoot(p, "node config"); err != nil {
		return err
	}
	var ids []uint32
	for _, f := range s.reg.List() {
		if f.Node == node {
			ids = append(ids, f.ID)
		}
	}
	if len(ids) == 0 {
		return kerr.New(kerr.NotFound, "node config", node, "no filesystem is registered on this node (kaon node ls)")
	}
	for _, id := range ids {
		if err := s.reg.Config(id, key, value); err != nil {
			return kerr.WithOp(err, "node config")
		}
	}
	s.mv.SettingsChanged()
	return nil
}

// diskUser is an engine that tells its size on disk (pebblekv).
type diskUser interface{ DiskUsage() (int64, error) }

// NSStat returns the namespace's figures (admin only).
func (s *Server) NSStat(_ context.Context, p auth.Principal) (nsapi.NSStat, error) {
	if err := requireRoot(p, "ns stat"); err != nil {
		return nsapi.NSStat{}, err
	}
	root, err := s.ns.Stat(namespace.Caller{}, "/")
	if err != nil {
		return nsapi.NSStat{}, err
	}
	// The root's subtree accounting: every file and directory below it.
	out := nsapi.NSStat{Files: root.TreeFiles, Directories: root.TreeDirs, Bytes: root.TreeSize}
	pending, err := s.ns.PendingUploads(s.now().Add(time.Hour))
	if err != nil {
		return out, err
	}
	out.PendingUploads = len(pending)
	out.Rates, out.Requests = s.access.Requests(s.now())
	if d, ok := s.cfg.Engine.(diskUser); ok {
		out.EngineBytes, _ = d.DiskUsage()
	}
	return out, nil
}

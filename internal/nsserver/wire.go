package nsserver

import (
	pathpkg "path"
	"time"

	"github.com/kaon-storage/kaon/internal/fleet"
	"github.com/kaon-storage/kaon/internal/fsck"
	"github.com/kaon-storage/kaon/internal/movement"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// The service answers in its clients' vocabulary (nsapi): the model's
// records and the schedulers' states are converted here, at the
// boundary, so no caller needs the model.

// attrOf is what clients see of inode n (a directory's size is its
// subtree's).
func attrOf(n *namespace.Inode) nsapi.Attr {
	a := nsapi.Attr{ID: n.ID, IsDir: n.IsDir, Mode: n.Mode, UID: n.UID, GID: n.GID, Size: n.Size,
		MTime: time.Unix(0, n.MTime), CTime: time.Unix(0, n.CTime), BTime: time.Unix(0, n.BTime),
		Layout: n.Layout, Checksums: n.CurrentChecksums(), Locations: n.Locations, XAttrs: n.XAttrs,
		DataVersion: n.DataVersion, Stale: n.Stale}
	if n.IsDir {
		t := time.Unix(0, n.TreeMTime)
		a.Size, a.TreeSize, a.TreeFiles, a.TreeDirs, a.TreeMTime = n.TreeSize, n.TreeSize, n.TreeFiles, n.TreeDirs, &t
	}
	return a
}

// entryOf is inode n at path p ("": asked for by inode).
func entryOf(p string, n *namespace.Inode) nsapi.Entry {
	return nsapi.Entry{Path: p, Name: n.Name, Attr: attrOf(n)}
}

// entriesOf are the entries of directory dir ("": asked for by inode).
func entriesOf(dir string, ns []*namespace.Inode) []nsapi.Entry {
	out := make([]nsapi.Entry, len(ns))
	for i, n := range ns {
		p := ""
		if dir != "" {
			p = pathpkg.Join(dir, n.Name)
		}
		out[i] = entryOf(p, n)
	}
	return out
}

// eventsOf are the model's change events in the vocabulary (the term is
// the sessions' to add).
func eventsOf(evs []namespace.Event) []nsapi.Event {
	out := make([]nsapi.Event, len(evs))
	for i, e := range evs {
		out[i] = nsapi.Event{Rev: e.Rev, Kind: eventKinds[e.Kind], Ino: e.Ino, Parent: e.Parent, Name: e.Name, IsDir: e.IsDir,
			From: e.From, FromName: e.FromName, Size: e.Size, MTime: e.MTime, DataVersion: e.DataVersion}
	}
	return out
}

var eventKinds = map[namespace.EventKind]nsapi.EventKind{namespace.Created: nsapi.EventCreated, namespace.Committed: nsapi.EventCommitted,
	namespace.Mkdir: nsapi.EventMkdir, namespace.Removed: nsapi.EventRemoved, namespace.Renamed: nsapi.EventRenamed,
	namespace.AttrChanged: nsapi.EventAttr, namespace.Modified: nsapi.EventModified}

// clean is the canonical form of a path the namespace has just accepted.
func clean(p string) string {
	c, _ := nsapi.CleanPath(p)
	return c
}

func nodeOf(n fleet.Node) nsapi.Node { return nsapi.Node(n) }

// filesystemOf is a row of `fs ls`: f with the summary of its drain (d,
// nil when it does not drain).
func filesystemOf(f fleet.FsState, d *movement.DrainProgress) nsapi.Filesystem {
	out := nsapi.Filesystem{ID: f.ID, Node: f.Node, Path: f.Path, Group: f.Group, Space: f.Space, ConfigStatus: f.ConfigStatus,
		UUID: f.UUID, Initialized: f.Initialized, Addr: f.Addr, BootStatus: f.BootStatus, Capacity: f.Capacity,
		Used: f.Used, Files: f.Files, Health: f.Health, LastBeat: f.LastBeat,
		IO: f.IO, NoBlockSums: f.NoBlockSums, ObjectSize: f.ObjectSize, Kind: f.Kind, Backend: f.Backend, IOInUse: f.IOInUse, FsType: f.FsType,
		BackendHealth: f.BackendHealth, Slow: f.Slow, Location: f.Location, DownSince: f.DownSince, DownWhy: f.DownWhy}
	if f.Latency != nil {
		l := nsapi.Latency(*f.Latency)
		out.Latency = &l
	}
	if d != nil {
		out.Drain, out.DrainFilesLeft, out.DrainBytesLeft, out.DrainRate = d.Status, d.FilesLeft, d.BytesLeft, d.Rate
		out.DrainETA, out.DrainFailures, out.DrainRateLimit, out.DrainParallel = d.ETA.Seconds(), len(d.Failures), d.RateLimit, d.Parallel
	}
	return out
}

// atRiskOf is the wire form of files at risk.
func atRiskOf(r movement.RiskCounts, rebuilding movement.FileCount) nsapi.AtRisk {
	return nsapi.AtRisk{Unreadable: nsapi.Count(r.Unreadable), Critical: nsapi.Count(r.Critical), Degraded: nsapi.Count(r.Degraded),
		Rebuilding: nsapi.Count(rebuilding)}
}

func failuresOf(fs []movement.MoveFailure) []nsapi.MoveFailure {
	var out []nsapi.MoveFailure
	for _, f := range fs {
		out = append(out, nsapi.MoveFailure(f))
	}
	return out
}

func groupOf(g movement.GroupState) nsapi.Group {
	row := nsapi.Group{Name: g.Name, Filesystems: g.Filesystems, Usable: g.Usable, MinFill: g.MinFill, MaxFill: g.MaxFill,
		Balancer: g.Balancer, Threshold: g.Threshold, RateLimit: g.Rate, Parallel: g.Parallel}
	if b := g.Balance; b != nil {
		row.Phase, row.Moved, row.Bytes, row.Rate, row.InFlight = b.Phase, b.Moved, b.Bytes, b.Rate, b.InFlight
		row.Failures = failuresOf(b.Failures)
	}
	return row
}

func fsckStatusOf(st fsck.Status) nsapi.FsckStatus {
	out := nsapi.FsckStatus{OrphanGrace: nsapi.Duration(st.OrphanGrace), Checked: st.Checked,
		Pass: nsapi.FsckPass{Running: st.Pass.Running, LastStart: st.Pass.LastStart, LastEnd: st.Pass.LastEnd,
			Files: st.Pass.Files, LastError: st.Pass.LastErr}}
	for _, cl := range fsck.Classes {
		out.Classes = append(out.Classes, nsapi.FsckClass{Name: string(cl), Description: cl.Describe(), Count: st.Counts[cl]})
	}
	for _, f := range st.Filesystems {
		out.Filesystems = append(out.Filesystems, nsapi.FsckFs(f))
	}
	return out
}

func findingOf(x fsck.Finding) nsapi.FsckFinding {
	return nsapi.FsckFinding{Class: string(x.Class), Fid: x.Fid, FsID: x.FsID, Stripe: x.Stripe, Path: x.Path, Phys: x.Phys,
		Detail: x.Detail, First: x.First, Last: x.Last}
}

// quotaKinds name the model's quota kinds.
var quotaKinds = map[byte]nsapi.QuotaKind{namespace.QuotaUser: nsapi.QuotaUser, namespace.QuotaGroup: nsapi.QuotaGroup,
	namespace.QuotaProject: nsapi.QuotaProject}

// quotaKeyOf is the model's key for k (kind 0, which the namespace
// refuses, for a kind it does not know).
func quotaKeyOf(k nsapi.QuotaKey) namespace.QuotaKey {
	for b, kind := range quotaKinds {
		switch {
		case kind != k.Kind:
		case b == namespace.QuotaProject:
			return namespace.QuotaKey{Kind: b}
		default:
			return namespace.QuotaKey{Kind: b, ID: k.ID}
		}
	}
	return namespace.QuotaKey{ID: k.ID}
}

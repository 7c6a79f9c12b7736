// Package storagetest has a fake namespace server for tests of storage
// servers (the core, its RPC and its front ends).
package storagetest

import (
	"context"
	"slices"
	"sync"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Namespace registers every filesystem it hears of, numbering them across
// servers by path in order of first report (1, 2, ...) and asking for
// their initialization until they report their id; it allows each upload
// one claim and records commits and aborts.
type Namespace struct {
	mu      sync.Mutex
	ids     map[string]uint32
	claimed map[uint64]bool
	commits map[uint64]message.Commit
	aborts  []uint64
	files   map[uint64]message.FileVersion // data versions (updates)
	// LoseUpdateAnswers makes the next commits of updates go through and
	// fail all the same, as an answer lost with a crashed namespace
	// server does.
	LoseUpdateAnswers int
	// AfterUpdateCommit, when set, runs after an update's commit is
	// recorded and before it is answered (outside the namespace's lock):
	// what another client does while a session applies its journals.
	AfterUpdateCommit func(message.FileVersion)
}

var (
	_ message.Namespace = (*Namespace)(nil)
	_ message.Updates   = (*Namespace)(nil)
)

func (n *Namespace) Heartbeat(_ context.Context, hb message.Heartbeat) (message.HeartbeatReply, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ids == nil {
		n.ids = map[string]uint32{}
	}
	var r message.HeartbeatReply
	for _, f := range hb.Filesystems {
		id, ok := n.ids[f.Path]
		if !ok {
			id = uint32(len(n.ids) + 1)
			n.ids[f.Path] = id
		}
		r.Filesystems = append(r.Filesystems, message.FsAssignment{ID: id, Path: f.Path, UUID: "u", ConfigStatus: "rw", Init: f.ID != id})
	}
	return r, nil
}

// Claim refuses a fid claimed before, as the namespace refuses a used
// write capability.
func (n *Namespace) Claim(_ context.Context, fid uint64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.claimed[fid] {
		return kerr.New(kerr.Permission, "write", "", "write capability already used")
	}
	if n.claimed == nil {
		n.claimed = map[uint64]bool{}
	}
	n.claimed[fid] = true
	return nil
}

func (n *Namespace) Commit(_ context.Context, c message.Commit) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.commits == nil {
		n.commits = map[uint64]message.Commit{}
	}
	n.commits[c.Fid] = c
	if n.files == nil {
		n.files = map[uint64]message.FileVersion{}
	}
	n.files[c.Fid] = message.FileVersion{Size: c.Size}
	return nil
}

// CommitUpdate takes an update from the file's data version only, as the
// namespace does (kerr.Busy otherwise).
func (n *Namespace) CommitUpdate(ctx context.Context, u message.UpdateCommit) (message.FileVersion, error) {
	fv, err := n.commitUpdate(u)
	if err == nil && n.AfterUpdateCommit != nil {
		n.AfterUpdateCommit(fv)
	}
	return fv, err
}

func (n *Namespace) commitUpdate(u message.UpdateCommit) (message.FileVersion, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f := n.files[u.Fid]
	if f.DataVersion != u.Base {
		return message.FileVersion{}, kerr.New(kerr.Busy, "update", "", "the file changed since the update began")
	}
	f.DataVersion, f.Tag, f.Size, f.Locations = u.Base+1, u.Tag, u.Size, u.Locations
	for _, i := range u.Stale {
		if !slices.Contains(f.Stale, i) {
			f.Stale = append(f.Stale, i)
		}
	}
	if n.files == nil {
		n.files = map[uint64]message.FileVersion{}
	}
	n.files[u.Fid] = f
	if n.LoseUpdateAnswers > 0 {
		n.LoseUpdateAnswers--
		return message.FileVersion{}, kerr.New(kerr.Busy, "update", "", "namespace server unreachable")
	}
	return f, nil
}

func (n *Namespace) MarkStale(_ context.Context, fid, version uint64, stripe int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if f := n.files[fid]; f.DataVersion == version && !slices.Contains(f.Stale, stripe) {
		f.Stale = append(f.Stale, stripe)
		n.files[fid] = f
	}
	return nil
}

func (n *Namespace) FileVersion(_ context.Context, fid uint64) (message.FileVersion, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.files[fid], nil
}

func (n *Namespace) Abort(_ context.Context, fid uint64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.aborts = append(n.aborts, fid)
	return nil
}

// Committed returns the commit of fid, if any.
func (n *Namespace) Committed(fid uint64) (message.Commit, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, ok := n.commits[fid]
	return c, ok
}

// Aborted returns the fids aborted so far.
func (n *Namespace) Aborted() []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]uint64(nil), n.aborts...)
}

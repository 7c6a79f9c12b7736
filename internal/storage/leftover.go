package storage

import (
	"context"
	"slices"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/cluster/message"
)

// Stripes a previous run of this server left unfinished. A storage server
// that stops while it writes a stripe (killed, crashed, its host lost
// power) leaves the stripe without its metadata, and nothing can finish
// it: the process writing it is gone, and a stripe is created once. Until
// something deletes it, it takes space: the deletion queue does when the
// namespace aborts its upload; fsck's repair does only after its orphan
// grace (a day) when the namespace no longer knows the id at all (the
// upload's pending record was lost with a namespace server). So when one
// of its filesystems first comes online after the server started, the
// server lists the stripes on it that have no metadata and asks the
// namespace server which of them it knows nothing of (no file, no upload
// or copy pending under the id, no move into the filesystem): those it
// removes at once. It never decides alone: a committed file's stripe
// whose metadata is damaged, or one of an upload still pending, is kept.

// leftoverBatch is how many fids one question names.
const leftoverBatch = 1000

// checkLeftovers starts the look at every online filesystem not looked
// at yet, when the namespace answers such questions.
func (s *Server) checkLeftovers(ctx context.Context) {
	ns, ok := s.cfg.Namespace.(message.Leftovers)
	if !ok {
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, f := range s.fs {
		if f.offlineReason() == "" && f.leftovers.CompareAndSwap(0, 2) {
			go s.dropLeftovers(ctx, ns, f)
		}
	}
}

// leftoverRetry is how long after a failed look the next one starts.
const leftoverRetry = time.Minute

// dropLeftovers removes f's unfinished stripes the namespace does not
// know; after a failure a heartbeat leftoverRetry later tries again.
func (s *Server) dropLeftovers(ctx context.Context, ns message.Leftovers, f *filesystem) {
	if err := s.removeLeftovers(ctx, ns, f); err != nil {
		s.log.Warn("unfinished stripes of a previous run not looked at (tried again later)", "fsid", f.id, "path", f.root, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(leftoverRetry):
		}
		f.leftovers.Store(0)
		return
	}
	f.leftovers.Store(1)
}

func (s *Server) removeLeftovers(ctx context.Context, ns message.Leftovers, f *filesystem) error {
	writing := s.writing.list()
	var fids []uint64
	err := f.store.Walk(func(fid uint64, _ backend.Meta, err error) error {
		// fid 0 is the latency probe's; uploads this run writes are
		// known to be alive.
		if err != nil && fid != 0 {
			if _, live := slices.BinarySearch(writing, fid); !live {
				fids = append(fids, fid)
			}
		}
		return ctx.Err()
	})
	if err != nil {
		return err
	}
	removed := 0
	for len(fids) > 0 {
		batch := fids[:min(len(fids), leftoverBatch)]
		fids = fids[len(batch):]
		r, err := ns.Unfinished(ctx, message.Unfinished{Node: s.cfg.Node, FsID: f.id, Fids: batch})
		if err != nil {
			return err
		}
		for _, fid := range r.Unknown {
			if !slices.Contains(batch, fid) {
				continue // only what was asked about
			}
			if err := f.store.Remove(fid); err == nil {
				removed++
			}
		}
	}
	if removed > 0 {
		s.log.Info("removed stripes a previous run left unfinished, unknown to the namespace", "fsid", f.id, "path", f.root, "count", removed)
	}
	return nil
}

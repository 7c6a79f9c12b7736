package nsserver

import (
	"context"
	"fmt"

	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

var _ message.Leftovers = (*Server)(nil)

// Unfinished answers a restarted storage server about the stripes it
// found without metadata on one of its filesystems (being written when
// it stopped): those whose id is no file's, no pending upload's or
// copy's, and which no move into that filesystem is writing are unknown
// here, and nothing else would remove them before fsck's orphan grace.
// Any other is kept: a committed file's stripe (its metadata damaged is
// fsck's business), one of an upload still pending (removed through the
// deletion queue when the upload ends without a commit), a move's copy.
//
// The answer waits until what it read is durable: a file's removal a
// failover then lost would otherwise make its stripe unknown here.
func (s *Server) Unfinished(ctx context.Context, u message.Unfinished) (message.UnfinishedReply, error) {
	what := fmt.Sprintf("fs %d", u.FsID)
	switch reg, ok := s.reg.Filesystem(u.FsID); {
	case !ok:
		return message.UnfinishedReply{}, kerr.New(kerr.NotFound, "unfinished stripes", what, "no such filesystem")
	case reg.Node != u.Node:
		return message.UnfinishedReply{}, kerr.New(kerr.Invalid, "unfinished stripes", what,
			fmt.Sprintf("reported by node %s, registered on node %s", u.Node, reg.Node))
	}
	states, err := s.ns.LookupFids(u.Fids)
	if err != nil {
		return message.UnfinishedReply{}, err
	}
	var r message.UnfinishedReply
	for i, st := range states {
		if st.File != nil || st.Pending {
			continue
		}
		moving, err := s.ns.MoveInFlight(u.FsID, u.Fids[i])
		if err != nil {
			return message.UnfinishedReply{}, err
		}
		if !moving {
			r.Unknown = append(r.Unknown, u.Fids[i])
		}
	}
	if len(r.Unknown) > 0 {
		if err := s.ns.Durable(ctx); err != nil {
			return message.UnfinishedReply{}, err
		}
	}
	return r, nil
}

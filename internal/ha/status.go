package ha

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/kaon-storage/kaon/internal/kv"
)

// Status is the instance as one server sees it (`kaon ns status`).
type Status struct {
	Engine  kv.Status      // the shared engine: its members, health, latest revision
	Active  Member         // the active server (ID "" when none is known)
	Servers []ServerStatus // every server with a live session, as last published
	Self    string         // ID of the server answering
	Err     string         // why the list of servers is incomplete
}

// Status asks the shared engine for its health and the servers' published
// status. Without a quorum the servers cannot be listed: this server's own
// status is shown, with the reason.
func (n *Node) Status(ctx context.Context) Status {
	st := Status{Self: n.cfg.Self.ID}
	if s, ok := n.cfg.Remote.(kv.Statuser); ok {
		st.Engine, _ = s.Status(ctx)
	}
	n.mu.Lock()
	if n.view.Role == Active {
		st.Active = n.cfg.Self
	} else if m, err := n.activeLocked(); err == nil {
		st.Active = m // never itself: the leader it read last may be itself just stepped down
	}
	n.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, n.cfg.Lease)
	defer cancel()
	servers, err := n.servers(sctx)
	if err != nil {
		st.Err = "cannot list the namespace servers: " + err.Error()
		servers = []ServerStatus{n.status()}
	}
	st.Servers = servers
	return st
}

func (n *Node) servers(ctx context.Context) ([]ServerStatus, error) {
	var out []ServerStatus
	done := make(chan error, 1)
	go func() {
		p := []byte(membersPrefix)
		done <- n.cfg.Remote.Scan(p, kv.PrefixEnd(p), func(_, v []byte) bool {
			var s ServerStatus
			if json.Unmarshal(v, &s) == nil {
				out = append(out, s)
			}
			return true
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// This server's own line is always current.
	self := n.status()
	found := false
	for i := range out {
		if out[i].ID == self.ID {
			out[i], found = self, true
		}
	}
	if !found {
		out = append(out, self)
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i].Role == Active) != (out[j].Role == Active) {
			return out[i].Role == Active
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

package storage

import (
	"sync"
	"sync/atomic"
)

// activity is what a storage server is doing for clients, for metrics:
// uploads and reads open now, third-party copies done.
type activity struct {
	uploads, reads atomic.Int64

	mu  sync.Mutex
	tpc map[TPCKind]TPCCount
}

// TPCKind is a kind of third-party copy: its protocol ("http", "root")
// and its direction ("pull": this server writes a file it reads from a
// remote, "push": it sends one of its files to a remote).
type TPCKind struct{ Protocol, Direction string }

// TPCCount is what copies of one kind did.
type TPCCount struct {
	Done, Failed int64
	Bytes        int64 // of copies that succeeded
}

// InFlight is how many uploads (HTTP and root://, copies into this
// server, conversions) and reads of files (clients, copies out) are
// open now.
func (s *Server) InFlight() (uploads, reads int64) {
	return s.act.uploads.Load(), s.act.reads.Load()
}

// CopyDone counts a third-party copy a front end ran through this
// server (err nil: it succeeded with bytes).
func (s *Server) CopyDone(k TPCKind, bytes int64, err error) {
	s.act.mu.Lock()
	defer s.act.mu.Unlock()
	if s.act.tpc == nil {
		s.act.tpc = map[TPCKind]TPCCount{}
	}
	c := s.act.tpc[k]
	if err != nil {
		c.Failed++
	} else {
		c.Done++
		c.Bytes += bytes
	}
	s.act.tpc[k] = c
}

// Copies are the third-party copies counted so far.
func (s *Server) Copies() map[TPCKind]TPCCount {
	s.act.mu.Lock()
	defer s.act.mu.Unlock()
	out := make(map[TPCKind]TPCCount, len(s.act.tpc))
	for k, v := range s.act.tpc {
		out[k] = v
	}
	return out
}

package storage

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// Peers reaches the stripes other storage servers hold; package cluster
// implements it over the internal RPC (cluster.StorageClient). addr is the
// storage server's base URL (capability.Target.Addr); token is the
// capability of the client's request, which the peer verifies again.
type Peers interface {
	// CreateStripe starts stripe idx of fid on the server at addr. Bytes
	// stream as they are written; the metadata travels with Finish, which
	// returns once the peer made the stripe durable.
	CreateStripe(ctx context.Context, addr string, fid uint64, idx int, token string) (backend.Writer, error)
	// StripeReader reads stripe idx of fid on the server at addr, one
	// range per ReadAt; a missing stripe reads as fs.ErrNotExist.
	StripeReader(ctx context.Context, addr string, fid uint64, idx int, token string) io.ReaderAt
	// ProbeStripe says whether the server at addr can serve stripe idx of
	// fid (nil) or why not.
	ProbeStripe(ctx context.Context, addr string, fid uint64, idx int, token string) error
	// PrepareStripe, ApplyStripe and DiscardStripe are the journal calls
	// of an update session (update.go) on stripe idx at addr; a prepare
	// answers applyNow for a stripe that must be applied before the
	// commit's reply (Server.PrepareStripe).
	PrepareStripe(ctx context.Context, addr string, fid uint64, idx int, token string, h backend.JournalHead, ops io.Reader) (applyNow bool, err error)
	ApplyStripe(ctx context.Context, addr string, fid uint64, idx int, token string) error
	DiscardStripe(ctx context.Context, addr string, fid uint64, idx int, token string) error
	// StreamStripe reads stripe idx of fid on the server at addr from
	// offset off to its end in one streamed request (moves, rebuilds and
	// repairs read stripes through); a missing stripe is
	// fs.ErrNotExist.
	StreamStripe(ctx context.Context, addr string, fid uint64, idx int, token string, off int64) (io.ReadCloser, error)
	// Repair asks the server at addr to rebuild stripes of a file it
	// holds (Server.Repair there); it returns when they are rebuilt.
	Repair(ctx context.Context, addr string, job message.RepairJob) error
}

func (s *Server) peers(op, path string) (Peers, error) {
	if s.cfg.Peers == nil {
		return nil, kerr.New(kerr.Unavailable, op, path, "a stripe is on another storage server and this one has no peer access")
	}
	return s.cfg.Peers, nil
}

// The operations below serve other storage servers (and, for ReadFile,
// the namespace server) through package cluster, which has checked that
// the caller is one of them; the capability is checked here all the same.

// stripeTarget verifies token for stripe idx of fid and returns the local
// filesystem holding it.
func (s *Server) stripeTarget(token string, fid uint64, idx int, write bool) (*capability.Capability, *filesystem, error) {
	c, err := s.Verify(token, capability.Access{Fid: fid, Write: write, Internal: true})
	if err != nil {
		return nil, nil, err
	}
	if idx < 0 || idx >= len(c.Targets) {
		return nil, nil, kerr.New(kerr.Invalid, "stripe", c.Path, "bad stripe index")
	}
	f := s.local(c.Targets[idx].FsID)
	if f == nil {
		return nil, nil, kerr.New(kerr.NotFound, "stripe", c.Path, fmt.Sprintf("filesystem %d is not on this server", c.Targets[idx].FsID))
	}
	return c, f, nil
}

// OpenStripe opens stripe idx of the file a read capability names, held
// here, for the entry server of a read (or a mover, or a repair): its
// blocks are verified as they are read, a damaged copy is refused, and a
// bad block met has the copy repaired here (heal.go).
func (s *Server) OpenStripe(token string, fid uint64, idx int) (backend.Reader, error) {
	c, f, err := s.stripeTarget(token, fid, idx, false)
	if err != nil {
		return nil, err
	}
	r, err := s.openLocal(f, c, token, idx)
	if err != nil {
		return nil, kerr.Wrap(kerr.KindOf(err), "stripe", c.Path, err)
	}
	if _, ok := r.(backend.OSFile); ok {
		return r, nil // sent with sendfile: no buffer
	}
	return &chargedReader{Reader: r, release: s.budget.charge(stripeMemory(0))}, nil
}

// chargedReader is a stripe sent through a buffer (verified as read),
// counted in the stream budget until closed.
type chargedReader struct {
	backend.Reader
	release func()
}

func (r *chargedReader) Close() error {
	r.release()
	return r.Reader.Close()
}

// ReceiveStripe stores stripe idx of the upload a write capability names,
// sent by the upload's entry server (which claimed it): body is the
// stripe's bytes, meta is read once body is consumed (it travels after
// the bytes). On any error nothing is left.
func (s *Server) ReceiveStripe(token string, fid uint64, idx int, body io.Reader, meta func() (backend.Meta, error)) error {
	c, f, err := s.stripeTarget(token, fid, idx, true)
	if err != nil {
		return err
	}
	o := framed(c.Layout)
	defer s.budget.charge(stripeMemory(f.store.WriteMemory(o)))()
	w, err := f.create(fid, o)
	if err != nil {
		return stripeError("stripe", c.Path, err)
	}
	_, err = copyFull(w, body)
	var m backend.Meta
	if err == nil {
		m, err = meta()
	}
	if err == nil && m.Stripe != idx {
		err = fmt.Errorf("metadata names stripe %d, request stripe %d", m.Stripe, idx)
	}
	if err == nil {
		m.Fid, m.Path = c.Fid, c.Path
		err = w.Finish(m)
	}
	if err != nil {
		w.Abort()
		return stripeError("stripe", c.Path, err)
	}
	return nil
}

// ReadFile streams the whole file a read capability names to the writer
// start returns (for the namespace server, which computes a checksum the
// upload did not). start is called with the size once the file is known
// to be readable (for EC, its first row decoded); an error after that
// means the stream is incomplete.
func (s *Server) ReadFile(ctx context.Context, token string, start func(size int64) io.Writer) error {
	c, err := s.Verify(token, capability.Access{})
	if err != nil {
		return err
	}
	f, err := s.Open(ctx, c, token, internalAdmitWait)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := CheckReadable(f); err != nil {
		return kerr.Wrap(kerr.IO, "read", c.Path, err)
	}
	if _, err := Copy(start(f.Size()), f); err != nil {
		return kerr.Wrap(kerr.IO, "read", c.Path, err)
	}
	return nil
}

// internalAdmitWait is how long an internal read waits for stream memory.
const internalAdmitWait = 2 * time.Minute

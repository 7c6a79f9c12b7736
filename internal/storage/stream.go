package storage

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// peerStream is a stripe on another storage server read through in one
// streamed request (Peers.StreamStripe): moves, rebuilds and repairs read
// stripes from their start to their end, so a copy costs one request
// instead of one per piece or frame. It is an io.ReaderAt for the
// decoders: a read that does not continue where the last one ended opens
// a new request from there.
type peerStream struct {
	ctx   context.Context
	peers Peers
	addr  string
	fid   uint64
	idx   int
	token string

	mu     sync.Mutex
	rc     io.ReadCloser
	cancel context.CancelFunc
	pos    int64
}

// openPeerStream starts reading stripe idx of fid at addr. It fails if
// the server does not answer within probeTimeout (a dead or hung one),
// or does not hold the stripe.
func openPeerStream(ctx context.Context, p Peers, addr string, fid uint64, idx int, token string) (*peerStream, error) {
	s := &peerStream{ctx: ctx, peers: p, addr: addr, fid: fid, idx: idx, token: token}
	if err := s.open(0); err != nil {
		return nil, err
	}
	return s, nil
}

// open starts the request at off; caller holds s.mu (or owns s).
func (s *peerStream) open(off int64) error {
	ctx, cancel := context.WithCancel(s.ctx)
	slow := time.AfterFunc(probeTimeout, cancel) // until the answer's headers
	rc, err := s.peers.StreamStripe(ctx, s.addr, s.fid, s.idx, s.token, off)
	answered := slow.Stop()
	if err != nil {
		cancel()
		if !answered {
			return kerr.New(kerr.Unavailable, "read", fmt.Sprintf("stripe %d on %s", s.idx, s.addr), fmt.Sprintf("no answer within %v", probeTimeout))
		}
		return err
	}
	s.rc, s.cancel, s.pos = rc, cancel, off
	return nil
}

func (s *peerStream) ReadAt(p []byte, off int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rc == nil || off != s.pos {
		s.closeLocked()
		if err := s.open(off); err != nil {
			return 0, err
		}
	}
	n, err := transfer.Fill(s.rc, p)
	s.pos += int64(n)
	switch {
	case err == io.EOF && n == len(p):
		err = nil
	case err != nil && err != io.EOF:
		s.closeLocked()
		err = fmt.Errorf("stripe %d on %s: %w", s.idx, s.addr, err)
	}
	return n, err
}

// Read reads on from where the last read ended (the stream as an
// io.Reader, for copies of a whole stripe).
func (s *peerStream) Read(p []byte) (int, error) {
	s.mu.Lock()
	pos := s.pos
	s.mu.Unlock()
	n, err := s.ReadAt(p, pos)
	if n > 0 && err == io.EOF {
		err = nil // io.EOF comes with the next call
	}
	return n, err
}

func (s *peerStream) closeLocked() {
	if s.rc != nil {
		s.rc.Close()
		s.cancel()
		s.rc, s.cancel = nil, nil
	}
}

func (s *peerStream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked()
	return nil
}

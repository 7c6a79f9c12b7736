package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

// SessionsOverHTTP2 has the sessions opened until the returned func is
// called use HTTP/2 streams, as with a server before the WebSocket.
func SessionsOverHTTP2() (restore func()) {
	sessionsOverHTTP2 = true
	return func() { sessionsOverHTTP2 = false }
}

// SetWSSilence sets how long a pinged WebSocket stream may be silent.
func SetWSSilence(d time.Duration) (restore func()) {
	was := wsSilence
	wsSilence = d
	return func() { wsSilence = was }
}

// OverWebSocket tells whether s's current stream is a WebSocket.
func (s *Session) OverWebSocket() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.conn.(*wsConn)
	return ok
}

// Batch sends reqs in one frame (a batch; nothing may be in flight) and
// returns their replies, in order.
func (s *Session) Batch(ctx context.Context, reqs ...nsapi.SessionRequest) ([]nsapi.SessionMessage, error) {
	s.mu.Lock()
	if len(s.frames) > 0 || len(s.queue) > 0 || !s.info.Batch {
		s.mu.Unlock()
		return nil, errors.New("a frame is in flight, or the server takes no batches")
	}
	chans := make([]chan nsapi.SessionMessage, len(reqs))
	for i := range reqs {
		s.nextID++
		reqs[i].ID = s.nextID
		chans[i] = make(chan nsapi.SessionMessage, 1)
		s.pending[reqs[i].ID] = chans[i]
	}
	s.queue = reqs
	frames := s.sent[0]
	s.flushLocked()
	sent := s.sent[0] - frames
	s.mu.Unlock()
	if sent != 1 {
		return nil, fmt.Errorf("%d frames sent for one batch", sent)
	}
	out := make([]nsapi.SessionMessage, len(reqs))
	for i, ch := range chans {
		select {
		case out[i] = <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the reply to request %d (%s): %w", i, reqs[i].Op, ctx.Err())
		}
	}
	return out, nil
}

package client

import "time"

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

package webview

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"sync"
	"time"
)

// CookieName is the browser session's cookie.
const CookieName = "kaon_session"

// Sessions are the browser sessions of one namespace server, in memory
// (a restart asks the browser to paste its token again).
type Sessions struct {
	key  [32]byte // binds CSRF tokens to session ids
	idle time.Duration
	max  int
	now  func() time.Time

	mu sync.Mutex
	m  map[string]*session
}

type session struct {
	token string // bearer token pasted into the login form ("" if none)
	flash string // what the last form did, shown once by the next page
	used  time.Time
}

// NewSessions returns an empty session table: sessions unused for idle
// expire, and at most max are kept (the least recently used goes first).
func NewSessions(idle time.Duration, max int) *Sessions {
	s := &Sessions{idle: idle, max: max, now: time.Now, m: map[string]*session{}}
	if _, err := rand.Read(s.key[:]); err != nil {
		panic("webview: no randomness: " + err.Error())
	}
	return s
}

// ErrCSRF refuses a form that does not carry its session's CSRF token.
var ErrCSRF = errors.New("the form's CSRF token does not match this browser session (reload the page)")

// id is r's session id when it names a live session.
func (s *Sessions) id(r *http.Request) (string, *session) {
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" {
		return "", nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[c.Value]
	if ss == nil {
		return "", nil
	}
	if now := s.now(); now.Sub(ss.used) > s.idle {
		delete(s.m, c.Value)
		return "", nil
	} else {
		ss.used = now
	}
	return c.Value, ss
}

// Token is the bearer token r's session keeps ("" if none).
func (s *Sessions) Token(r *http.Request) string {
	_, ss := s.id(r)
	if ss == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return ss.token
}

// Ensure returns r's session id, starting a session (and setting its
// cookie on w) when r has none.
func (s *Sessions) Ensure(w http.ResponseWriter, r *http.Request) string {
	if id, _ := s.id(r); id != "" {
		return id
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("webview: no randomness: " + err.Error())
	}
	id := base64.RawURLEncoding.EncodeToString(b[:])
	s.mu.Lock()
	s.evict()
	s.m[id] = &session{used: s.now()}
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: id, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return id
}

// evict drops expired sessions and, past max, the least recently used.
func (s *Sessions) evict() {
	now := s.now()
	var oldest string
	for id, ss := range s.m {
		if now.Sub(ss.used) > s.idle {
			delete(s.m, id)
		} else if oldest == "" || ss.used.Before(s.m[oldest].used) {
			oldest = id
		}
	}
	if len(s.m) >= s.max && oldest != "" {
		delete(s.m, oldest)
	}
}

// SetToken keeps tok (verified by the caller) in r's session, which must
// exist (CheckCSRF passed); "" forgets it (log out).
func (s *Sessions) SetToken(r *http.Request, tok string) {
	id, _ := s.id(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.m[id]; ss != nil {
		ss.token = tok
	}
}

// CSRF is the CSRF token of session id.
func (s *Sessions) CSRF(id string) string {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte("csrf\x00" + id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// CheckCSRF refuses a form post whose session is unknown or whose csrf
// field (got) is not its session's token (compared in constant time).
func (s *Sessions) CheckCSRF(r *http.Request, got string) error {
	id, _ := s.id(r)
	if id == "" {
		return ErrCSRF
	}
	if !hmac.Equal([]byte(got), []byte(s.CSRF(id))) {
		return ErrCSRF
	}
	return nil
}

// Flash keeps msg for the next page r's session shows (post, redirect,
// get).
func (s *Sessions) Flash(r *http.Request, msg string) {
	id, _ := s.id(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.m[id]; ss != nil {
		ss.flash = msg
	}
}

// TakeFlash returns and forgets the message kept for session id.
func (s *Sessions) TakeFlash(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[id]
	if ss == nil {
		return ""
	}
	msg := ss.flash
	ss.flash = ""
	return msg
}

package auth

import (
	"context"
	"sync"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Refusals counts the requests an authentication method refused, by
// method and reason, for metrics. The zero value is ready.
type Refusals struct {
	mu sync.Mutex
	n  map[Refusal]int64
}

// Refusal is what was refused: the method ("token", "x509", "unix",
// "none": a client that brought no credential where one is required) and
// the reason, a small fixed set: "expired", "unauthenticated" (a
// credential that does not verify, or none), "denied", "error".
type Refusal struct{ Method, Reason string }

// Counts are the refusals so far.
func (r *Refusals) Counts() map[Refusal]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[Refusal]int64, len(r.n))
	for k, v := range r.n {
		out[k] = v
	}
	return out
}

func (r *Refusals) add(method string, err error) {
	reason := "error"
	switch kerr.KindOf(err) {
	case kerr.Expired:
		reason = "expired"
	case kerr.Unauthenticated:
		reason = "unauthenticated"
	case kerr.Permission:
		reason = "denied"
	}
	r.mu.Lock()
	if r.n == nil {
		r.n = map[Refusal]int64{}
	}
	r.n[Refusal{method, reason}]++
	r.mu.Unlock()
}

// Counted is a, whose refusals are counted in r under method.
func Counted(method string, a Authenticator, r *Refusals) Authenticator {
	if r == nil {
		return a
	}
	return counted{a, method, r}
}

type counted struct {
	Authenticator
	method string
	r      *Refusals
}

func (c counted) Authenticate(ctx context.Context, req *Request) (Principal, bool, error) {
	p, ok, err := c.Authenticator.Authenticate(ctx, req)
	if err != nil {
		c.r.add(c.method, err)
	}
	return p, ok, err
}

// Unwrap is the authenticator counted.
func (c counted) Unwrap() Authenticator { return c.Authenticator }

// Unwrapped is a without the wrappers around it (Counted).
func Unwrapped(a Authenticator) Authenticator {
	for {
		u, ok := a.(interface{ Unwrap() Authenticator })
		if !ok {
			return a
		}
		a = u.Unwrap()
	}
}

package auth

import (
	"context"
	"sync"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Refusals counts the requests the methods of a Chain refused, by method
// and reason, for metrics. Placed in the chain (anywhere: it applies to
// no request, and the chain's other methods keep their own types for
// whoever looks for them), it is told of every refusal Chain.Authenticate
// returns.
type Refusals struct {
	// Name names a method ("token", "x509", "unix", "none": a client
	// without the credential required, ...).
	Name func(Authenticator) string

	mu sync.Mutex
	n  map[Refusal]int64
}

// Refusal is what was refused: the method and the reason, a small fixed
// set: "expired", "unauthenticated" (a credential that does not verify,
// or none), "denied", "error".
type Refusal struct{ Method, Reason string }

// Authenticate implements Authenticator: it applies to no request.
func (r *Refusals) Authenticate(context.Context, *Request) (Principal, bool, error) {
	return Nobody, false, nil
}

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

func (r *Refusals) add(a Authenticator, err error) {
	reason := "error"
	switch kerr.KindOf(err) {
	case kerr.Expired:
		reason = "expired"
	case kerr.Unauthenticated:
		reason = "unauthenticated"
	case kerr.Permission:
		reason = "denied"
	}
	method := "other"
	if r.Name != nil {
		method = r.Name(a)
	}
	r.mu.Lock()
	if r.n == nil {
		r.n = map[Refusal]int64{}
	}
	r.n[Refusal{method, reason}]++
	r.mu.Unlock()
}

// refused tells the chain's Refusals that a refused a request.
func (c Chain) refused(a Authenticator, err error) {
	for _, x := range c {
		if r, ok := x.(*Refusals); ok {
			r.add(a, err)
		}
	}
}

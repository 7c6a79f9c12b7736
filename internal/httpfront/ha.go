package httpfront

import (
	"context"
	"net/http"
	"strings"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// HA serves the namespace endpoint of one namespace server of a
// replicated instance (internal/ha): requests go to this server's handler
// while it is the active one and are redirected (307, same method, path
// and query) to the active server while it is a standby; with no active
// server to send them to they fail with the reason (503: busy with
// Retry-After while an election runs, "namespace unavailable" without a
// quorum). /api/v1/ns/status is answered by every server, to the admin
// (as Auth authenticates it).
type HA struct {
	// Route returns this server's handler when it is active; else the
	// active server's URL, or why there is none.
	Route  func() (h http.Handler, active string, err error)
	Status func(ctx context.Context) nsapi.NSStatus
	Auth   auth.Chain // nil: loopback clients by their socket's owner
}

func (f *HA) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/api/v1/ns/status" && f.Status != nil {
		if err := Admin(f.Auth, r, "ns status"); err != nil {
			writeJSONError(w, err)
			return
		}
		writeJSON(w, f.Status(r.Context()))
		return
	}
	h, active, err := f.Route()
	switch {
	case h != nil:
		h.ServeHTTP(w, r)
	case active != "":
		w.Header().Set(nsapi.ActiveHeader, active)
		http.Redirect(w, r, strings.TrimRight(active, "/")+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	default:
		if strings.HasPrefix(r.URL.Path, "/api/") || strings.HasPrefix(r.URL.Path, "/internal/") {
			writeJSONError(w, err)
			return
		}
		textError(w, err, 0)
	}
}

// serveNSStatus answers `kaon ns status` for a namespace in an embedded
// engine (to the admin): this server is the only one, and active.
func (f *Namespace) serveNSStatus(w http.ResponseWriter, r *http.Request) {
	if err := Admin(f.Auth, r, "ns status"); err != nil {
		writeJSONError(w, err)
		return
	}
	writeJSON(w, f.nsStatus(r))
}

// stepDown hands the active role to a standby (answered with null).
func (a api) stepDown(ctx context.Context, p auth.Principal, _ nsapi.None) (any, error) {
	return nil, a.ns.StepDown(ctx, p)
}

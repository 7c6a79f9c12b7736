package httpfront

import (
	"net/http"
)

// Health paths of a namespace server's endpoint: liveness (the process
// answers) and readiness (it serves clients itself: false on a standby
// of a replicated instance, or without the store's quorum). Both are
// answered to every client (they tell nothing of the namespace) and are
// never names in it over HTTP (root:// reaches files of those names).
const (
	HealthzPath = "/healthz"
	ReadyzPath  = "/readyz"
)

// Health answers GET and HEAD of HealthzPath with 200 "ok", and of
// ReadyzPath with 200 "ready" when ready returns nil (nil ready: always),
// else 503 with the reason; everything else goes to h.
func Health(h http.Handler, ready func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if (p != HealthzPath && p != ReadyzPath) || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if p == ReadyzPath && ready != nil {
			if err := ready(); err != nil {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte("not ready: " + err.Error() + "\n"))
				return
			}
			w.Write([]byte("ready\n"))
			return
		}
		w.Write([]byte("ok\n"))
	})
}

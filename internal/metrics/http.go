package metrics

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTP counts requests of one server role.
type HTTP struct {
	role     string
	route    func(*http.Request) string
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	in, out  *prometheus.CounterVec
}

// NewHTTP registers the HTTP metrics of role (mgm, fst) on reg; route
// names the part of the endpoint a request is for (a small, fixed set).
func NewHTTP(reg prometheus.Registerer, role string, route func(*http.Request) string) *HTTP {
	h := &HTTP{role: role, route: route,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaon_http_requests_total",
			Help: "HTTP requests answered, by route, method and status code."}, []string{"role", "route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kaon_http_request_duration_seconds",
			Help:    "Time from a request's arrival to the end of its response.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 11)}, []string{"role", "route", "method"}),
		in: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaon_http_received_bytes_total",
			Help: "Request body bytes received."}, []string{"role", "route"}),
		out: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kaon_http_sent_bytes_total",
			Help: "Response body bytes sent."}, []string{"role", "route"}),
	}
	reg.MustRegister(h.requests, h.duration, h.in, h.out)
	return h
}

var methods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodPut: true, http.MethodPost: true,
	http.MethodDelete: true, http.MethodOptions: true, "PROPFIND": true, "PROPPATCH": true, "MKCOL": true, "MOVE": true,
	"COPY": true, "LOCK": true, "UNLOCK": true}

// Instrument counts the requests h serves.
func (m *HTTP) Instrument(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		route := m.route(r)
		method := r.Method
		if !methods[method] {
			method = "other"
		}
		rw := &recorder{ResponseWriter: w}
		r2 := r
		if r.Body != nil && r.Body != http.NoBody {
			// The handler gets a copy of the request (as in the access
			// log): replacing the server's own body would make it read a
			// body the handler chose not to (a PUT answered with a
			// redirect).
			body := &countBody{ReadCloser: r.Body}
			r2 = r.WithContext(r.Context())
			r2.Body = body
			defer func() { m.in.WithLabelValues(m.role, route).Add(float64(body.n)) }()
		}
		h.ServeHTTP(rw, r2)
		code := rw.status
		if code == 0 {
			code = http.StatusOK
		}
		m.requests.WithLabelValues(m.role, route, method, strconv.Itoa(code)).Inc()
		m.duration.WithLabelValues(m.role, route, method).Observe(time.Since(start).Seconds())
		m.out.WithLabelValues(m.role, route).Add(float64(rw.n))
	})
}

// NamespaceRoute names the routes of the namespace endpoint.
func NamespaceRoute(r *http.Request) string {
	switch p := r.URL.Path; {
	case p == Path:
		return "metrics"
	case strings.HasPrefix(p, "/api/v1/"):
		return "api"
	case strings.HasPrefix(p, "/internal/v1/"):
		return "internal"
	}
	return "dav"
}

// StorageRoute names the routes of a storage server's endpoint.
func StorageRoute(r *http.Request) string {
	switch p := r.URL.Path; {
	case p == Path:
		return "metrics"
	case strings.HasPrefix(p, "/kaon/v1/data/"):
		return "data"
	case strings.HasPrefix(p, "/kaon/v1/stripe/"):
		return "stripe"
	case strings.HasPrefix(p, "/internal/v1/fsck/"):
		return "fsck"
	case strings.HasPrefix(p, "/internal/v1/"):
		return "internal"
	}
	return "other"
}

// recorder keeps the status and counts what a handler sends; it keeps
// ReadFrom (sendfile), Flush and Unwrap of the writer it wraps.
type recorder struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *recorder) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(r)
	} else {
		n, err = io.Copy(w.ResponseWriter, r)
	}
	w.n += n
	return n, err
}

func (w *recorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type countBody struct {
	io.ReadCloser
	n int64
}

func (b *countBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

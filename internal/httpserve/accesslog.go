package httpserve

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// AccessLog logs one line per request: method, path (never the query,
// which may hold a capability), status, bytes received and sent, duration
// and the principal a handler named with SetPrincipal.
func AccessLog(h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &record{}
		lw := &logWriter{ResponseWriter: w}
		// The handler gets a copy of the request: replacing the body of
		// the server's own would make it read (and so ask for with 100
		// Continue) a body the handler chose not to read, such as that of
		// a PUT answered with a redirect.
		r2 := r.WithContext(context.WithValue(r.Context(), recordKey{}, rec))
		var body *countingBody
		if r.Body != nil && r.Body != http.NoBody {
			body = &countingBody{ReadCloser: r.Body}
			r2.Body = body
		}
		defer func() {
			// A handler that aborts its answer (http.ErrAbortHandler: a
			// body that cannot be completed) is logged too.
			aborted := recover()
			status := lw.status
			if status == 0 {
				status = http.StatusOK
			}
			var in int64
			if body != nil {
				in = body.n
			}
			attrs := []any{"method", r.Method, "path", r.URL.Path, "status", status, "in", in, "out", lw.n,
				"dur", time.Since(start).Round(time.Microsecond)}
			if rec.principal != "" {
				attrs = append(attrs, "principal", rec.principal)
			}
			if aborted != nil {
				attrs = append(attrs, "aborted", true)
			}
			log.Info("http", attrs...)
			if aborted != nil {
				panic(aborted)
			}
		}()
		h.ServeHTTP(lw, r2)
	})
}

type recordKey struct{}

// record is what handlers tell the access log about a request.
type record struct{ principal string }

// SetPrincipal names who a request acts for in its access log line.
func SetPrincipal(r *http.Request, who string) {
	if rec, ok := r.Context().Value(recordKey{}).(*record); ok {
		rec.principal = who
	}
}

// logWriter counts what a handler sends. It keeps ReadFrom (sendfile),
// Flush and Unwrap (http.ResponseController) of the writer it wraps.
type logWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *logWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *logWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *logWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(r) // the server's: sendfile for files
	} else {
		n, err = io.Copy(w.ResponseWriter, r)
	}
	w.n += n
	return n, err
}

func (w *logWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *logWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type countingBody struct {
	io.ReadCloser
	n int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

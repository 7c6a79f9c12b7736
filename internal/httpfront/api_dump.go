package httpfront

import (
	"bufio"
	"net/http"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// serveDump streams `kaon ns dump --path P` (GET /api/v1/ns/dump?path=P,
// the admin only): text/plain, one path per line, as the namespace walks.
// An error before the first line is an nsapi.ErrorBody with its status;
// one after it aborts the response, so the client sees a truncated
// transfer, never a dump that looks complete.
func (f *Namespace) serveDump(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeJSONError(w, kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "wrong method"))
		return
	}
	p, err := f.principal(r)
	if err != nil {
		writeJSONError(w, err)
		return
	}
	path := r.URL.Query().Get("path")
	if path == "" {
		path = "/"
	}
	var bw *bufio.Writer
	err = f.NS.Dump(r.Context(), p, path, func(name string) error {
		if bw == nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			bw = bufio.NewWriterSize(w, 64<<10)
		}
		bw.WriteString(name)
		return bw.WriteByte('\n')
	})
	switch {
	case err != nil && bw == nil:
		writeJSONError(w, err)
	case err != nil:
		f.Log.Warn("ns dump cut short", "path", path, "err", err)
		panic(http.ErrAbortHandler)
	case bw == nil:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	default:
		bw.Flush()
	}
}

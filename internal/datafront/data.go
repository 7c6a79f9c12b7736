package datafront

// The client data endpoint of a storage server, where the namespace
// server redirects clients with a capability.

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/httpserve"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/storage"
)

// httpAdmitWait is how long an HTTP stream waits for buffer memory: HTTP
// has no way to tell a client to come back later that clients honour, so
// it queues (the client's TCP window does the rest).
const httpAdmitWait = 2 * time.Minute

// Data serves the client data endpoint of storage server s, and the
// third-party copies tpc enables (COPY, tpc.go).
func Data(s *storage.Server, log *slog.Logger, tpc TPCConfig) http.Handler {
	d := &data{s: s, log: log, tpc: tpc}
	return http.HandlerFunc(d.serve)
}

type data struct {
	s   *storage.Server
	log *slog.Logger
	tpc TPCConfig
}

func (d *data) fail(w http.ResponseWriter, r *http.Request, err error) {
	// The query (capability) is never logged.
	d.log.Info("data request refused", "method", r.Method, "path", r.URL.Path, "err", err)
	cluster.WriteError(w, err)
}

func (d *data) serve(w http.ResponseWriter, r *http.Request) {
	fid, err := strconv.ParseUint(strings.TrimPrefix(r.URL.Path, httpserve.DataPath), 16, 64)
	if err != nil {
		d.fail(w, r, kerr.New(kerr.Invalid, r.Method, r.URL.Path, "bad file id"))
		return
	}
	write := false
	switch r.Method {
	case http.MethodGet, http.MethodHead:
	case http.MethodPut:
		write = true
	case "COPY": // a pull writes the file, a push reads it
		write = r.Header.Get("Source") != ""
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT, COPY")
		d.fail(w, r, kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "method not allowed on data endpoint"))
		return
	}
	token := r.URL.Query().Get("cap")
	c, err := d.s.Verify(token, capability.Access{Fid: fid, Write: write})
	if err != nil {
		d.fail(w, r, err)
		return
	}
	httpserve.SetPrincipal(r, fmt.Sprintf("uid=%d gid=%d", c.UID, c.GID))
	if r.Method == "COPY" {
		d.copy(w, r, c, token)
		return
	}
	if write {
		d.put(w, r, c, token)
	} else {
		d.get(w, r, c, token)
	}
}

func (d *data) get(w http.ResponseWriter, r *http.Request, c *capability.Capability, token string) {
	f, err := d.s.Open(r.Context(), c, token, httpAdmitWait)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("ETag", fmt.Sprintf("\"%x\"", c.Fid))
	httpserve.SetDigest(w, r, c.Sums)
	if storage.Striped(f) && r.Header.Get("Range") == "" {
		// Whole-file read of an EC file: stream rows straight out. Decode the
		// first row before answering so an unreadable file gets an error
		// status rather than a truncated 200.
		if err := storage.CheckReadable(f); err != nil {
			d.fail(w, r, kerr.Wrap(kerr.IO, "read", c.Path, err))
			return
		}
		h.Set("Accept-Ranges", "bytes")
		h.Set("Content-Length", strconv.FormatInt(c.Size, 10))
		if r.Method == http.MethodHead {
			return
		}
		if _, err := storage.Copy(w, f); err != nil {
			d.log.Warn("read failed mid-stream; answer aborted", "path", c.Path, "err", err)
			panic(http.ErrAbortHandler) // never a clean end
		}
		return
	}
	if !dropEmptySuffixes(r) {
		// As net/http answers a range past the end.
		h.Set("Content-Range", fmt.Sprintf("bytes */%d", f.Size()))
		http.Error(w, kerr.New(kerr.Invalid, "read", c.Path, "range not satisfiable: a suffix range of 0 bytes selects nothing").Error(),
			http.StatusRequestedRangeNotSatisfiable)
		return
	}
	if of, ok := f.(backend.OSFile); ok {
		// A local copy without block sums: sendfile.
		http.ServeContent(w, r, "", time.Time{}, of.OSFile())
		return
	}
	// Verified as it is read, from whichever copy serves each range: an
	// error before the first byte is an error status, after it an abort.
	cluster.ServeContent(w, r, f, f.Size())
}

// dropEmptySuffixes removes the suffix ranges of zero bytes ("-0") from
// r's Range header, which net/http serves as a 206 of nothing (or as an
// empty part of a multipart answer). RFC 9110 (14.1.2): a suffix range is
// satisfiable only with a non-zero length, and a range set none of whose
// ranges is satisfiable is answered 416. It reports false for such a set.
func dropEmptySuffixes(r *http.Request) bool {
	v := r.Header.Get("Range")
	set, ok := strings.CutPrefix(v, "bytes=")
	if !ok {
		return true // not a byte range: net/http ignores or refuses it
	}
	var keep []string
	dropped := false
	for _, spec := range strings.Split(set, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue // as net/http does
		}
		if n, ok := strings.CutPrefix(spec, "-"); ok {
			if l, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64); err == nil && l == 0 {
				dropped = true
				continue
			}
		}
		keep = append(keep, spec)
	}
	switch {
	case !dropped:
		return true
	case len(keep) == 0:
		return false
	}
	r.Header.Set("Range", "bytes="+strings.Join(keep, ","))
	return true
}

func (d *data) put(w http.ResponseWriter, r *http.Request, c *capability.Capability, token string) {
	first, last, ranged, err := httpserve.PutRange(r, c.Path)
	switch {
	case err != nil:
		d.fail(w, r, err)
		return
	case ranged != c.Update:
		d.fail(w, r, kerr.New(kerr.Invalid, "PUT", c.Path, "a PUT with Content-Range writes through an update capability and one without through an upload capability; ask the namespace server with the same headers"))
		return
	case ranged:
		d.putRange(w, r, c, token, first, last)
		return
	}
	u, err := d.s.NewUpload(r.Context(), c, token, httpAdmitWait)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	n, err := u.ReadFrom(r.Body)
	if err == nil && r.ContentLength >= 0 && n != r.ContentLength {
		err = kerr.New(kerr.Invalid, "put", c.Path, fmt.Sprintf("body has %d bytes, Content-Length said %d", n, r.ContentLength))
	}
	if err != nil {
		u.Abort(r.Context())
		if kerr.KindOf(err) == kerr.Internal {
			err = kerr.Wrap(kerr.IO, "put", c.Path, err)
		}
		d.fail(w, r, err)
		return
	}
	if err := u.Commit(r.Context()); err != nil {
		d.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// putRange writes bytes first..last of a committed file in place: an
// update session of one write, committed (the file's next data version)
// before the answer.
func (d *data) putRange(w http.ResponseWriter, r *http.Request, c *capability.Capability, token string, first, last int64) {
	u, err := d.s.NewUpdate(r.Context(), c, token)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	n, err := u.WriteFrom(r.Body, first)
	if err == nil && n != last-first+1 {
		err = kerr.New(kerr.Invalid, "PUT", c.Path, fmt.Sprintf("body has %d bytes, Content-Range names %d", n, last-first+1))
	}
	if err != nil {
		u.Abort()
		if kerr.KindOf(err) == kerr.Internal {
			err = kerr.Wrap(kerr.IO, "PUT", c.Path, err)
		}
		d.fail(w, r, err)
		return
	}
	if err := u.Commit(r.Context()); err != nil {
		d.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

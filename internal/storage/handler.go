package storage

import (
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// DataPath is the URL prefix clients are redirected to.
const DataPath = "/kaon/v1/data/"

const stripePath = "/kaon/v1/stripe/"

// Handler serves the data endpoints:
//
//	GET|HEAD|PUT /kaon/v1/data/<fid hex>?cap=...      client data (this server is the entry)
//	GET|PUT      /kaon/v1/stripe/<fid hex>/<i>?cap=... one stripe/replica, server to server
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, DataPath):
			s.serveData(w, r)
		case strings.HasPrefix(r.URL.Path, stripePath):
			s.serveStripe(w, r)
		default:
			http.Error(w, "not found: "+r.URL.Path, http.StatusNotFound)
		}
	})
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	// The query (capability) is never logged.
	s.log.Info("data request refused", "method", r.Method, "path", r.URL.Path, "err", err)
	cluster.WriteError(w, err)
}

func (s *Server) capFor(r *http.Request, fidHex string) (*capability.Capability, string, error) {
	fid, err := strconv.ParseUint(fidHex, 16, 64)
	if err != nil {
		return nil, "", kerr.New(kerr.Invalid, r.Method, r.URL.Path, "bad file id")
	}
	token := r.URL.Query().Get("cap")
	c, err := s.Verify(token, fid)
	return c, token, err
}

func (s *Server) serveData(w http.ResponseWriter, r *http.Request) {
	c, token, err := s.capFor(r, strings.TrimPrefix(r.URL.Path, DataPath))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if c.Write {
			s.fail(w, r, kerr.New(kerr.Permission, "read", c.Path, "capability is for writing"))
			return
		}
		s.get(w, r, c, token)
	case http.MethodPut:
		s.put(w, r, c, token)
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT")
		s.fail(w, r, kerr.New(kerr.Unsupported, r.Method, c.Path, "method not allowed on data endpoint"))
	}
}

// SetDigest answers Want-Digest with checksums stored at write time.
func SetDigest(w http.ResponseWriter, r *http.Request, sums map[string]string) {
	if want := r.Header.Get("Want-Digest"); want != "" {
		if v, ok := checksum.DigestHeaderValue(want, sums); ok {
			w.Header().Set("Digest", v)
		}
	}
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, c *capability.Capability, token string) {
	f, err := s.Open(r.Context(), c, token, httpAdmitWait)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("ETag", fmt.Sprintf("\"%x\"", c.Fid))
	SetDigest(w, r, c.Sums)
	if ec, ok := f.(*ecFile); ok && r.Header.Get("Range") == "" {
		// Whole-file read of an EC file: stream rows straight out. Decode the
		// first row before answering so an unreadable file gets an error
		// status rather than a truncated 200.
		if c.Size > 0 {
			if _, err := ec.ReadAt(make([]byte, 1), 0); err != nil {
				s.fail(w, r, kerr.Wrap(kerr.IO, "read", c.Path, err))
				return
			}
		}
		h.Set("Accept-Ranges", "bytes")
		h.Set("Content-Length", strconv.FormatInt(c.Size, 10))
		if r.Method == http.MethodHead {
			return
		}
		if _, err := ec.WriteRange(w, 0, c.Size); err != nil {
			s.log.Warn("read failed mid-stream", "path", c.Path, "err", err)
		}
		return
	}
	var rs io.ReadSeeker
	if pf, ok := f.(*plainFile); ok {
		if file, ok := pf.ReaderAt.(*os.File); ok {
			rs = file // lets net/http use sendfile
		}
	}
	if rs == nil {
		rs = io.NewSectionReader(f, 0, f.Size())
	}
	http.ServeContent(w, r, "", time.Time{}, rs)
}

func (s *Server) put(w http.ResponseWriter, r *http.Request, c *capability.Capability, token string) {
	u, err := s.NewUpload(r.Context(), c, token, httpAdmitWait)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	n, err := copyFull(u, r.Body)
	if err == nil && r.ContentLength >= 0 && n != r.ContentLength {
		err = kerr.New(kerr.Invalid, "put", c.Path, fmt.Sprintf("body has %d bytes, Content-Length said %d", n, r.ContentLength))
	}
	if err != nil {
		u.Abort(r.Context())
		if kerr.KindOf(err) == kerr.Internal {
			err = kerr.Wrap(kerr.IO, "put", c.Path, err)
		}
		s.fail(w, r, err)
		return
	}
	if err := u.Commit(r.Context()); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) serveStripe(w http.ResponseWriter, r *http.Request) {
	// Stripes travel between storage servers only: the entry server of an
	// upload has claimed it, so a client's capability alone never reaches
	// a stripe directly.
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+s.cfg.Key.Internal())) != 1 {
		s.fail(w, r, kerr.New(kerr.Permission, "stripe", r.URL.Path, "stripe endpoint is for storage servers only"))
		return
	}
	fidHex, idxStr, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, stripePath), "/")
	c, _, err := s.capFor(r, fidHex)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	idx, err := strconv.Atoi(idxStr)
	if err != nil || idx < 0 || idx >= len(c.Targets) {
		s.fail(w, r, kerr.New(kerr.Invalid, "stripe", c.Path, "bad stripe index"))
		return
	}
	f := s.local(c.Targets[idx].FsID)
	if f == nil {
		s.fail(w, r, kerr.New(kerr.NotFound, "stripe", c.Path, fmt.Sprintf("filesystem %d is not on this server", c.Targets[idx].FsID)))
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		file, err := os.Open(PhysPath(f.root, c.Fid))
		if err != nil {
			s.fail(w, r, kerr.Wrap(kerr.NotFound, "stripe", c.Path, err))
			return
		}
		defer file.Close()
		http.ServeContent(w, r, "", time.Time{}, file)
	case http.MethodPut:
		if !c.Write {
			s.fail(w, r, kerr.New(kerr.Permission, "stripe", c.Path, "capability is for reading"))
			return
		}
		file, err := f.create(c.Fid, true)
		if err != nil {
			s.fail(w, r, ioError("stripe", c.Path, err))
			return
		}
		st := &localStripe{f: file, fs: f, sync: s.cfg.SyncData}
		_, err = copyFull(st, r.Body)
		m := StripeMeta{Fid: c.Fid, Path: c.Path}
		if err == nil {
			err = decodeMeta(r.Trailer.Get(trailerMeta), &m)
		}
		if err == nil && m.Stripe != idx {
			err = fmt.Errorf("trailer names stripe %d, URL stripe %d", m.Stripe, idx)
		}
		if err == nil {
			err = st.finish(m)
		}
		if err != nil {
			st.abort()
			s.fail(w, r, kerr.Wrap(kerr.IO, "stripe", c.Path, err))
			return
		}
		w.WriteHeader(http.StatusCreated)
	default:
		s.fail(w, r, kerr.New(kerr.Unsupported, r.Method, c.Path, "method not allowed on stripe endpoint"))
	}
}

// httpAdmitWait is how long an HTTP stream waits for buffer memory: HTTP
// has no way to tell a client to come back later that clients honour, so
// it queues (the client's TCP window does the rest).
const httpAdmitWait = 2 * time.Minute

// copyBufs recycles copyFull's buffers (counted in uploadMemory).
var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// copyFull copies r to w in full 1 MiB chunks: network reads return
// whatever TCP delivered, and hashing and writing in large pieces costs far
// fewer syscalls and function calls per byte.
func copyFull(w io.Writer, r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var n int64
	for {
		m, err := io.ReadFull(r, buf)
		if m > 0 {
			if _, werr := w.Write(buf[:m]); werr != nil {
				return n, werr
			}
			n += int64(m)
		}
		switch err {
		case nil:
		case io.EOF, io.ErrUnexpectedEOF:
			return n, nil
		default:
			return n, err
		}
	}
}

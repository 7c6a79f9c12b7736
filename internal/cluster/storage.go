package cluster

// Storage-server side of the internal protocol: stripe transfer between
// storage servers (the entry server of an upload or read reaches the
// stripes other servers hold) and whole-file reads for the namespace
// server. Every request carries the internal bearer secret, so a client
// capability alone never reaches a stripe; the capability is verified by
// the storage server all the same.
//
//	PUT  /kaon/v1/stripe/<fid hex>/<i>?cap=C  stripe i, chunked; its metadata
//	                                          in the Kaon-Stripe-Meta trailer
//	GET|HEAD /kaon/v1/stripe/<fid hex>/<i>?cap=C  stripe i (ranges; HEAD probes)
//	GET  /internal/v1/readfile                the whole file of the read
//	                                          capability in Kaon-Capability

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// Paths of the storage-side endpoints.
const (
	StripePath   = "/kaon/v1/stripe/"
	ReadFilePath = "/internal/v1/readfile"
)

const (
	trailerMeta = "Kaon-Stripe-Meta"
	capHeader   = "Kaon-Capability"
)

// StorageServer is the storage server core as its peers and the namespace
// server reach it (package storage implements it).
type StorageServer interface {
	// OpenStripe opens stripe idx of the file the read capability token
	// names, held on this server.
	OpenStripe(token string, fid uint64, idx int) (backend.Reader, error)
	// ReceiveStripe stores stripe idx of the upload the write capability
	// token names from body; meta is called once body is consumed.
	ReceiveStripe(token string, fid uint64, idx int, body io.Reader, meta func() (backend.Meta, error)) error
	// ReadFile streams the whole file the read capability token names to
	// the writer start returns (start gets the size once the file is known
	// to be readable).
	ReadFile(ctx context.Context, token string, start func(size int64) io.Writer) error
}

// StorageHandler serves StripePath and ReadFilePath for s; requests must
// carry secret.
func StorageHandler(s StorageServer, secret string, log *slog.Logger) http.Handler {
	want := bearerOf(secret)
	fail := func(w http.ResponseWriter, r *http.Request, err error) {
		// The query (capability) is never logged.
		log.Info("internal storage request refused", "method", r.Method, "path", r.URL.Path, "err", err)
		WriteError(w, err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !carries(r, want) {
			fail(w, r, kerr.New(kerr.Permission, "internal", r.URL.Path, "endpoint is for storage and namespace servers only"))
			return
		}
		switch {
		case strings.HasPrefix(r.URL.Path, StripePath):
			serveStripe(s, w, r, fail)
		case r.URL.Path == TruncatePath:
			if err := serveTruncate(s, w, r); err != nil {
				fail(w, r, err)
			}
		case r.URL.Path == ReadFilePath && r.Method == http.MethodGet:
			started := false
			err := s.ReadFile(r.Context(), r.Header.Get(capHeader), func(size int64) io.Writer {
				started = true
				w.Header().Set("Content-Type", "application/octet-stream")
				w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
				w.WriteHeader(http.StatusOK)
				return w
			})
			switch {
			case err != nil && !started:
				fail(w, r, err)
			case err != nil:
				// The client sees a body shorter than Content-Length.
				log.Warn("internal file read failed mid-stream", "err", err)
			}
		default:
			fail(w, r, kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "no such internal storage operation"))
		}
	})
}

func serveStripe(s StorageServer, w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, *http.Request, error)) {
	fidHex, idxStr, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, StripePath), "/")
	idxStr, verb, _ := strings.Cut(idxStr, "/")
	fid, err1 := strconv.ParseUint(fidHex, 16, 64)
	idx, err2 := strconv.Atoi(idxStr)
	if err1 != nil || err2 != nil {
		fail(w, r, kerr.New(kerr.Invalid, "stripe", r.URL.Path, "bad file id or stripe index"))
		return
	}
	if verb != "" {
		if err := serveJournal(s, w, r, fid, idx, verb); err != nil {
			fail(w, r, err)
		}
		return
	}
	token := r.URL.Query().Get("cap")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		rd, err := s.OpenStripe(token, fid, idx)
		if err != nil {
			fail(w, r, err)
			return
		}
		defer rd.Close()
		if f, ok := rd.(backend.OSFile); ok {
			http.ServeContent(w, r, "", time.Time{}, f.OSFile()) // sendfile: nothing to verify
			return
		}
		ServeContent(w, r, rd, rd.Size())
	case http.MethodPut:
		err := s.ReceiveStripe(token, fid, idx, r.Body, func() (backend.Meta, error) {
			return decodeMeta(r.Trailer.Get(trailerMeta))
		})
		if err != nil {
			fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusCreated)
	default:
		fail(w, r, kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "method not allowed on stripe endpoint"))
	}
}

// Stripe metadata in the trailer of a stripe PUT:
// "<size>;<stripe>;<layout>;<type>=<hex>,<type>=<hex>..."; fid and path
// come from the capability.
func encodeMeta(m backend.Meta) string {
	var sums []string
	for k, v := range m.Checksums {
		sums = append(sums, k+"="+v)
	}
	return fmt.Sprintf("%d;%d;%s;%s", m.Size, m.Stripe, m.Layout, strings.Join(sums, ","))
}

func decodeMeta(s string) (backend.Meta, error) {
	var m backend.Meta
	parts := strings.SplitN(s, ";", 4)
	if len(parts) != 4 {
		return m, errors.New("bad stripe metadata trailer")
	}
	size, err1 := strconv.ParseInt(parts[0], 10, 64)
	stripe, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return m, errors.New("bad stripe metadata trailer")
	}
	m.Size, m.Stripe, m.Layout, m.Checksums = size, stripe, parts[2], map[string]string{}
	for _, kv := range strings.Split(parts[3], ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m.Checksums[k] = v
		}
	}
	return m, nil
}

// StorageClient calls storage servers: it is the storage.Peers of a
// storage server, and the namespace server's way to read a whole file.
type StorageClient struct {
	Secret string // shared internal bearer
	HTTP   *http.Client
}

// NewStorageClient returns a client tuned for stripe streams.
func NewStorageClient(secret string) *StorageClient {
	return &StorageClient{Secret: secret, HTTP: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 64, DisableCompression: true, WriteBufferSize: 256 << 10, ReadBufferSize: 256 << 10}}}
}

func (c *StorageClient) stripeRequest(ctx context.Context, method, addr string, fid uint64, idx int, token string, body io.Reader) *http.Request {
	url := fmt.Sprintf("%s%s%x/%d?cap=%s", addr, StripePath, fid, idx, token)
	req, _ := http.NewRequestWithContext(ctx, method, url, body)
	req.Header.Set("Authorization", "Bearer "+c.Secret)
	return req
}

// CreateStripe streams stripe idx to the server at addr with a chunked
// PUT; the metadata, known only at the end, travels as a trailer.
func (c *StorageClient) CreateStripe(ctx context.Context, addr string, fid uint64, idx int, token string) (backend.Writer, error) {
	pr, pw := io.Pipe()
	req := c.stripeRequest(ctx, http.MethodPut, addr, fid, idx, token, pr)
	req.ContentLength = -1
	req.Trailer = http.Header{trailerMeta: nil}
	r := &remoteStripe{pw: pw, req: req, done: make(chan error, 1)}
	go func() {
		resp, err := c.HTTP.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				err = fmt.Errorf("stripe %d on %s: HTTP %d %s", idx, addr, resp.StatusCode, body)
			}
		} else {
			err = fmt.Errorf("stripe %d on %s: storage server unreachable", idx, addr) // err holds the URL
		}
		pr.CloseWithError(err)
		r.done <- err
	}()
	return r, nil
}

type remoteStripe struct {
	pw   *io.PipeWriter
	req  *http.Request
	done chan error
	end  bool // finished or aborted
}

func (r *remoteStripe) Write(p []byte) (int, error) { return r.pw.Write(p) }

func (r *remoteStripe) Finish(m backend.Meta) error {
	r.req.Trailer.Set(trailerMeta, encodeMeta(m))
	r.pw.Close()
	r.end = true
	return <-r.done
}

// Abort ends the PUT unfinished; the peer removes what it received.
func (r *remoteStripe) Abort() {
	if r.end {
		return
	}
	r.end = true
	r.pw.CloseWithError(errors.New("upload aborted"))
	<-r.done
}

// StripeReader reads ranges of stripe idx from the server at addr.
func (c *StorageClient) StripeReader(ctx context.Context, addr string, fid uint64, idx int, token string) io.ReaderAt {
	return &remoteStripeReader{c: c, ctx: ctx, addr: addr, fid: fid, idx: idx, token: token}
}

type remoteStripeReader struct {
	c     *StorageClient
	ctx   context.Context
	addr  string
	fid   uint64
	idx   int
	token string
}

func (r *remoteStripeReader) ReadAt(p []byte, off int64) (int, error) {
	req := r.c.stripeRequest(r.ctx, http.MethodGet, r.addr, r.fid, r.idx, r.token, nil)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
	resp, err := r.c.HTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("stripe %d on %s: storage server unreachable", r.idx, r.addr)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent, http.StatusOK:
	case http.StatusNotFound:
		return 0, syscall.ENOENT
	case http.StatusRequestedRangeNotSatisfiable:
		return 0, io.EOF
	default:
		return 0, fmt.Errorf("stripe read %s: HTTP %d", r.addr, resp.StatusCode)
	}
	// A range past the stripe's end comes back short and ends cleanly
	// (io.EOF); a body cut off is an error, not the stripe's end. A
	// full range is no end of the stripe, even when its body's last read
	// said io.EOF with the bytes (an io.SectionReader over this would
	// end there: a move copied the first MiB of a replica and failed).
	n, err := transfer.Fill(resp.Body, p)
	switch {
	case err == io.EOF && n == len(p):
		err = nil
	case err != nil && err != io.EOF:
		err = fmt.Errorf("stripe %d on %s: %w", r.idx, r.addr, err)
	}
	return n, err
}

// StreamStripe reads stripe idx from the server at addr from offset off
// to its end in one streamed request (a GET of the whole stripe, or of
// what follows off), for copies that read it through: moves, rebuilds
// and repairs. A missing stripe is fs.ErrNotExist; a body cut off
// before its end fails its last read (transfer.ErrCut).
func (c *StorageClient) StreamStripe(ctx context.Context, addr string, fid uint64, idx int, token string, off int64) (io.ReadCloser, error) {
	req := c.stripeRequest(ctx, http.MethodGet, addr, fid, idx, token, nil)
	if off > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", off))
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("stripe %d on %s: storage server unreachable", idx, addr)
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusPartialContent:
		return resp.Body, nil
	case http.StatusRequestedRangeNotSatisfiable:
		resp.Body.Close()
		return io.NopCloser(strings.NewReader("")), nil // off is its end
	case http.StatusNotFound:
		resp.Body.Close()
		return nil, syscall.ENOENT
	}
	defer resp.Body.Close()
	return nil, responseError(resp, "stripe", fmt.Sprintf("stripe %d on %s", idx, addr))
}

// ProbeStripe asks the server at addr whether it holds stripe idx.
func (c *StorageClient) ProbeStripe(ctx context.Context, addr string, fid uint64, idx int, token string) error {
	resp, err := c.HTTP.Do(c.stripeRequest(ctx, http.MethodHead, addr, fid, idx, token, nil))
	if err != nil {
		return errors.New("storage server unreachable")
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// ReadFile reads the whole file the read capability token names from the
// storage server at addr (its HTTP base URL). The body is cut short, and
// reading it fails, if the file turns out unreadable in the middle.
func (c *StorageClient) ReadFile(ctx context.Context, addr, token string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(addr, "/")+ReadFilePath, nil)
	if err != nil {
		return nil, kerr.Wrap(kerr.Internal, "read", addr, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Secret)
	req.Header.Set(capHeader, token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, kerr.Wrap(kerr.Unavailable, "read", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, responseError(resp, "read", addr)
	}
	return resp.Body, nil
}

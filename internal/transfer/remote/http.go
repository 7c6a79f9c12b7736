package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/transfer"
)

// HTTP makes the HTTP ends of transfers under one Policy.
type HTTP struct {
	Policy *Policy
	// TLS configures https remotes (nil: system roots).
	TLS *tls.Config

	once   sync.Once
	client *http.Client
}

// maxHops bounds the redirects one request follows.
const maxHops = 10

func (h *HTTP) httpClient() *http.Client {
	h.once.Do(func() {
		tr := &http.Transport{
			DialContext:           h.Policy.Dialer().DialContext,
			TLSClientConfig:       h.TLS,
			ForceAttemptHTTP2:     false,
			MaxIdleConnsPerHost:   8,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   30 * time.Second,
			ResponseHeaderTimeout: 2 * time.Minute,
			ExpectContinueTimeout: 10 * time.Second,
			DisableCompression:    true,
			ReadBufferSize:        256 << 10,
			WriteBufferSize:       256 << 10,
		}
		h.client = &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxHops {
				return kerr.New(kerr.IO, "copy", Redact(req.URL), "too many redirects")
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return kerr.New(kerr.Permission, "copy", Redact(req.URL), "redirect to a scheme other than http(s)")
			}
			return h.Policy.checkPath(req.URL.Path)
		}}
	})
	return h.client
}

// Source is a remote file read with GET (redirects followed under the
// Policy). Header is sent with every request (the TransferHeader*
// headers of a COPY, prefix stripped); its values are never logged.
func (h *HTTP) Source(u *url.URL, header http.Header) transfer.Source {
	return &httpSource{h: h, u: u, header: header}
}

// Destination is a remote file written with PUT (Expect: 100-continue, so
// a server answering with a redirect, as Kaon's namespace does, gets the
// body at the new location), checked with HEAD + Want-Digest after it and
// removed with DELETE when that check fails.
func (h *HTTP) Destination(u *url.URL, header http.Header) transfer.Destination {
	return &httpDest{h: h, u: u, header: header}
}

type httpSource struct {
	h      *HTTP
	u      *url.URL
	header http.Header
}

func (s *httpSource) String() string { return Redact(s.u) }

func (s *httpSource) Open(ctx context.Context) (transfer.Reader, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.u.String(), nil)
	if err != nil {
		return nil, kerr.Wrap(kerr.Invalid, "open", s.String(), err)
	}
	copyHeader(req.Header, s.header)
	if req.Header.Get("Want-Digest") == "" {
		req.Header.Set("Want-Digest", "adler32, md5;q=0.5")
	}
	resp, err := s.h.httpClient().Do(req)
	if err != nil {
		return nil, netError("GET", s.String(), err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, statusError("GET", s.String(), resp)
	}
	sums := checksum.ParseDigestHeader(resp.Header.Get("Digest"))
	for k, v := range checksum.ParseDigestHeader(resp.Header.Get("Repr-Digest")) {
		if sums[k] == "" {
			sums[k] = v
		}
	}
	return &httpReader{ReadCloser: resp.Body, size: resp.ContentLength, sums: sums, name: s.String()}, nil
}

type httpReader struct {
	io.ReadCloser
	size int64
	sums map[string]string
	name string
}

func (r *httpReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = netError("read", r.name, err)
	}
	return n, err
}
func (r *httpReader) Size() int64                  { return r.size }
func (r *httpReader) Checksums() map[string]string { return r.sums }

type httpDest struct {
	h      *HTTP
	u      *url.URL
	header http.Header
}

func (d *httpDest) String() string { return Redact(d.u) }

func (d *httpDest) Create(ctx context.Context, size int64) (transfer.Writer, error) {
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	w := &httpWriter{d: d, pw: pw, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.err = d.put(ctx, pr, size)
		pr.CloseWithError(errors.New("request finished"))
	}()
	return w, nil
}

// put sends one PUT, following redirects by hand: the body is a stream
// that cannot be replayed, so it is only handed over once a server asks
// for it (100 Continue) or reads it.
func (d *httpDest) put(ctx context.Context, body io.Reader, size int64) error {
	u := d.u
	for hop := 0; ; hop++ {
		gb := &guardedBody{r: body}
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), gb)
		if err != nil {
			return kerr.Wrap(kerr.Invalid, "put", Redact(u), err)
		}
		copyHeader(req.Header, d.header)
		req.Header.Set("Expect", "100-continue")
		req.ContentLength = size
		if size == 0 {
			req.Body = http.NoBody
		}
		resp, err := d.h.httpClient().Do(req)
		if err != nil {
			return netError("PUT", Redact(u), err)
		}
		if resp.StatusCode >= 400 {
			err := statusError("PUT", Redact(u), resp)
			resp.Body.Close()
			return err
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		switch {
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			return nil
		case resp.StatusCode == http.StatusTemporaryRedirect || resp.StatusCode == http.StatusPermanentRedirect ||
			resp.StatusCode == http.StatusFound || resp.StatusCode == http.StatusMovedPermanently:
			if gb.started() {
				return kerr.New(kerr.IO, "put", Redact(u), "server redirected after reading part of the body")
			}
			if hop >= maxHops {
				return kerr.New(kerr.IO, "put", Redact(d.u), "too many redirects")
			}
			next, err := u.Parse(resp.Header.Get("Location"))
			if err != nil || (next.Scheme != "http" && next.Scheme != "https") {
				return kerr.New(kerr.Permission, "put", Redact(u), "redirect to an unusable location")
			}
			if err := d.h.Policy.checkPath(next.Path); err != nil {
				return err
			}
			u = next
		default:
			return kerr.New(kerr.IO, "put", Redact(u), "PUT answered "+resp.Status)
		}
	}
}

// guardedBody hands the upload stream to one request and records whether
// any of it was read; the transport's Close does not end the stream.
type guardedBody struct {
	r    io.Reader
	mu   sync.Mutex
	read bool
}

func (g *guardedBody) Read(p []byte) (int, error) {
	g.mu.Lock()
	g.read = true
	g.mu.Unlock()
	return g.r.Read(p)
}
func (g *guardedBody) Close() error { return nil }
func (g *guardedBody) started() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.read
}

type httpWriter struct {
	d      *httpDest
	pw     *io.PipeWriter
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (w *httpWriter) Write(p []byte) (int, error) {
	n, err := w.pw.Write(p)
	if err != nil {
		<-w.done
		if w.err != nil {
			return n, w.err
		}
		return n, kerr.Wrap(kerr.IO, "put", w.d.String(), err)
	}
	return n, nil
}

// Commit ends the body and waits for the server's answer.
func (w *httpWriter) Commit(ctx context.Context) error {
	w.pw.Close()
	select {
	case <-w.done:
	case <-ctx.Done():
		w.cancel()
		<-w.done
	}
	w.cancel()
	return w.err
}

func (w *httpWriter) Abort(context.Context) {
	w.pw.CloseWithError(kerr.New(kerr.IO, "put", w.d.String(), "copy aborted"))
	w.cancel()
	<-w.done
}

// StoredChecksum asks the remote for the checksum of what it stored.
func (w *httpWriter) StoredChecksum(ctx context.Context, typ string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, w.d.u.String(), nil)
	if err != nil {
		return "", kerr.Wrap(kerr.Invalid, "head", w.d.String(), err)
	}
	copyHeader(req.Header, w.d.header)
	req.Header.Set("Want-Digest", typ)
	resp, err := w.d.h.httpClient().Do(req)
	if err != nil {
		return "", netError("HEAD", w.d.String(), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", nil // the file was stored; a remote that does not answer HEAD cannot vouch
	}
	return checksum.ParseDigestHeader(resp.Header.Get("Digest"))[typ], nil
}

// Remove deletes the stored file.
func (w *httpWriter) Remove(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, w.d.u.String(), nil)
	if err != nil {
		return err
	}
	copyHeader(req.Header, w.d.header)
	resp, err := w.d.h.httpClient().Do(req)
	if err != nil {
		return netError("DELETE", w.d.String(), err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return statusError("DELETE", w.d.String(), resp)
	}
	return nil
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

// statusError maps a remote's error status to a Kaon error naming the
// remote, the status and the start of its message.
func statusError(method, name string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	msg := strings.Join(strings.Fields(strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, string(b))), " ")
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	text := fmt.Sprintf("%s answered %s", method, resp.Status)
	if msg != "" {
		text += ": " + msg
	}
	k := kerr.IO
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusGone:
		k = kerr.NotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		k = kerr.Permission
	case http.StatusConflict, http.StatusPreconditionFailed:
		k = kerr.Exists
	case http.StatusInsufficientStorage:
		k = kerr.NoSpace
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		k = kerr.Busy
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		k = kerr.Unsupported
	}
	return kerr.New(k, strings.ToLower(method), name, text)
}

// netError wraps a transport error; a policy refusal keeps its kind.
func netError(op, name string, err error) error {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return kerr.Wrap(ke.Kind, strings.ToLower(op), name, ke)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return kerr.Wrap(kerr.Unavailable, strings.ToLower(op), name, stripURL(err))
}

// stripURL drops the URL net/http puts in its errors (it may carry a
// query with credentials).
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Data goes through the namespace server's redirect: it authorizes the
// request (with the client's credentials) and sends the client to a
// storage server with a capability in the URL, which is all the storage
// server needs; the credentials are never sent there.

// Put uploads size bytes of body (-1: unknown) as the file at path,
// replacing it, creating missing parents. It asks the namespace server
// first without the body, then streams the body to the storage server it
// names; the file is visible once the storage server answered.
func (c *Client) Put(ctx context.Context, path string, body io.Reader, size int64) error {
	resp, err := c.ask(ctx, http.MethodPut, path)
	if err != nil {
		return err
	}
	resp, err = c.follow(ctx, resp, path, body, size)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return textError(resp)
	}
	return nil
}

// ErrNoRewrite is (within) Rewrite's error when the namespace server
// does not rewrite files.
var ErrNoRewrite = errors.New("no rewrite")

// RewriteAttrs are what a rewrite commits with the content besides it:
// the mode (when SetMode) and the modification time (when not zero)
// the writer set while it wrote the file.
type RewriteAttrs struct {
	SetMode bool
	Mode    uint32
	MTime   time.Time
}

// Rewrite uploads size bytes of body as the new content of the file at
// path, which must still be file fid at data version version (else
// kerr.Busy): the file keeps its owner and extended attributes, and its
// mode and modification time unless attrs name them, one upload and one
// commit, rather than an update session. It returns the file's new id,
// and whether the server took attrs (one that predates them does not:
// the file then kept its mode and has the commit's time). A server that
// does not know rewrites is answered ErrNoRewrite (kerr.Unsupported),
// nothing written.
func (c *Client) Rewrite(ctx context.Context, path string, fid, version uint64, attrs RewriteAttrs, body io.Reader, size int64) (uint64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.Base+escapePath(path), http.NoBody)
	if err != nil {
		return 0, false, kerr.Wrap(kerr.Invalid, "PUT", path, err)
	}
	req.Header.Set(nsapi.RewriteHeader, fmt.Sprintf("%d.%d", fid, version))
	if attrs.SetMode {
		req.Header.Set(nsapi.RewriteModeHeader, strconv.FormatUint(uint64(attrs.Mode&0o7777), 8))
	}
	if !attrs.MTime.IsZero() {
		req.Header.Set(nsapi.RewriteMTimeHeader, strconv.FormatInt(attrs.MTime.UnixNano(), 10))
	}
	resp, err := c.do(req)
	if err != nil {
		return 0, false, err
	}
	got := resp.Header.Get(nsapi.RewriteHeader)
	if resp.StatusCode == http.StatusTemporaryRedirect && got == "" {
		// It began a plain replace (swept as never written): not sent.
		resp.Body.Close()
		return 0, false, &kerr.Error{Kind: kerr.Unsupported, Op: "PUT", Path: path, Msg: "the namespace server does not rewrite files", Err: ErrNoRewrite}
	}
	took := (!attrs.SetMode || resp.Header.Get(nsapi.RewriteModeHeader) != "") &&
		(attrs.MTime.IsZero() || resp.Header.Get(nsapi.RewriteMTimeHeader) != "")
	nid, _ := strconv.ParseUint(got, 10, 64)
	if resp, err = c.follow(ctx, resp, path, body, size); err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return 0, false, textError(resp)
	}
	return nid, took, nil
}

// Get opens the file at path for reading and returns its content and
// length (-1: unknown); the caller closes it.
func (c *Client) Get(ctx context.Context, path string) (io.ReadCloser, int64, error) {
	resp, err := c.ask(ctx, http.MethodGet, path)
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode == http.StatusTemporaryRedirect {
		if resp, err = c.follow(ctx, resp, path, nil, 0); err != nil {
			return nil, 0, err
		}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, 0, textError(resp)
	}
	return resp.Body, resp.ContentLength, nil
}

// Checksum returns the file's checksum of type typ (adler32, crc32c,
// md5, sha256) as lowercase hex: the recorded one, or one the service
// computes from the stored data now and records (HEAD with Want-Digest).
func (c *Client) Checksum(ctx context.Context, path, typ string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, c.Base+escapePath(path), http.NoBody)
	if err != nil {
		return "", kerr.Wrap(kerr.Invalid, "checksum", path, err)
	}
	req.Header.Set("Want-Digest", typ)
	resp, err := c.do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", textError(resp)
	}
	sum := checksum.ParseDigestHeader(resp.Header.Get("Digest"))[typ]
	if sum == "" {
		return "", kerr.New(kerr.Unsupported, "checksum", path, "the server answered no "+typ+" checksum")
	}
	return sum, nil
}

// ask sends method on path to the namespace server, without a body.
func (c *Client) ask(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.Base+escapePath(path), http.NoBody)
	if err != nil {
		return nil, kerr.Wrap(kerr.Invalid, method, path, err)
	}
	return c.do(req)
}

// follow sends the request the namespace server answered with resp to
// the storage server its redirect names, with body (nil: none).
func (c *Client) follow(ctx context.Context, resp *http.Response, path string, body io.Reader, size int64) (*http.Response, error) {
	return c.followWith(ctx, resp, path, body, size, nil)
}

// followWith is follow sending headers hdr too.
func (c *Client) followWith(ctx context.Context, resp *http.Response, path string, body io.Reader, size int64, hdr http.Header) (*http.Response, error) {
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect {
		return nil, textError(resp)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	req, err := http.NewRequestWithContext(ctx, resp.Request.Method, resp.Header.Get("Location"), body)
	if err != nil {
		return nil, kerr.Wrap(kerr.Invalid, resp.Request.Method, path, err)
	}
	if body != nil {
		req.ContentLength = size
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	next, err := c.HTTP.Do(req)
	if err != nil {
		// The URL's query is the capability: it stays out of the error
		// (and so out of logs).
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = req.URL.Scheme + "://" + req.URL.Host + req.URL.Path
		}
		return nil, &kerr.Error{Kind: kerr.Unavailable, Msg: "cannot reach the storage server for " + path, Err: err}
	}
	return next, nil
}

// textError is the error of a data request: the server's text, which
// names the path and the reason, and the kind its status says.
func textError(resp *http.Response) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return &kerr.Error{Kind: kerr.KindOfHTTP(resp.StatusCode), Msg: strings.TrimSpace(string(msg))}
}

// escapePath escapes each name of a namespace path for a URL.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// PutRange writes n bytes of data (read from its offset 0) at offset off
// of the existing file at path, in place: an update of one range, which
// the storage server commits (the file's next data version) before it
// answers. The file grows when the range ends beyond it. The request to
// the namespace server carries the body with Expect: 100-continue, so
// the body is sent once, to the storage server its redirect names.
func (c *Client) PutRange(ctx context.Context, path string, off int64, data io.ReaderAt, n int64) error {
	if n <= 0 {
		return kerr.New(kerr.Invalid, "PUT", path, "an update of no bytes")
	}
	crange := fmt.Sprintf("bytes %d-%d/*", off, off+n-1)
	body := func() io.Reader { return io.NewSectionReader(data, 0, n) }
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.Base+escapePath(path), body())
	if err != nil {
		return kerr.Wrap(kerr.Invalid, "PUT", path, err)
	}
	req.ContentLength = n
	// A standby sends the request on to the active server (307): the
	// body is sent again from its start.
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(body()), nil }
	req.Header.Set("Content-Range", crange)
	req.Header.Set("Expect", "100-continue")
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	resp, err = c.followWith(ctx, resp, path, body(), n, http.Header{"Content-Range": {crange}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return textError(resp)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	return nil
}

// Reader reads ranges of one file from the storage server the namespace
// server sent it to. The redirect (with its capability) is asked for
// once, and again when the storage server refuses it (the capability
// expired, the file moved, an update made it name an older data
// version).
type Reader struct {
	c    *Client
	path string
	mu   sync.Mutex
	loc  string
}

// OpenReader asks the namespace server to read the file at path.
func (c *Client) OpenReader(ctx context.Context, path string) (*Reader, error) {
	r := &Reader{c: c, path: path}
	if err := r.locate(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reader) locate(ctx context.Context) error {
	resp, err := r.c.ask(ctx, http.MethodGet, r.path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect {
		return textError(resp)
	}
	r.mu.Lock()
	r.loc = resp.Header.Get("Location")
	r.mu.Unlock()
	return nil
}

// Capability is the signed capability the namespace server granted this
// reader (the cap parameter of its redirect), "" if it names none.
func (r *Reader) Capability() string {
	r.mu.Lock()
	loc := r.loc
	r.mu.Unlock()
	u, err := url.Parse(loc)
	if err != nil {
		return ""
	}
	return u.Query().Get("cap")
}

// ReadAt reads len(p) bytes at off; it returns fewer with io.EOF at the
// end of the file.
func (r *Reader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for try := 0; ; try++ {
		r.mu.Lock()
		loc := r.loc
		r.mu.Unlock()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
		if err != nil {
			return 0, kerr.Wrap(kerr.Invalid, "read", r.path, err)
		}
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
		resp, err := r.c.HTTP.Do(req)
		if err != nil {
			return 0, &kerr.Error{Kind: kerr.Unavailable, Op: "read", Path: r.path, Msg: "cannot reach the storage server", Err: err}
		}
		switch resp.StatusCode {
		case http.StatusPartialContent, http.StatusOK:
			if resp.StatusCode == http.StatusOK && off > 0 { // the whole file: skip to off
				_, err = io.CopyN(io.Discard, resp.Body, off)
			}
			n := 0
			if err == nil {
				n, err = io.ReadFull(resp.Body, p)
			}
			resp.Body.Close()
			if err == io.ErrUnexpectedEOF || (err == io.EOF && n == 0) {
				err = io.EOF
			}
			if err != nil && err != io.EOF {
				err = &kerr.Error{Kind: kerr.IO, Op: "read", Path: r.path, Msg: "reading from the storage server", Err: err}
			}
			return n, err
		case http.StatusRequestedRangeNotSatisfiable:
			resp.Body.Close()
			return 0, io.EOF
		}
		// Refused: the capability expired, or names a data version the
		// file is no longer at (an update committed since). Ask again once.
		if try > 0 {
			defer resp.Body.Close()
			return 0, textError(resp)
		}
		resp.Body.Close()
		if err := r.locate(ctx); err != nil {
			return 0, err
		}
	}
}

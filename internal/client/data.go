package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
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
	next, err := c.HTTP.Do(req)
	if err != nil {
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

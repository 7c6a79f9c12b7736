// Package client is the Go client of a Kaon namespace server: its admin
// API (/api/v1/..., one typed method per route) and data transfers (Put,
// Get) through the namespace server's redirects to storage servers. It
// speaks the service's vocabulary (nsapi). The CLI and the tests use it,
// and so will the caching mount.
//
// Every error a method returns is a *kerr.Error: the server's kind and
// message (which names the path and the reason), so callers test it with
// kerr.Is or errors.As as they would the service's own errors.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/srr"
)

// Client calls one namespace server. A standby of a replicated instance
// sends it to the active server (nsapi.ActiveHeader), which it follows
// with its credentials.
type Client struct {
	Base  string       // http(s)://host:port
	HTTP  *http.Client // its CheckRedirect is the client's own
	Token string       // a bearer token sent to the namespace servers ("": none)
	// CallerPid, when not 0, is sent to the namespace servers as the
	// local process a mount acts for (nsapi.CallerPidHeader).
	CallerPid uint32
	// Assert, when set, adds a credential to each request to a namespace
	// server (a gateway's assertion of the caller it is made for: it is
	// called again for each request, redirects included).
	Assert func(*http.Request)
	// Servers are the other namespace servers of the instance, tried in
	// order when the one a request goes to cannot be reached (its
	// connection is refused or times out: nothing was sent, so any
	// request may go again); the one that answered is used from then on.
	Servers []string

	cur atomic.Int32 // the server used: 0 Base, i Servers[i-1]

	h2once sync.Once
	h2     *http.Client // HTTP/2 only, for sessions (session.go)
}

// New returns a client of the namespace server at base.
func New(base string) *Client {
	return &Client{Base: strings.TrimRight(base, "/"), HTTP: &http.Client{}}
}

// do sends req to the namespace server with the client's credentials,
// following the redirects of standbys to the active server; any other
// redirect (to a storage server) is the answer.
func (c *Client) do(req *http.Request) (*http.Response, error) {
	if len(c.Servers) == 0 {
		return c.doAt(req)
	}
	all := append([]string{c.Base}, c.Servers...)
	cur := int(c.cur.Load())
	order := []int{cur} // the current server, then the others in order
	for i := range all {
		if i != cur {
			order = append(order, i)
		}
	}
	var tried []string
	for _, n := range order {
		if err := retarget(req, all[n], len(tried) > 0); err != nil {
			break
		}
		resp, err := c.doAt(req)
		if err == nil {
			c.cur.Store(int32(n))
			return resp, nil
		}
		tried = append(tried, all[n])
		if !unreached(err) {
			return nil, err
		}
	}
	return nil, &kerr.Error{Kind: kerr.Unavailable, Msg: "cannot reach Kaon at any of " + strings.Join(tried, ", ")}
}

// current is the server requests go to first: the one that answered
// last.
func (c *Client) current() string {
	if n := int(c.cur.Load()); n > 0 && n <= len(c.Servers) {
		return strings.TrimRight(c.Servers[n-1], "/")
	}
	return c.Base
}

// retarget points req (made for Base) at server base, with its body
// anew when again (a previous attempt was refused before it was sent).
func retarget(req *http.Request, base string, again bool) error {
	u, err := url.Parse(base)
	if err != nil {
		return err
	}
	if again && req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return errors.New("the body cannot be sent again")
		}
		if req.Body, err = req.GetBody(); err != nil {
			return err
		}
	}
	req.URL.Scheme, req.URL.Host, req.Host = u.Scheme, u.Host, ""
	return nil
}

// unreached says err is a failure to connect: the request was not sent.
func unreached(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// doAt sends req to the server its URL names.
func (c *Client) doAt(req *http.Request) (*http.Response, error) {
	c.authorize(req)
	hc := *c.HTTP
	hc.CheckRedirect = func(next *http.Request, via []*http.Request) error {
		if next.Response == nil || next.Response.Header.Get(nsapi.ActiveHeader) == "" {
			return http.ErrUseLastResponse
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects between namespace servers")
		}
		c.authorize(next) // the active server of the same instance
		return nil
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &kerr.Error{Kind: kerr.Unavailable, Msg: "cannot reach Kaon at " + c.Base, Err: err}
	}
	return resp, nil
}

func (c *Client) authorize(req *http.Request) {
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.CallerPid != 0 {
		req.Header.Set(nsapi.CallerPidHeader, strconv.FormatUint(uint64(c.CallerPid), 10))
	}
	if c.Assert != nil {
		c.Assert(req)
	}
}

// call invokes route with request req: GET with its fields as query
// parameters, or POST (write) with it as the JSON body; the JSON answer
// is decoded into out when out is not nil.
func (c *Client) call(ctx context.Context, write bool, route string, req, out any) error {
	u := c.Base + "/api/v1/" + route
	body, err := json.Marshal(req)
	if err != nil {
		return kerr.Wrap(kerr.Invalid, route, "", err)
	}
	method := http.MethodGet
	if write {
		method = http.MethodPost
	} else {
		args, err := nsapi.ArgsOf(nil, body)
		if err != nil {
			return kerr.Wrap(kerr.Invalid, route, "", err)
		}
		q := url.Values{}
		for k, v := range args {
			q.Set(k, v)
		}
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		body = nil
	}
	hr, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return kerr.Wrap(kerr.Invalid, route, "", err)
	}
	if write {
		hr.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return &kerr.Error{Kind: kerr.Unavailable, Msg: "reading the answer of " + u, Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		var e nsapi.ErrorBody
		if json.Unmarshal(data, &e) == nil && e.Message != "" {
			return &kerr.Error{Kind: e.Kind, Msg: e.Message}
		}
		return &kerr.Error{Kind: kerr.KindOfHTTP(resp.StatusCode), Msg: fmt.Sprintf("%s %s: HTTP %d", method, route, resp.StatusCode)}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return &kerr.Error{Kind: kerr.Internal, Msg: "bad answer from " + u, Err: err}
		}
	}
	return nil
}

// get calls a GET route and returns its answer.
func get[T any](ctx context.Context, c *Client, route string, req any) (T, error) {
	var out T
	err := c.call(ctx, false, route, req, &out)
	return out, err
}

// post calls a POST route and returns its answer.
func post[T any](ctx context.Context, c *Client, route string, req any) (T, error) {
	var out T
	err := c.call(ctx, true, route, req, &out)
	return out, err
}

// change calls a POST route whose answer tells nothing.
func (c *Client) change(ctx context.Context, route string, req any) error {
	return c.call(ctx, true, route, req, nil)
}

// Stat returns the entry at path.
func (c *Client) Stat(ctx context.Context, path string) (nsapi.Entry, error) {
	return get[nsapi.Entry](ctx, c, "stat", nsapi.PathRequest{Path: path})
}

// List returns the entries of a directory (a file lists as itself).
func (c *Client) List(ctx context.Context, path string) ([]nsapi.Entry, error) {
	return get[[]nsapi.Entry](ctx, c, "ls", nsapi.PathRequest{Path: path})
}

// FileInfo returns a file's entry with its stripes.
func (c *Client) FileInfo(ctx context.Context, path string) (nsapi.Entry, error) {
	return get[nsapi.Entry](ctx, c, "fileinfo", nsapi.PathRequest{Path: path})
}

// Mkdir creates a directory (mode 0 = 0755).
func (c *Client) Mkdir(ctx context.Context, path string, mode uint32, parents bool) error {
	return c.change(ctx, "mkdir", nsapi.MkdirRequest{Path: path, Mode: nsapi.Mode(mode), Parents: parents})
}

// MkdirStat creates a directory as Mkdir does and returns its entry as
// the server answered it (ID 0: it did not; stat it).
func (c *Client) MkdirStat(ctx context.Context, path string, mode uint32, parents bool) (nsapi.Entry, error) {
	return post[nsapi.Entry](ctx, c, "mkdir", nsapi.MkdirRequest{Path: path, Mode: nsapi.Mode(mode), Parents: parents})
}

// Remove removes a file or an empty directory, or a tree when recursive.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	return c.change(ctx, "rm", nsapi.RemoveRequest{Path: path, Recursive: recursive})
}

// Rename moves from to to.
func (c *Client) Rename(ctx context.Context, from, to string, overwrite bool) error {
	return c.change(ctx, "mv", nsapi.RenameRequest{From: from, To: to, Overwrite: overwrite})
}

// Chmod sets permission bits.
func (c *Client) Chmod(ctx context.Context, path string, mode uint32) error {
	return c.change(ctx, "chmod", nsapi.ChmodRequest{Path: path, Mode: nsapi.Mode(mode)})
}

// Chown sets owner and group.
func (c *Client) Chown(ctx context.Context, path string, uid, gid uint32) error {
	return c.change(ctx, "chown", nsapi.ChownRequest{Path: path, UID: uid, GID: gid})
}

// ChmodStat and ChownStat change as Chmod and Chown do and return the
// entry after the change as the server answered it (ID 0: it did not).
func (c *Client) ChmodStat(ctx context.Context, path string, mode uint32) (nsapi.Entry, error) {
	return post[nsapi.Entry](ctx, c, "chmod", nsapi.ChmodRequest{Path: path, Mode: nsapi.Mode(mode)})
}

func (c *Client) ChownStat(ctx context.Context, path string, uid, gid uint32) (nsapi.Entry, error) {
	return post[nsapi.Entry](ctx, c, "chown", nsapi.ChownRequest{Path: path, UID: uid, GID: gid})
}

// SetAttr sets an extended attribute.
func (c *Client) SetAttr(ctx context.Context, path, name, value string) error {
	return c.change(ctx, "attr/set", nsapi.AttrRequest{Path: path, Name: name, Value: value})
}

// RemoveAttr removes an extended attribute.
func (c *Client) RemoveAttr(ctx context.Context, path, name string) error {
	return c.change(ctx, "attr/rm", nsapi.AttrRequest{Path: path, Name: name})
}

// Attrs lists extended attributes as name/value pairs sorted by name.
func (c *Client) Attrs(ctx context.Context, path string) ([][2]string, error) {
	return get[[][2]string](ctx, c, "attr/ls", nsapi.PathRequest{Path: path})
}

// Versions lists the versions kept of the file at path, oldest first.
func (c *Client) Versions(ctx context.Context, path string) ([]nsapi.Version, error) {
	return get[[]nsapi.Version](ctx, c, "file/versions", nsapi.PathRequest{Path: path})
}

// RestoreVersion makes version id the content of the file at path again
// (the current content becomes a version) and returns the file.
func (c *Client) RestoreVersion(ctx context.Context, path, id string) (nsapi.Entry, error) {
	return post[nsapi.Entry](ctx, c, "file/restore-version", nsapi.RestoreVersionRequest{Path: path, Version: id})
}

// SetQuota sets a limit on a directory (0: none).
func (c *Client) SetQuota(ctx context.Context, path string, key nsapi.QuotaKey, limit nsapi.Amount) error {
	return c.change(ctx, "quota/set", nsapi.QuotaSetRequest{QuotaKeyRequest: nsapi.QuotaKeyRequest{Path: path, Kind: key.Kind, ID: key.ID},
		Bytes: limit.Bytes, Files: limit.Files})
}

// RemoveQuota removes a limit from a directory.
func (c *Client) RemoveQuota(ctx context.Context, path string, key nsapi.QuotaKey) error {
	return c.change(ctx, "quota/rm", nsapi.QuotaKeyRequest{Path: path, Kind: key.Kind, ID: key.ID})
}

// Quotas lists the limits of the quota nodes at or below path.
func (c *Client) Quotas(ctx context.Context, path string) ([]nsapi.Quota, error) {
	return get[[]nsapi.Quota](ctx, c, "quota/ls", nsapi.QuotaListRequest{Path: path})
}

// RecycleList lists the recycled entries the caller may see.
func (c *Client) RecycleList(ctx context.Context) ([]nsapi.RecycleEntry, error) {
	return get[[]nsapi.RecycleEntry](ctx, c, "recycle/ls", nsapi.None{})
}

// RecycleRestore restores entry key and returns the path restored to.
func (c *Client) RecycleRestore(ctx context.Context, key string, forceRename bool) (string, error) {
	out, err := post[nsapi.RecycleRestored](ctx, c, "recycle/restore", nsapi.RecycleRestoreRequest{Key: key, ForceRename: forceRename})
	return out.Path, err
}

// RecyclePurge purges entry key ("" = all the caller may see; olderThan >
// 0 = only those deleted longer ago) and returns how many.
func (c *Client) RecyclePurge(ctx context.Context, key string, olderThan time.Duration) (int, error) {
	out, err := post[nsapi.RecyclePurged](ctx, c, "recycle/purge", nsapi.RecyclePurgeRequest{Key: key, OlderThan: nsapi.Duration(olderThan)})
	return out.Purged, err
}

// Whoami asks who the server thinks the caller is.
func (c *Client) Whoami(ctx context.Context) (nsapi.Whoami, error) {
	return get[nsapi.Whoami](ctx, c, "whoami", nsapi.None{})
}

// StorageReport is the instance's WLCG Storage Resource Report.
func (c *Client) StorageReport(ctx context.Context) (srr.Document, error) {
	return get[srr.Document](ctx, c, "srr", nsapi.None{})
}

// IssueToken asks for a bearer token of the server's own issuer (root only).
func (c *Client) IssueToken(ctx context.Context, r nsapi.TokenRequest) (string, error) {
	out, err := post[nsapi.Token](ctx, c, "token/issue", r)
	return out.Token, err
}

// RotateTokenKey makes the server sign new tokens with a new key (root
// only) and returns its id.
func (c *Client) RotateTokenKey(ctx context.Context) (string, error) {
	out, err := post[nsapi.TokenKey](ctx, c, "token/rotate", nsapi.None{})
	return out.KID, err
}

// TokenKeys lists the server's token signing keys, newest first.
func (c *Client) TokenKeys(ctx context.Context) ([]nsapi.TokenKey, error) {
	return get[[]nsapi.TokenKey](ctx, c, "token/keys", nsapi.None{})
}

// NSStatus asks the server for the namespace's status.
func (c *Client) NSStatus(ctx context.Context) (nsapi.NSStatus, error) {
	return get[nsapi.NSStatus](ctx, c, "ns/status", nsapi.None{})
}

// StepDown asks the active namespace server of a replicated instance to
// hand its role to a standby (root only); a standby sends the request on.
func (c *Client) StepDown(ctx context.Context) error {
	return c.change(ctx, "ns/step-down", nsapi.None{})
}

// Dump copies the namespace dump below path (one file path per line,
// streamed: the admin only) to w. A dump the server cut short is an
// error, never a shorter listing.
func (c *Client) Dump(ctx context.Context, path string, w io.Writer) error {
	u := c.Base + "/api/v1/ns/dump?" + url.Values{"path": {path}}.Encode()
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return kerr.Wrap(kerr.Invalid, "ns dump", path, err)
	}
	resp, err := c.do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e nsapi.ErrorBody
		if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e) == nil && e.Message != "" {
			return &kerr.Error{Kind: e.Kind, Msg: e.Message}
		}
		return &kerr.Error{Kind: kerr.KindOfHTTP(resp.StatusCode), Msg: fmt.Sprintf("ns dump %s: HTTP %d", path, resp.StatusCode)}
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return &kerr.Error{Kind: kerr.Unavailable, Op: "ns dump", Path: path, Msg: "the dump was cut short", Err: err}
	}
	return nil
}

// Touch creates an empty file with permission bits mode (0: 0644),
// replacing a file unless exclusive, and returns it.
func (c *Client) Touch(ctx context.Context, path string, exclusive bool, mode uint32) (nsapi.Entry, error) {
	return post[nsapi.Entry](ctx, c, "touch", nsapi.TouchRequest{Path: path, Exclusive: exclusive, Mode: nsapi.Mode(mode)})
}

// Symlink creates a symbolic link at path whose content is target.
func (c *Client) Symlink(ctx context.Context, target, path string) (nsapi.Entry, error) {
	return post[nsapi.Entry](ctx, c, "symlink", nsapi.SymlinkRequest{Path: path, Target: target})
}

// Truncate sets the size of the file at path in place (cut, or extended
// with zeros).
func (c *Client) Truncate(ctx context.Context, path string, size int64) error {
	return c.change(ctx, "truncate", nsapi.TruncateRequest{Path: path, Size: size})
}

// SetMTime sets the modification time of path (the server's current
// time when now).
func (c *Client) SetMTime(ctx context.Context, path string, mtime time.Time, now bool) error {
	r := nsapi.UtimesRequest{Path: path, Now: now}
	if !now {
		r.MTime = mtime.UnixNano()
	}
	return c.change(ctx, "utimes", r)
}

// StatFS reports the capacity of the space new files below path go to.
func (c *Client) StatFS(ctx context.Context, path string) (nsapi.SpaceStats, error) {
	return get[nsapi.SpaceStats](ctx, c, "statfs", nsapi.PathRequest{Path: path})
}

// Package client is a Go client of the namespace server's admin API
// (/api/v1/...) with its wire types: the CLI and the tests use it, and so
// will the caching mount.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls one namespace server.
type Client struct {
	Base  string // http(s)://host:port
	HTTP  *http.Client
	Token string // a bearer token sent with every call ("": none)
}

// New returns a client of the namespace server at base.
func New(base string) *Client {
	return &Client{Base: strings.TrimRight(base, "/"), HTTP: &http.Client{}}
}

// Error is an error the server returned; its message already names the
// path and the reason.
type Error struct {
	Status int    // HTTP status
	Kind   int    // the server's error kind (kerr.Kind)
	Msg    string // the server's message
}

func (e *Error) Error() string { return e.Msg }

// Call invokes route with args: GET with query parameters when out is
// read-only (write false), POST with a JSON body otherwise; the JSON
// answer is decoded into out when out is not nil.
func (c *Client) Call(ctx context.Context, write bool, route string, args map[string]any, out any) error {
	u := c.Base + "/api/v1/" + route
	var body io.Reader
	method := http.MethodGet
	if write {
		method = http.MethodPost
		b, _ := json.Marshal(args)
		body = bytes.NewReader(b)
	} else if len(args) > 0 {
		q := url.Values{}
		for k, v := range args {
			q.Set(k, fmt.Sprint(v))
		}
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	if write {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach Kaon at %s: %w", c.Base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e ErrorBody
		if json.Unmarshal(data, &e) == nil && e.Message != "" {
			return &Error{Status: resp.StatusCode, Kind: e.Kind, Msg: e.Message}
		}
		return &Error{Status: resp.StatusCode, Msg: fmt.Sprintf("%s %s: HTTP %d", method, route, resp.StatusCode)}
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func (c *Client) get(ctx context.Context, route string, args map[string]any, out any) error {
	return c.Call(ctx, false, route, args, out)
}

func (c *Client) post(ctx context.Context, route string, args map[string]any) error {
	return c.Call(ctx, true, route, args, nil)
}

// Stat returns the entry at path.
func (c *Client) Stat(ctx context.Context, path string) (Entry, error) {
	var e Entry
	err := c.get(ctx, "stat", map[string]any{"path": path}, &e)
	return e, err
}

// List returns the entries of a directory (a file lists as itself).
func (c *Client) List(ctx context.Context, path string) ([]Entry, error) {
	var es []Entry
	err := c.get(ctx, "ls", map[string]any{"path": path}, &es)
	return es, err
}

// FileInfo returns a file's entry with its stripes.
func (c *Client) FileInfo(ctx context.Context, path string) (Entry, error) {
	var e Entry
	err := c.get(ctx, "fileinfo", map[string]any{"path": path}, &e)
	return e, err
}

// Mkdir creates a directory (mode 0 = 0755).
func (c *Client) Mkdir(ctx context.Context, path string, mode uint32, parents bool) error {
	args := map[string]any{"path": path, "parents": parents}
	if mode != 0 {
		args["mode"] = fmt.Sprintf("%o", mode)
	}
	return c.post(ctx, "mkdir", args)
}

// Remove removes a file or an empty directory, or a tree when recursive.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	return c.post(ctx, "rm", map[string]any{"path": path, "recursive": recursive})
}

// Rename moves from to to.
func (c *Client) Rename(ctx context.Context, from, to string, overwrite bool) error {
	return c.post(ctx, "mv", map[string]any{"from": from, "to": to, "overwrite": overwrite})
}

// Chmod sets permission bits.
func (c *Client) Chmod(ctx context.Context, path string, mode uint32) error {
	return c.post(ctx, "chmod", map[string]any{"path": path, "mode": fmt.Sprintf("%o", mode)})
}

// Chown sets owner and group.
func (c *Client) Chown(ctx context.Context, path string, uid, gid uint32) error {
	return c.post(ctx, "chown", map[string]any{"path": path, "uid": fmt.Sprint(uid), "gid": fmt.Sprint(gid)})
}

// Touch creates an empty file.
func (c *Client) Touch(ctx context.Context, path string, exclusive bool) error {
	return c.post(ctx, "touch", map[string]any{"path": path, "exclusive": exclusive})
}

// SetAttr sets an extended attribute.
func (c *Client) SetAttr(ctx context.Context, path, name, value string) error {
	return c.post(ctx, "attr/set", map[string]any{"path": path, "name": name, "value": value})
}

// RemoveAttr removes an extended attribute.
func (c *Client) RemoveAttr(ctx context.Context, path, name string) error {
	return c.post(ctx, "attr/rm", map[string]any{"path": path, "name": name})
}

// Attrs lists extended attributes as name/value pairs sorted by name.
func (c *Client) Attrs(ctx context.Context, path string) ([][2]string, error) {
	var out [][2]string
	err := c.get(ctx, "attr/ls", map[string]any{"path": path}, &out)
	return out, err
}

// Filesystems lists the filesystems (`fs ls`).
func (c *Client) Filesystems(ctx context.Context) ([]Filesystem, error) {
	var out []Filesystem
	err := c.get(ctx, "fs/ls", nil, &out)
	return out, err
}

// NewFilesystem is what AddFilesystem registers (empty fields: defaults).
type NewFilesystem struct {
	Node, Path   string
	Group, Space string
	IO           string // auto, direct, buffered
	ObjectSize   string // RADOS object size, e.g. 16M
	Location     string // failure-domain tag, site::rack1
}

// AddFilesystem registers a filesystem on a storage server node: a
// directory, or rados://[USER@]POOL[/NAMESPACE][?conf=FILE].
func (c *Client) AddFilesystem(ctx context.Context, f NewFilesystem) error {
	return c.post(ctx, "fs/add", map[string]any{"node": f.Node, "path": f.Path, "group": f.Group, "space": f.Space,
		"io": f.IO, "object-size": f.ObjectSize, "location": f.Location})
}

// ConfigFilesystem sets key=value on filesystem id.
func (c *Client) ConfigFilesystem(ctx context.Context, id, key, value string) error {
	return c.post(ctx, "fs/config", map[string]any{"id": id, "key": key, "value": value})
}

// ReinitFilesystem lets the storage server create filesystem id anew.
func (c *Client) ReinitFilesystem(ctx context.Context, id string) error {
	return c.post(ctx, "fs/reinit", map[string]any{"id": id})
}

// DefineSpace defines a space.
func (c *Client) DefineSpace(ctx context.Context, name string) error {
	return c.post(ctx, "space/define", map[string]any{"name": name})
}

// ConfigSpace sets key=value on a space (cephfs.pool, cephfs.object-size).
func (c *Client) ConfigSpace(ctx context.Context, name, key, value string) error {
	return c.post(ctx, "space/config", map[string]any{"name": name, "key": key, "value": value})
}

// Spaces lists the spaces (`space ls`).
func (c *Client) Spaces(ctx context.Context) ([]Space, error) {
	var out []Space
	err := c.get(ctx, "space/ls", nil, &out)
	return out, err
}

// SetQuota sets a limit (kind user, group or project) on a directory.
func (c *Client) SetQuota(ctx context.Context, path, kind string, id uint32, bytes, files int64) error {
	return c.post(ctx, "quota/set", map[string]any{"path": path, "kind": kind, "id": fmt.Sprint(id),
		"bytes": fmt.Sprint(bytes), "files": fmt.Sprint(files)})
}

// RemoveQuota removes a limit from a directory.
func (c *Client) RemoveQuota(ctx context.Context, path, kind string, id uint32) error {
	return c.post(ctx, "quota/rm", map[string]any{"path": path, "kind": kind, "id": fmt.Sprint(id)})
}

// Quotas lists the limits of the quota nodes at or below path.
func (c *Client) Quotas(ctx context.Context, path string) ([]Quota, error) {
	var out []Quota
	err := c.get(ctx, "quota/ls", map[string]any{"path": path}, &out)
	return out, err
}

// RecycleList lists the recycled entries the caller may see.
func (c *Client) RecycleList(ctx context.Context) ([]RecycleEntry, error) {
	var out []RecycleEntry
	err := c.get(ctx, "recycle/ls", nil, &out)
	return out, err
}

// RecycleRestore restores entry key and returns the path restored to.
func (c *Client) RecycleRestore(ctx context.Context, key string, forceRename bool) (string, error) {
	var out struct {
		Path string `json:"path"`
	}
	err := c.Call(ctx, true, "recycle/restore", map[string]any{"key": key, "force_rename": forceRename}, &out)
	return out.Path, err
}

// RecyclePurge purges entry key ("" = all the caller may see; olderThan >
// 0 = only those deleted longer ago) and returns how many.
func (c *Client) RecyclePurge(ctx context.Context, key string, olderThan time.Duration) (int, error) {
	var out struct {
		Purged int `json:"purged"`
	}
	err := c.Call(ctx, true, "recycle/purge", map[string]any{"key": key, "older_than": olderThan.String()}, &out)
	return out.Purged, err
}

// Versions lists the versions kept of the file at path, oldest first.
func (c *Client) Versions(ctx context.Context, path string) ([]Version, error) {
	var out []Version
	err := c.get(ctx, "file/versions", map[string]any{"path": path}, &out)
	return out, err
}

// RestoreVersion makes version id the content of the file at path again
// (the current content becomes a version) and returns the file.
func (c *Client) RestoreVersion(ctx context.Context, path, id string) (Entry, error) {
	var e Entry
	err := c.Call(ctx, true, "file/restore-version", map[string]any{"path": path, "version": id}, &e)
	return e, err
}

// Whoami asks who the server thinks the caller is.
func (c *Client) Whoami(ctx context.Context) (Whoami, error) {
	var w Whoami
	err := c.get(ctx, "whoami", nil, &w)
	return w, err
}

// IssueToken asks for a bearer token of the server's own issuer (root only).
func (c *Client) IssueToken(ctx context.Context, user string, paths, scopes, audience []string, ttl time.Duration) (string, error) {
	var out Token
	err := c.Call(ctx, true, "token/issue", map[string]any{"user": user, "paths": paths, "scopes": scopes,
		"audience": audience, "ttl": ttl.String()}, &out)
	return out.Token, err
}

// RotateTokenKey makes the server sign new tokens with a new key (root only).
func (c *Client) RotateTokenKey(ctx context.Context) (string, error) {
	var out TokenKey
	err := c.Call(ctx, true, "token/rotate", nil, &out)
	return out.KID, err
}

// TokenKeys lists the server's token signing keys, newest first.
func (c *Client) TokenKeys(ctx context.Context) ([]TokenKey, error) {
	var out []TokenKey
	err := c.get(ctx, "token/keys", nil, &out)
	return out, err
}

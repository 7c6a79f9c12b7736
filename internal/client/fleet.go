package client

import (
	"context"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Filesystems, spaces and data movement.

// Nodes lists the storage servers (`node ls`).
func (c *Client) Nodes(ctx context.Context) ([]nsapi.NodeRow, error) {
	return get[[]nsapi.NodeRow](ctx, c, "node/ls", nsapi.None{})
}

// ConfigNode sets key=value on every filesystem of a storage server.
func (c *Client) ConfigNode(ctx context.Context, node, key, value string) error {
	return c.change(ctx, "node/config", nsapi.NodeConfigRequest{Name: node, Key: key, Value: value})
}

// NSStat returns the namespace's figures (`ns stat`).
func (c *Client) NSStat(ctx context.Context) (nsapi.NSStat, error) {
	return get[nsapi.NSStat](ctx, c, "ns/stat", nsapi.None{})
}

// SaveConfig saves the runtime settings as the next version of name.
func (c *Client) SaveConfig(ctx context.Context, name string) (nsapi.SavedConfig, error) {
	return post[nsapi.SavedConfig](ctx, c, "config/save", nsapi.ConfigRef{Name: name})
}

// LoadConfig applies version v (0: the latest) of saved configuration name.
func (c *Client) LoadConfig(ctx context.Context, name string, v uint64) (nsapi.ConfigLoaded, error) {
	return post[nsapi.ConfigLoaded](ctx, c, "config/load", nsapi.ConfigRef{Name: name, Version: v})
}

// SavedConfigs lists the saved configurations' versions (`config ls`).
func (c *Client) SavedConfigs(ctx context.Context) ([]nsapi.SavedConfig, error) {
	return get[[]nsapi.SavedConfig](ctx, c, "config/ls", nsapi.None{})
}

// Debug sets the log level of a role (mgm, fst; "": both).
func (c *Client) Debug(ctx context.Context, level, role string) (nsapi.DebugLevels, error) {
	return post[nsapi.DebugLevels](ctx, c, "debug", nsapi.DebugRequest{Level: level, Role: role})
}

// IOStat returns the I/O by user, group and application (`io stat`).
func (c *Client) IOStat(ctx context.Context, r nsapi.IOStatRequest) ([]nsapi.IORow, error) {
	return get[[]nsapi.IORow](ctx, c, "io/stat", r)
}

// Filesystems lists the filesystems (`fs ls`).
func (c *Client) Filesystems(ctx context.Context) ([]nsapi.Filesystem, error) {
	return get[[]nsapi.Filesystem](ctx, c, "fs/ls", nsapi.None{})
}

// FilesystemPaths lists where each filesystem's stripes live (the admin
// or a gateway host only).
func (c *Client) FilesystemPaths(ctx context.Context) ([]nsapi.FsPath, error) {
	return get[[]nsapi.FsPath](ctx, c, "fs/paths", nsapi.None{})
}

// AddFilesystem registers a filesystem on a storage server node: a
// directory, or rados://[USER@]POOL[/NAMESPACE][?conf=FILE].
func (c *Client) AddFilesystem(ctx context.Context, f nsapi.NewFilesystem) error {
	return c.change(ctx, "fs/add", f)
}

// ConfigFilesystem sets key=value on filesystem id.
func (c *Client) ConfigFilesystem(ctx context.Context, id uint32, key, value string) error {
	return c.change(ctx, "fs/config", nsapi.FsConfigRequest{ID: id, Key: key, Value: value})
}

// ReinitFilesystem lets the storage server create filesystem id anew.
func (c *Client) ReinitFilesystem(ctx context.Context, id uint32) error {
	return c.change(ctx, "fs/reinit", nsapi.FsReinitRequest{ID: id})
}

// FsStatus returns filesystem id with its drain progress.
func (c *Client) FsStatus(ctx context.Context, id uint32) (nsapi.FsStatus, error) {
	return get[nsapi.FsStatus](ctx, c, "fs/status", nsapi.FsStatusRequest{ID: id})
}

// DefineSpace defines a space.
func (c *Client) DefineSpace(ctx context.Context, name string) error {
	return c.change(ctx, "space/define", nsapi.NameRequest{Name: name})
}

// ConfigSpace sets key=value on a space (cephfs.pool, cephfs.object-size).
func (c *Client) ConfigSpace(ctx context.Context, name, key, value string) error {
	return c.change(ctx, "space/config", nsapi.ConfigRequest{Name: name, Key: key, Value: value})
}

// Spaces lists the spaces (`space ls`).
func (c *Client) Spaces(ctx context.Context) ([]nsapi.Space, error) {
	return get[[]nsapi.Space](ctx, c, "space/ls", nsapi.None{})
}

// Groups lists the scheduling groups.
func (c *Client) Groups(ctx context.Context) ([]nsapi.Group, error) {
	return get[[]nsapi.Group](ctx, c, "group/ls", nsapi.None{})
}

// SetGroup sets key=value on group name (balancer, threshold,
// balancer.rate, balancer.parallel).
func (c *Client) SetGroup(ctx context.Context, name, key, value string) error {
	return c.change(ctx, "group/set", nsapi.ConfigRequest{Name: name, Key: key, Value: value})
}

// ConvertFile converts the file at path to space and layout ("": keep)
// and returns it as it is afterwards.
func (c *Client) ConvertFile(ctx context.Context, path, space, layout string) (nsapi.Entry, error) {
	return post[nsapi.Entry](ctx, c, "file/convert", nsapi.ConvertRequest{Path: path, Space: space, Layout: layout})
}

// ConvertStatus reports the conversion policies' progress.
func (c *Client) ConvertStatus(ctx context.Context) (nsapi.ConvertStatus, error) {
	return get[nsapi.ConvertStatus](ctx, c, "file/convert/status", nsapi.None{})
}

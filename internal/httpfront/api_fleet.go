package httpfront

import (
	"context"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Admin API: filesystems and spaces.

func (a api) nodes(ctx context.Context, c auth.Principal, _ nsapi.None) ([]nsapi.NodeRow, error) {
	return a.ns.Nodes(ctx, c)
}

func (a api) configNode(ctx context.Context, c auth.Principal, r nsapi.NodeConfigRequest) (done, error) {
	return done{}, a.ns.ConfigNode(ctx, c, r.Name, r.Key, r.Value)
}

func (a api) nsStat(ctx context.Context, c auth.Principal, _ nsapi.None) (nsapi.NSStat, error) {
	return a.ns.NSStat(ctx, c)
}

func (a api) saveConfig(ctx context.Context, c auth.Principal, r nsapi.ConfigRef) (nsapi.SavedConfig, error) {
	return a.ns.SaveConfig(ctx, c, r.Name)
}

func (a api) loadConfig(ctx context.Context, c auth.Principal, r nsapi.ConfigRef) (nsapi.ConfigLoaded, error) {
	return a.ns.LoadConfig(ctx, c, r.Name, r.Version)
}

func (a api) savedConfigs(ctx context.Context, c auth.Principal, _ nsapi.None) ([]nsapi.SavedConfig, error) {
	return a.ns.SavedConfigs(ctx, c)
}

func (a api) debug(ctx context.Context, c auth.Principal, r nsapi.DebugRequest) (nsapi.DebugLevels, error) {
	return a.ns.SetLogLevel(ctx, c, r)
}

func (a api) ioStat(ctx context.Context, c auth.Principal, r nsapi.IOStatRequest) ([]nsapi.IORow, error) {
	return a.ns.IOStat(ctx, c, r)
}

func (a api) filesystems(ctx context.Context, c auth.Principal, _ nsapi.None) ([]nsapi.Filesystem, error) {
	return a.ns.Filesystems(ctx, c)
}

func (a api) filesystemPaths(ctx context.Context, c auth.Principal, _ nsapi.None) ([]nsapi.FsPath, error) {
	return a.ns.FilesystemPaths(ctx, c)
}

func (a api) addFilesystem(ctx context.Context, c auth.Principal, r nsapi.NewFilesystem) (nsapi.Filesystem, error) {
	return a.ns.AddFilesystem(ctx, c, r)
}

func (a api) configFilesystem(ctx context.Context, c auth.Principal, r nsapi.FsConfigRequest) (done, error) {
	return done{}, a.ns.ConfigFilesystem(ctx, c, r.ID, r.Key, r.Value)
}

func (a api) reinitFilesystem(ctx context.Context, c auth.Principal, r nsapi.FsReinitRequest) (done, error) {
	return done{}, a.ns.ReinitFilesystem(ctx, c, r.ID)
}

func (a api) defineSpace(ctx context.Context, c auth.Principal, r nsapi.NameRequest) (done, error) {
	return done{}, a.ns.DefineSpace(ctx, c, r.Name)
}

func (a api) configSpace(ctx context.Context, c auth.Principal, r nsapi.ConfigRequest) (done, error) {
	return done{}, a.ns.ConfigSpace(ctx, c, r.Name, r.Key, r.Value)
}

func (a api) spaces(ctx context.Context, c auth.Principal, _ nsapi.None) ([]nsapi.Space, error) {
	return a.ns.Spaces(ctx, c)
}

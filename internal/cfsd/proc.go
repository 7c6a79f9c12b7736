package cfsd

import (
	"context"
	"fmt"
	"strings"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/kaon-storage/kaon/internal/fusecore"
	"github.com/kaon-storage/kaon/internal/kerr"
)

const (
	procName  = ".proc"
	idXattr   = "cfs.id"
	capsXattr = "security.capability"
)

// identity is how Kaon sees the caller (unix authentication: the
// kernel-supplied uid/gid/pid plus the process's groups).
func identity(c *fuse.Caller) string {
	gs := fusecore.CallerGroups(c)
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = fmt.Sprint(g)
	}
	return fmt.Sprintf("auth=unix uid=%d(%s) gid=%d groups=%s pid=%d", c.Uid, userName(c.Uid), c.Gid, strings.Join(parts, ","), c.Pid)
}

func (f *FS) charge(uid uint32, bytes, inodes int64) {
	if f.quota != nil {
		f.quota.Charge(uid, bytes, inodes)
	}
}

func (f *FS) addProc(ctx context.Context, root *fs.Inode) {
	files := map[string]*fusecore.ProcFile{
		"whoami": {Render: func(c *fuse.Caller) []byte { return []byte(identity(c) + "\n") }},
		"stats.json": {Render: func(c *fuse.Caller) []byte {
			// "starting" until the mounter has recorded the mount.
			pt, mode := false, "starting"
			if t := f.mount.Load(); t != nil {
				pt, mode = (*t).PassthroughActive(), "daemon"
				if pt {
					mode = "passthrough"
				}
			}
			return f.Stats.JSON(map[string]any{
				"backend": f.opts.Backend, "passthrough": pt, "data_path": mode,
				"quota": f.quota != nil, "recycle": f.recycle.Enabled(),
			})
		}},
		"quota": {
			Render: func(c *fuse.Caller) []byte {
				if f.quota == nil {
					return []byte("# quota disabled (mount with --quota)\n")
				}
				return f.quota.render(c)
			},
			Exec: func(c *fuse.Caller, data []byte) error {
				if f.quota == nil {
					return kerr.New(kerr.Unsupported, "quota", ".proc/quota", "quota disabled (mount with --quota)")
				}
				return f.quota.exec(c, data)
			},
		},
		"recycle": {Render: f.recycle.render, Exec: f.recycle.exec},
	}
	root.AddChild(procName, fusecore.NewProcDir(ctx, root, files), true)
}

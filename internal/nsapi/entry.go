package nsapi

import "time"

// Attr is what a client knows of a file or directory: identity,
// ownership, permission bits and times; for a file its size, layout,
// checksums and the filesystems holding its stripes; for a directory the
// accounting of its subtree (its Size is then TreeSize).
type Attr struct {
	ID        uint64            `json:"id"` // inode number: a rewritten or converted file gets a new one
	IsDir     bool              `json:"dir"`
	Mode      uint32            `json:"mode"` // permission bits
	UID       uint32            `json:"uid"`
	GID       uint32            `json:"gid"`
	Size      int64             `json:"size"`
	MTime     time.Time         `json:"mtime"`
	CTime     time.Time         `json:"ctime"`
	BTime     time.Time         `json:"btime"` // creation
	Layout    string            `json:"layout,omitempty"`
	Checksums map[string]string `json:"checksums,omitempty"` // type → lowercase hex
	Locations []uint32          `json:"locations,omitempty"` // filesystem ids, index = stripe or replica
	TreeSize  int64             `json:"treesize,omitempty"`
	TreeFiles int64             `json:"files,omitempty"`
	TreeDirs  int64             `json:"dirs,omitempty"`
	TreeMTime *time.Time        `json:"treemtime,omitempty"` // latest change below (directories)
	XAttrs    map[string]string `json:"xattrs,omitempty"`
	// DataVersion counts the committed changes of a file's bytes (0 as
	// uploaded; one more for each update session closed or truncation):
	// a cache keeps a file's pages while it is unchanged.
	DataVersion uint64 `json:"data_version,omitempty"`
	// Stale are the stripes (indexes into Locations) that missed an
	// update: never read until fsck rebuilt them from current ones.
	Stale []int `json:"stale,omitempty"`
	// Target is a symbolic link's target, verbatim ("" for files and
	// directories; a link's is never empty). A link has no data: its
	// Size is the target's length.
	Target string `json:"target,omitempty"`
}

// IsLink says whether a is a symbolic link's.
func (a *Attr) IsLink() bool { return a.Target != "" }

// Entry is a file, directory or symbolic link under its name (stat, ls,
// file info).
type Entry struct {
	Path string `json:"path"` // "" when it was asked for by inode
	Name string `json:"name"`
	Attr
	Stripes []Stripe `json:"stripes,omitempty"` // file info only
}

// Stripe is one physical file of a logical file. Where it is (node,
// physical path) is told to the admin only.
type Stripe struct {
	Index    int    `json:"index"`
	FsID     uint32 `json:"fsid"`
	Node     string `json:"node"`     // its storage server's data endpoint
	PhysPath string `json:"physpath"` // as the filesystem's backend names it
}

// Version is a kept content of a file (`file versions`): its id names it
// in the file's version folder, Path reads it.
type Version struct {
	ID        string            `json:"id"`
	Path      string            `json:"path"`
	Fid       uint64            `json:"fid"`
	Size      int64             `json:"size"`
	MTime     time.Time         `json:"mtime"`
	Checksums map[string]string `json:"checksums,omitempty"`
}

// RecycleEntry is a recycled file or tree (`recycle ls`).
type RecycleEntry struct {
	Key   string    `json:"key"`
	Path  string    `json:"path"` // where it was deleted from
	Dir   bool      `json:"dir"`
	UID   uint32    `json:"uid"`
	GID   uint32    `json:"gid"`
	Size  int64     `json:"size"`
	Files int64     `json:"files"`
	Time  time.Time `json:"time"` // when it was deleted
}

// OpenRequest is what a client asks of a file, in any protocol.
type OpenRequest struct {
	Write     bool   // open for writing
	Create    bool   // create if missing
	Truncate  bool   // replace an existing file
	Exclusive bool   // fail if the file exists
	MkPath    bool   // create missing parent directories (unless sys.mkpath=off)
	Mode      uint32 // permission bits of a new file (default 0644)
	Size      int64  // the size the client announced (booked against quota), 0 if unknown
	App       string // the client's application (eos.app, or its protocol client), for I/O accounting
	// Update opens an existing file to change it in place (root://
	// kXR_open_updt or kXR_open_apnd, an HTTP PUT with Content-Range): its
	// writes become the file's next data version when the session closes.
	// With Create a missing file is created as an upload; without, a
	// missing file is NotFound.
	Update bool
	// Rewrite (with Truncate), when not 0, is the id of the file at the
	// path that this upload rewrites whole, at data version
	// RewriteVersion: it is refused (kerr.Busy) unless the path is still
	// that file at that version at the open and at the commit, and the
	// new file keeps the old one's mode, owner and extended attributes
	// (its id changes). A mount sends a file it wrote from empty so.
	Rewrite        uint64
	RewriteVersion uint64
	// With Rewrite, what the writer set on the file while writing it,
	// committed with the content in the same commit: SetMode replaces the
	// mode with Mode; MTime (Unix ns, when not 0) is the modification
	// time recorded instead of the commit's. Owner or root only.
	SetMode bool
	MTime   int64
}

// RewriteHeader on a whole HTTP PUT names the file it rewrites,
// ID.DATAVERSION (OpenRequest's Rewrite); the namespace's redirect
// answers the new file's id in it, which tells the client that the
// server took it.
const RewriteHeader = "Kaon-Rewrite"

// With RewriteHeader, RewriteModeHeader (octal permission bits) and
// RewriteMTimeHeader (Unix ns) carry OpenRequest's Mode (SetMode) and
// MTime: a chmod and a utimes the writer made before its close, committed
// with the content.
const (
	RewriteModeHeader  = "Kaon-Rewrite-Mode"
	RewriteMTimeHeader = "Kaon-Rewrite-Mtime"
)

// AppName is app as I/O accounting keeps it (at most 32 letters, digits,
// '.', '_' or '-'), or def when nothing of it is left.
func AppName(app, def string) string {
	out := make([]byte, 0, len(app))
	for i := 0; i < len(app) && len(out) < 32; i++ {
		c := app[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return def
	}
	return string(out)
}

// Grant is a client's access to one file's data: where to go and the
// signed capability to show there. A write is an upload that replaces the
// file when it commits, or an update session (OpenRequest.Update) that
// changes it in place when it closes.
type Grant struct {
	File   Entry  // the file (for a write: the pending upload)
	Token  string // the signed capability
	Server Node   // the storage server that serves (reads) or receives (writes) it
}

// Node is a storage server, as clients reach it.
type Node struct {
	Name   string // node name in the registry
	HTTP   string // data endpoint base URL (http://host:port)
	XRootD string // root:// host:port, "" if none
}

// RemoveOptions says what a removal may remove.
type RemoveOptions struct {
	Dir       bool // the path must be a directory (rmdir); otherwise a file (rm)
	Any       bool // a file or an empty directory
	Recursive bool // a file or a whole tree (WebDAV DELETE)
}

// SpaceStats is the capacity behind a path (statfs): the space new files
// below it go to.
type SpaceStats struct {
	Space       string
	Total, Free uint64
	MaxFree     uint64 // the largest free space on one filesystem
	Filesystems int
}

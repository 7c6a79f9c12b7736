package nsapi

import (
	"strconv"
	"time"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// The requests of the admin API's routes. Each one's JSON form is what
// a client sends (a GET's fields go in the query, by the same names);
// FromArgs is how the server reads it (Args: quoted or not), refusing
// malformed arguments with the route's message before the service is
// called.

// None is the request of a route without arguments.
type None struct{}

// FromArgs reads nothing.
func (*None) FromArgs(Args) error { return nil }

// PathRequest names a path: stat, ls, fileinfo, attr/ls, file/versions.
type PathRequest struct {
	Path string `json:"path"`
}

// FromArgs reads r from a.
func (r *PathRequest) FromArgs(a Args) error { r.Path = a["path"]; return nil }

// MkdirRequest is POST mkdir: mode 0 is 0755.
type MkdirRequest struct {
	Path    string `json:"path"`
	Mode    Mode   `json:"mode,omitempty"`
	Parents bool   `json:"parents,omitempty"`
}

// FromArgs reads r from a.
func (r *MkdirRequest) FromArgs(a Args) (err error) {
	r.Path, r.Parents, r.Mode = a["path"], a.Bool("parents"), 0o755
	if a["mode"] != "" {
		r.Mode, err = ParseMode("mkdir", r.Path, a["mode"])
	}
	return err
}

// ChmodRequest is POST chmod.
type ChmodRequest struct {
	Path string `json:"path"`
	Mode Mode   `json:"mode"`
}

// FromArgs reads r from a.
func (r *ChmodRequest) FromArgs(a Args) (err error) {
	r.Path = a["path"]
	if a["mode"] == "" {
		return kerr.New(kerr.Invalid, "chmod", r.Path, "missing mode")
	}
	r.Mode, err = ParseMode("chmod", r.Path, a["mode"])
	return err
}

// ChownRequest is POST chown.
type ChownRequest struct {
	Path string `json:"path"`
	UID  uint32 `json:"uid,string"`
	GID  uint32 `json:"gid,string"`
}

// FromArgs reads r from a.
func (r *ChownRequest) FromArgs(a Args) error {
	r.Path = a["path"]
	uid, err1 := strconv.ParseUint(a["uid"], 10, 32)
	gid, err2 := strconv.ParseUint(a["gid"], 10, 32)
	if err1 != nil || err2 != nil {
		return kerr.New(kerr.Invalid, "chown", r.Path, "uid and gid must be numbers")
	}
	r.UID, r.GID = uint32(uid), uint32(gid)
	return nil
}

// TouchRequest is POST touch: an empty file (replacing a file unless
// exclusive).
type TouchRequest struct {
	Path      string `json:"path"`
	Exclusive bool   `json:"exclusive,omitempty"`
	Mode      Mode   `json:"mode,omitempty"` // permission bits of a new file (0: 0644)
}

// FromArgs reads r from a.
func (r *TouchRequest) FromArgs(a Args) (err error) {
	r.Path, r.Exclusive = a["path"], a.Bool("exclusive")
	if a["mode"] != "" {
		r.Mode, err = ParseMode("touch", r.Path, a["mode"])
	}
	return err
}

// SymlinkRequest is POST symlink: a symbolic link at Path whose content
// is Target, kept verbatim.
type SymlinkRequest struct {
	Path   string `json:"path"`
	Target string `json:"target"`
}

// FromArgs reads r from a.
func (r *SymlinkRequest) FromArgs(a Args) error {
	r.Path, r.Target = a["path"], a["target"]
	return nil
}

// TruncateRequest is POST truncate: the file's size changes in place
// (cut, or extended with zeros), its next data version.
type TruncateRequest struct {
	Path string `json:"path"`
	Size int64  `json:"size,string"`
}

// FromArgs reads r from a.
func (r *TruncateRequest) FromArgs(a Args) error {
	r.Path = a["path"]
	n, err := strconv.ParseInt(a["size"], 10, 64)
	if err != nil || n < 0 {
		return kerr.New(kerr.Invalid, "truncate", r.Path, "size must be a number of bytes")
	}
	r.Size = n
	return nil
}

// UtimesRequest is POST utimes: the modification time of path, or
// the server's current time when Now.
type UtimesRequest struct {
	Path  string `json:"path"`
	MTime int64  `json:"mtime,string,omitempty"` // unix ns
	Now   bool   `json:"now,omitempty"`
}

// FromArgs reads r from a.
func (r *UtimesRequest) FromArgs(a Args) error {
	r.Path, r.Now = a["path"], a.Bool("now")
	if r.Now {
		return nil
	}
	n, err := strconv.ParseInt(a["mtime"], 10, 64)
	if err != nil {
		return kerr.New(kerr.Invalid, "utimes", r.Path, "mtime must be unix nanoseconds (or now)")
	}
	r.MTime = n
	return nil
}

// RemoveRequest is POST rm: a file or an empty directory, or a tree when
// recursive.
type RemoveRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
}

// FromArgs reads r from a.
func (r *RemoveRequest) FromArgs(a Args) error {
	r.Path, r.Recursive = a["path"], a.Bool("recursive")
	return nil
}

// RenameRequest is POST mv.
type RenameRequest struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Overwrite bool   `json:"overwrite,omitempty"`
}

// FromArgs reads r from a.
func (r *RenameRequest) FromArgs(a Args) error {
	r.From, r.To, r.Overwrite = a["from"], a["to"], a.Bool("overwrite")
	return nil
}

// AttrRequest is POST attr/set (name=value) and attr/rm (name).
type AttrRequest struct {
	Path  string `json:"path"`
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

// FromArgs reads r from a.
func (r *AttrRequest) FromArgs(a Args) error {
	r.Path, r.Name, r.Value = a["path"], a["name"], a["value"]
	return nil
}

// FromArgs reads f from a (POST fs/add).
func (f *NewFilesystem) FromArgs(a Args) error {
	*f = NewFilesystem{Node: a["node"], Path: a["path"], Group: a["group"], Space: a["space"], IO: a["io"], ObjectSize: a["object-size"]}
	if f.ObjectSize != "" {
		if _, err := ParseSize(f.ObjectSize); err != nil {
			return kerr.New(kerr.Invalid, "fs add", f.ObjectSize, err.Error())
		}
	}
	return nil
}

// FsConfigRequest is POST fs/config: key=value on filesystem ID.
type FsConfigRequest struct {
	ID    uint32 `json:"id,string"`
	Key   string `json:"key"`
	Value string `json:"value"`
}

// FromArgs reads r from a.
func (r *FsConfigRequest) FromArgs(a Args) (err error) {
	r.Key, r.Value = a["key"], a["value"]
	r.ID, err = ParseFsID("fs config", a["id"])
	return err
}

// FsStatusRequest is GET fs/status.
type FsStatusRequest struct {
	ID uint32 `json:"id,string"`
}

// FromArgs reads r from a.
func (r *FsStatusRequest) FromArgs(a Args) (err error) {
	r.ID, err = ParseFsID("fs status", a["id"])
	return err
}

// FsReinitRequest is POST fs/reinit.
type FsReinitRequest struct {
	ID uint32 `json:"id,string"`
}

// FromArgs reads r from a.
func (r *FsReinitRequest) FromArgs(a Args) (err error) {
	r.ID, err = ParseFsID("fs reinit", a["id"])
	return err
}

// NameRequest names a space (POST space/define).
type NameRequest struct {
	Name string `json:"name"`
}

// FromArgs reads r from a.
func (r *NameRequest) FromArgs(a Args) error { r.Name = a["name"]; return nil }

// ConfigRequest sets key=value on a named space (POST space/config) or
// group (POST group/set).
type ConfigRequest struct {
	Name  string `json:"name"`
	Key   string `json:"key"`
	Value string `json:"value"`
}

// FromArgs reads r from a.
func (r *ConfigRequest) FromArgs(a Args) error {
	r.Name, r.Key, r.Value = a["name"], a["key"], a["value"]
	return nil
}

// QuotaKeyRequest names one limit of the quota node at Path (POST
// quota/rm).
type QuotaKeyRequest struct {
	Path string    `json:"path"`
	Kind QuotaKind `json:"kind"`
	ID   uint32    `json:"id,string"` // uid or gid; not read for the project
}

// Key is the limit r names.
func (r QuotaKeyRequest) Key() QuotaKey { return QuotaKey{Kind: r.Kind, ID: r.ID} }

// FromArgs reads r from a.
func (r *QuotaKeyRequest) FromArgs(a Args) error { return r.read(a, "quota rm") }

func (r *QuotaKeyRequest) read(a Args, op string) error {
	r.Path, r.Kind = a["path"], QuotaKind(a["kind"])
	id, err := strconv.ParseUint(a["id"], 10, 32)
	if r.Kind == QuotaProject {
		id, err = 0, nil
	}
	if err != nil {
		return kerr.New(kerr.Invalid, op, r.Path, "bad uid/gid")
	}
	r.ID = uint32(id)
	switch r.Kind {
	case QuotaUser, QuotaGroup, QuotaProject:
		return nil
	}
	return kerr.New(kerr.Invalid, op, r.Path, "quota kind must be user, group or project")
}

// QuotaSetRequest is POST quota/set: a limit of bytes and files (0: none).
type QuotaSetRequest struct {
	QuotaKeyRequest
	Bytes int64 `json:"bytes,string"`
	Files int64 `json:"files,string"`
}

// Limit is the amount r sets.
func (r QuotaSetRequest) Limit() Amount { return Amount{Bytes: r.Bytes, Files: r.Files} }

// FromArgs reads r from a.
func (r *QuotaSetRequest) FromArgs(a Args) error {
	if err := r.read(a, "quota set"); err != nil {
		return err
	}
	b, err1 := strconv.ParseInt(a["bytes"], 10, 64)
	f, err2 := strconv.ParseInt(a["files"], 10, 64)
	if err1 != nil || err2 != nil {
		return kerr.New(kerr.Invalid, "quota set", r.Path, "bytes and files must be numbers")
	}
	r.Bytes, r.Files = b, f
	return nil
}

// QuotaListRequest is GET quota/ls: the quota nodes at or below Path
// ("" is "/").
type QuotaListRequest struct {
	Path string `json:"path"`
}

// FromArgs reads r from a.
func (r *QuotaListRequest) FromArgs(a Args) error {
	r.Path = a["path"]
	if r.Path == "" {
		r.Path = "/"
	}
	return nil
}

// RecycleRestoreRequest is POST recycle/restore: entry Key back where it
// was deleted from (under another name if that is taken and ForceRename).
type RecycleRestoreRequest struct {
	Key         string `json:"key"`
	ForceRename bool   `json:"force_rename,omitempty"`
}

// FromArgs reads r from a.
func (r *RecycleRestoreRequest) FromArgs(a Args) error {
	r.Key, r.ForceRename = a["key"], a.Bool("force_rename")
	return nil
}

// RecycleRestored is where recycle/restore put the entry back.
type RecycleRestored struct {
	Path string `json:"path"`
}

// RecyclePurgeRequest is POST recycle/purge: entry Key ("": every one the
// caller may see), only those deleted longer than OlderThan ago (0: any).
type RecyclePurgeRequest struct {
	Key       string   `json:"key"`
	OlderThan Duration `json:"older_than,omitempty"`
}

// FromArgs reads r from a.
func (r *RecyclePurgeRequest) FromArgs(a Args) error {
	r.Key = a["key"]
	if v := a["older_than"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return kerr.New(kerr.Invalid, "recycle purge", v, "bad duration (e.g. 72h)")
		}
		r.OlderThan = Duration(d)
	}
	return nil
}

// RecyclePurged is how many entries recycle/purge removed.
type RecyclePurged struct {
	Purged int `json:"purged"`
}

// RestoreVersionRequest is POST file/restore-version.
type RestoreVersionRequest struct {
	Path    string `json:"path"`
	Version string `json:"version"` // the version's id (Version.ID)
}

// FromArgs reads r from a.
func (r *RestoreVersionRequest) FromArgs(a Args) error {
	r.Path, r.Version = a["path"], a["version"]
	return nil
}

// ConvertRequest is POST file/convert: the file at Path to Space and
// Layout ("": keep).
type ConvertRequest struct {
	Path   string `json:"path"`
	Space  string `json:"space"`
	Layout string `json:"layout"`
}

// FromArgs reads r from a.
func (r *ConvertRequest) FromArgs(a Args) error {
	r.Path, r.Space, r.Layout = a["path"], a["space"], a["layout"]
	return nil
}

// FromArgs reads r from a (POST token/issue).
func (r *TokenRequest) FromArgs(a Args) (err error) {
	ttl, err := time.ParseDuration(a["ttl"])
	if err != nil {
		return kerr.New(kerr.Invalid, "token issue", a["ttl"], "bad lifetime")
	}
	r.User, r.TTL = a["user"], Duration(ttl)
	for k, dst := range map[string]*[]string{"paths": &r.Paths, "scopes": &r.Scopes, "audience": &r.Audience} {
		if *dst, err = a.Strings("token issue", k); err != nil {
			return err
		}
	}
	return nil
}

// FsckReportRequest is GET fsck/report: the findings of Class ("": all)
// on filesystem FsID (0: all).
type FsckReportRequest struct {
	Class string `json:"class,omitempty"`
	FsID  uint32 `json:"fs,omitempty"`
}

// FromArgs reads r from a.
func (r *FsckReportRequest) FromArgs(a Args) (err error) {
	r.Class = a["class"]
	r.FsID, err = fsckFs(a, "fsck report")
	return err
}

// FsckRunRequest is POST fsck/run: scans of filesystem FsID (0: all) now,
// re-reading the data when Scrub.
type FsckRunRequest struct {
	FsID  uint32 `json:"fs,omitempty"`
	Scrub bool   `json:"scrub,omitempty"`
}

// FromArgs reads r from a.
func (r *FsckRunRequest) FromArgs(a Args) (err error) {
	r.Scrub = a.Bool("scrub")
	r.FsID, err = fsckFs(a, "fsck run")
	return err
}

// FsckRepairRequest is POST fsck/repair: the findings of Class ("all":
// every class) on filesystem FsID (0: all).
type FsckRepairRequest struct {
	Class string `json:"class"`
	FsID  uint32 `json:"fs,omitempty"`
}

// FromArgs reads r from a.
func (r *FsckRepairRequest) FromArgs(a Args) (err error) {
	if r.FsID, err = fsckFs(a, "fsck repair"); err != nil {
		return err
	}
	if r.Class = a["class"]; r.Class == "" {
		return kerr.New(kerr.Invalid, "fsck repair", "", "name the class to repair (or all)")
	}
	return nil
}

// fsckFs reads fsck's filesystem argument ("fs", absent: 0, all).
func fsckFs(a Args, op string) (uint32, error) {
	if a["fs"] == "" {
		return 0, nil
	}
	return ParseFsID(op, a["fs"])
}

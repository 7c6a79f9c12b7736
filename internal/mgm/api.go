package mgm

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"sort"
	"strconv"
	"time"

	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// Entry is the JSON form of an inode in the admin API.
type Entry struct {
	Path      string            `json:"path"`
	Name      string            `json:"name"`
	ID        uint64            `json:"id"`
	IsDir     bool              `json:"dir"`
	Mode      uint32            `json:"mode"`
	UID       uint32            `json:"uid"`
	GID       uint32            `json:"gid"`
	Size      int64             `json:"size"`
	MTime     time.Time         `json:"mtime"`
	CTime     time.Time         `json:"ctime"`
	BTime     time.Time         `json:"btime"`
	Layout    string            `json:"layout,omitempty"`
	Checksums map[string]string `json:"checksums,omitempty"`
	Locations []uint32          `json:"locations,omitempty"`
	TreeSize  int64             `json:"treesize,omitempty"`
	TreeFiles int64             `json:"files,omitempty"`
	TreeDirs  int64             `json:"dirs,omitempty"`
	TreeMTime *time.Time        `json:"treemtime,omitempty"`
	XAttrs    map[string]string `json:"xattrs,omitempty"`
	Stripes   []Stripe          `json:"stripes,omitempty"`
}

// EntryOf converts an inode.
func EntryOf(p string, n *namespace.Inode) Entry {
	e := Entry{Path: p, Name: n.Name, ID: n.ID, IsDir: n.IsDir, Mode: n.Mode, UID: n.UID, GID: n.GID,
		Size: n.Size, MTime: time.Unix(0, n.MTime), CTime: time.Unix(0, n.CTime), BTime: time.Unix(0, n.BTime),
		Layout: n.Layout, Checksums: n.Checksums, Locations: n.Locations, XAttrs: n.XAttrs}
	if n.IsDir {
		t := time.Unix(0, n.TreeMTime)
		e.Size, e.TreeSize, e.TreeFiles, e.TreeDirs, e.TreeMTime = n.TreeSize, n.TreeSize, n.TreeFiles, n.TreeDirs, &t
	}
	return e
}

// SpaceState summarizes a space for `space ls`.
type SpaceState struct {
	Name        string `json:"name"`
	Groups      int    `json:"groups"`
	Filesystems int    `json:"filesystems"`
	RW          int    `json:"rw"`
	Booted      int    `json:"booted"`
	Capacity    uint64 `json:"capacity"`
	Used        uint64 `json:"used"`
	Files       int64  `json:"files"`
}

// Spaces aggregates the registry per space.
func (s *Server) Spaces() []SpaceState {
	m := map[string]*SpaceState{}
	groups := map[string]map[string]bool{}
	for _, f := range s.reg.list() {
		sp := m[f.Space]
		if sp == nil {
			sp = &SpaceState{Name: f.Space}
			m[f.Space] = sp
			groups[f.Space] = map[string]bool{}
		}
		groups[f.Space][f.Group] = true
		sp.Filesystems++
		if f.ConfigStatus == "rw" {
			sp.RW++
		}
		if f.BootStatus == "booted" {
			sp.Booted++
		}
		sp.Capacity += f.Capacity
		sp.Used += f.Used
		sp.Files += f.Files
	}
	var out []SpaceState
	for name, sp := range m {
		sp.Groups = len(groups[name])
		out = append(out, *sp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

type apiFunc func(r *http.Request, c namespace.Caller, q apiArgs) (any, error)

// apiArgs merges query parameters and a JSON body.
type apiArgs map[string]string

func (a apiArgs) bool(k string) bool { b, _ := strconv.ParseBool(a[k]); return b }

func (s *Server) apiHandler() http.Handler {
	mux := http.NewServeMux()
	handle := func(route string, write bool, fn apiFunc) {
		mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
			if write != (r.Method == http.MethodPost) {
				cluster.WriteError(w, kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "wrong method"))
				return
			}
			args := apiArgs{}
			for k, v := range r.URL.Query() {
				args[k] = v[0]
			}
			if r.Method == http.MethodPost {
				body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
				if len(body) > 0 {
					var m map[string]any
					if err := json.Unmarshal(body, &m); err != nil {
						cluster.WriteError(w, kerr.Wrap(kerr.Invalid, "api", r.URL.Path, err))
						return
					}
					for k, v := range m {
						switch v := v.(type) {
						case string:
							args[k] = v
						default:
							b, _ := json.Marshal(v)
							args[k] = string(b)
						}
					}
				}
			}
			out, err := fn(r, s.caller(r), args)
			if err != nil {
				cluster.WriteError(w, err)
				return
			}
			_ = cluster.WriteJSON(w, out)
		})
	}
	ns := s.ns
	handle("/api/v1/stat", false, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		n, err := ns.Stat(c, a["path"])
		if err != nil {
			return nil, err
		}
		p, _ := namespace.CleanPath(a["path"])
		return EntryOf(p, n), nil
	})
	handle("/api/v1/ls", false, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		p, err := namespace.CleanPath(a["path"])
		if err != nil {
			return nil, err
		}
		n, err := ns.Stat(c, p)
		if err != nil {
			return nil, err
		}
		if !n.IsDir {
			return []Entry{EntryOf(p, n)}, nil
		}
		ents, err := ns.List(c, p)
		if err != nil {
			return nil, err
		}
		out := make([]Entry, len(ents))
		for i, e := range ents {
			out[i] = EntryOf(path.Join(p, e.Name), e)
		}
		return out, nil
	})
	handle("/api/v1/mkdir", true, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		mode := uint64(0o755)
		if a["mode"] != "" {
			var err error
			if mode, err = strconv.ParseUint(a["mode"], 8, 32); err != nil {
				return nil, kerr.New(kerr.Invalid, "mkdir", a["path"], "bad mode")
			}
		}
		return struct{}{}, ns.Mkdir(c, a["path"], uint32(mode), a.bool("parents"))
	})
	handle("/api/v1/chmod", true, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		mode, err := strconv.ParseUint(a["mode"], 8, 32)
		if err != nil || mode > 0o7777 {
			return nil, kerr.New(kerr.Invalid, "chmod", a["path"], fmt.Sprintf("bad mode %q (octal)", a["mode"]))
		}
		return struct{}{}, ns.Chmod(c, a["path"], uint32(mode))
	})
	handle("/api/v1/chown", true, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		uid, err1 := strconv.ParseUint(a["uid"], 10, 32)
		gid, err2 := strconv.ParseUint(a["gid"], 10, 32)
		if err1 != nil || err2 != nil {
			return nil, kerr.New(kerr.Invalid, "chown", a["path"], "uid and gid must be numbers")
		}
		return struct{}{}, ns.Chown(c, a["path"], uint32(uid), uint32(gid))
	})
	handle("/api/v1/touch", true, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		_, err := ns.CreateEmpty(c, a["path"], namespace.CreateOptions{Exclusive: a.bool("exclusive")})
		return struct{}{}, err
	})
	handle("/api/v1/rm", true, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		if a.bool("recursive") {
			return struct{}{}, ns.RemoveAll(c, a["path"])
		}
		n, err := ns.Stat(c, a["path"])
		if err != nil {
			return nil, err
		}
		if n.IsDir {
			return struct{}{}, ns.Rmdir(c, a["path"])
		}
		return struct{}{}, ns.Remove(c, a["path"])
	})
	handle("/api/v1/mv", true, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		return struct{}{}, ns.Rename(c, a["from"], a["to"], a.bool("overwrite"))
	})
	handle("/api/v1/attr/set", true, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		return struct{}{}, ns.SetXAttr(c, a["path"], a["name"], a["value"])
	})
	handle("/api/v1/attr/rm", true, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		return struct{}{}, ns.RemoveXAttr(c, a["path"], a["name"])
	})
	handle("/api/v1/attr/ls", false, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		return ns.XAttrs(c, a["path"])
	})
	handle("/api/v1/fileinfo", false, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		n, stripes, err := s.FileInfo(c, a["path"])
		if err != nil {
			return nil, err
		}
		p, _ := namespace.CleanPath(a["path"])
		e := EntryOf(p, n)
		e.Stripes = stripes
		return e, nil
	})
	handle("/api/v1/fs/ls", false, func(*http.Request, namespace.Caller, apiArgs) (any, error) {
		return s.Filesystems(), nil
	})
	handle("/api/v1/fs/add", true, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		if c.UID != 0 {
			return nil, kerr.New(kerr.Permission, "fs add", "", "root only")
		}
		return s.AddFilesystem(a["node"], a["path"], a["group"])
	})
	handle("/api/v1/fs/config", true, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		if c.UID != 0 {
			return nil, kerr.New(kerr.Permission, "fs config", "", "root only")
		}
		id, err := strconv.ParseUint(a["id"], 10, 32)
		if err != nil {
			return nil, kerr.New(kerr.Invalid, "fs config", a["id"], "bad filesystem id")
		}
		return struct{}{}, s.ConfigFilesystem(uint32(id), a["key"], a["value"])
	})
	handle("/api/v1/fs/reinit", true, func(_ *http.Request, c namespace.Caller, a apiArgs) (any, error) {
		if c.UID != 0 {
			return nil, kerr.New(kerr.Permission, "fs reinit", "", "root only")
		}
		id, err := strconv.ParseUint(a["id"], 10, 32)
		if err != nil {
			return nil, kerr.New(kerr.Invalid, "fs reinit", a["id"], "bad filesystem id")
		}
		return struct{}{}, s.ReinitFilesystem(uint32(id))
	})
	handle("/api/v1/space/ls", false, func(*http.Request, namespace.Caller, apiArgs) (any, error) {
		return s.Spaces(), nil
	})
	return mux
}

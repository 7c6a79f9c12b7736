package httpfront

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"sort"
	"strconv"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
	"github.com/kaon-storage/kaon/internal/nsserver"
)

// entryOf converts an inode to its wire form.
func entryOf(p string, n *namespace.Inode) client.Entry {
	e := client.Entry{Path: p, Name: n.Name, ID: n.ID, IsDir: n.IsDir, Mode: n.Mode, UID: n.UID, GID: n.GID,
		Size: n.Size, MTime: time.Unix(0, n.MTime), CTime: time.Unix(0, n.CTime), BTime: time.Unix(0, n.BTime),
		Layout: n.Layout, Checksums: n.Checksums, Locations: n.Locations, XAttrs: n.XAttrs}
	if n.IsDir {
		t := time.Unix(0, n.TreeMTime)
		e.Size, e.TreeSize, e.TreeFiles, e.TreeDirs, e.TreeMTime = n.TreeSize, n.TreeSize, n.TreeFiles, n.TreeDirs, &t
	}
	return e
}

func filesystemOf(f nsserver.FsState) client.Filesystem {
	out := client.Filesystem{ID: f.ID, Node: f.Node, Path: f.Path, Group: f.Group, Space: f.Space, ConfigStatus: f.ConfigStatus,
		UUID: f.UUID, Initialized: f.Initialized, Addr: f.Addr, BootStatus: f.BootStatus, Capacity: f.Capacity,
		Used: f.Used, Files: f.Files, Health: f.Health, LastBeat: f.LastBeat,
		IO: f.IO, ObjectSize: f.ObjectSize, Kind: f.Kind, Backend: f.Backend, IOInUse: f.IOInUse, FsType: f.FsType,
		BackendHealth: f.BackendHealth, Slow: f.Slow, Location: f.Location, DownSince: f.DownSince, DownWhy: f.DownWhy}
	if f.Latency != nil {
		l := client.Latency(*f.Latency)
		out.Latency = &l
	}
	return out
}

// apiArgs merges query parameters and a JSON body.
type apiArgs map[string]string

func (a apiArgs) bool(k string) bool { b, _ := strconv.ParseBool(a[k]); return b }

func (a apiArgs) mode(op string, def uint64) (uint32, error) {
	if a["mode"] == "" {
		return uint32(def), nil
	}
	m, err := strconv.ParseUint(a["mode"], 8, 32)
	if err != nil || m > 0o7777 {
		return 0, kerr.New(kerr.Invalid, op, a["path"], fmt.Sprintf("bad mode %q (octal)", a["mode"]))
	}
	return uint32(m), nil
}

func (a apiArgs) fsID(op string) (uint32, error) {
	id, err := strconv.ParseUint(a["id"], 10, 32)
	if err != nil {
		return 0, kerr.New(kerr.Invalid, op, a["id"], "bad filesystem id")
	}
	return uint32(id), nil
}

type apiFunc func(ctx context.Context, p auth.Principal, a apiArgs) (any, error)

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeJSONError(w http.ResponseWriter, err error) {
	k := kerr.KindOf(err)
	w.Header().Set("Content-Type", "application/json")
	if k == kerr.Unauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="kaon"`)
	}
	cluster.SetRetryAfter(w, k)
	w.WriteHeader(kerr.HTTPStatus(k))
	_ = json.NewEncoder(w).Encode(client.ErrorBody{Kind: int(k), Message: err.Error()})
}

// apiHandler serves the admin JSON API (client package): GET for reads,
// POST with a JSON body for changes.
func (f *Namespace) apiHandler() http.Handler {
	mux := http.NewServeMux()
	handle := func(route string, write bool, fn apiFunc) {
		mux.HandleFunc("/api/v1/"+route, func(w http.ResponseWriter, r *http.Request) {
			if write != (r.Method == http.MethodPost) {
				writeJSONError(w, kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "wrong method"))
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
						writeJSONError(w, kerr.Wrap(kerr.Invalid, "api", r.URL.Path, err))
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
			p, err := f.principal(r)
			if err != nil {
				writeJSONError(w, err)
				return
			}
			out, err := fn(r.Context(), p, args)
			if err != nil {
				writeJSONError(w, err)
				return
			}
			writeJSON(w, out)
		})
	}
	ns := f.NS
	done := struct{}{}
	handle("stat", false, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		n, err := ns.Stat(ctx, c, a["path"])
		if err != nil {
			return nil, err
		}
		p, _ := namespace.CleanPath(a["path"])
		return entryOf(p, n), nil
	})
	handle("ls", false, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		p, err := namespace.CleanPath(a["path"])
		if err != nil {
			return nil, kerr.WithOp(err, "ls")
		}
		n, err := ns.Stat(ctx, c, p)
		if err != nil {
			return nil, err
		}
		if !n.IsDir {
			return []client.Entry{entryOf(p, n)}, nil
		}
		ents, err := ns.List(ctx, c, p)
		if err != nil {
			return nil, err
		}
		out := make([]client.Entry, len(ents))
		for i, e := range ents {
			out[i] = entryOf(path.Join(p, e.Name), e)
		}
		return out, nil
	})
	handle("mkdir", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		mode, err := a.mode("mkdir", 0o755)
		if err != nil {
			return nil, err
		}
		return done, ns.Mkdir(ctx, c, a["path"], mode, a.bool("parents"))
	})
	handle("chmod", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		if a["mode"] == "" {
			return nil, kerr.New(kerr.Invalid, "chmod", a["path"], "missing mode")
		}
		mode, err := a.mode("chmod", 0)
		if err != nil {
			return nil, err
		}
		return done, ns.Chmod(ctx, c, a["path"], mode)
	})
	handle("chown", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		uid, err1 := strconv.ParseUint(a["uid"], 10, 32)
		gid, err2 := strconv.ParseUint(a["gid"], 10, 32)
		if err1 != nil || err2 != nil {
			return nil, kerr.New(kerr.Invalid, "chown", a["path"], "uid and gid must be numbers")
		}
		return done, ns.Chown(ctx, c, a["path"], uint32(uid), uint32(gid))
	})
	handle("touch", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		_, err := ns.Touch(ctx, c, a["path"], a.bool("exclusive"), 0)
		return done, err
	})
	handle("rm", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		return done, ns.Remove(ctx, c, a["path"], namespace.RemoveOptions{Any: true, Recursive: a.bool("recursive")})
	})
	handle("mv", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		_, err := ns.Rename(ctx, c, a["from"], a["to"], a.bool("overwrite"))
		return done, err
	})
	handle("attr/set", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		return done, ns.SetXAttr(ctx, c, a["path"], a["name"], a["value"])
	})
	handle("attr/rm", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		return done, ns.RemoveXAttr(ctx, c, a["path"], a["name"])
	})
	handle("attr/ls", false, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		return ns.XAttrs(ctx, c, a["path"])
	})
	handle("fileinfo", false, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		n, stripes, err := ns.FileInfo(ctx, c, a["path"])
		if err != nil {
			return nil, err
		}
		p, _ := namespace.CleanPath(a["path"])
		e := entryOf(p, n)
		for _, s := range stripes {
			e.Stripes = append(e.Stripes, client.Stripe{Index: s.Index, FsID: s.FsID, Node: s.Node, PhysPath: s.PhysPath})
		}
		return e, nil
	})
	handle("fs/ls", false, func(ctx context.Context, c auth.Principal, _ apiArgs) (any, error) {
		fss, err := ns.Filesystems(ctx, c)
		var out []client.Filesystem
		for _, f := range fss {
			out = append(out, withDrain(filesystemOf(f), f.DrainProgress))
		}
		return out, err
	})
	handle("fs/add", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		nf := nsserver.NewFilesystem{Node: a["node"], Path: a["path"], Group: a["group"], Space: a["space"], IO: a["io"], Location: a["location"]}
		if v := a["object-size"]; v != "" {
			n, err := nsserver.ParseSize(v)
			if err != nil {
				return nil, kerr.New(kerr.Invalid, "fs add", v, err.Error())
			}
			nf.ObjectSize = n
		}
		f, err := ns.AddFilesystem(ctx, c, nf)
		if err != nil {
			return nil, err
		}
		return filesystemOf(f), nil
	})
	handle("fs/config", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		id, err := a.fsID("fs config")
		if err != nil {
			return nil, err
		}
		return done, ns.ConfigFilesystem(ctx, c, id, a["key"], a["value"])
	})
	handle("fs/reinit", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		id, err := a.fsID("fs reinit")
		if err != nil {
			return nil, err
		}
		return done, ns.ReinitFilesystem(ctx, c, id)
	})
	quotaKey := func(a apiArgs, op string) (namespace.QuotaKey, error) {
		id, err := strconv.ParseUint(a["id"], 10, 32)
		if a["kind"] == "project" {
			id, err = 0, nil
		}
		if err != nil {
			return namespace.QuotaKey{}, kerr.New(kerr.Invalid, op, a["path"], "bad uid/gid")
		}
		switch a["kind"] {
		case "user":
			return namespace.QuotaKey{Kind: namespace.QuotaUser, ID: uint32(id)}, nil
		case "group":
			return namespace.QuotaKey{Kind: namespace.QuotaGroup, ID: uint32(id)}, nil
		case "project":
			return namespace.QuotaKey{Kind: namespace.QuotaProject}, nil
		}
		return namespace.QuotaKey{}, kerr.New(kerr.Invalid, op, a["path"], "quota kind must be user, group or project")
	}
	handle("quota/set", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		k, err := quotaKey(a, "quota set")
		if err != nil {
			return nil, err
		}
		b, err1 := strconv.ParseInt(a["bytes"], 10, 64)
		f, err2 := strconv.ParseInt(a["files"], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, kerr.New(kerr.Invalid, "quota set", a["path"], "bytes and files must be numbers")
		}
		return done, ns.SetQuota(ctx, c, a["path"], k, namespace.Amount{Bytes: b, Files: f})
	})
	handle("quota/rm", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		k, err := quotaKey(a, "quota rm")
		if err != nil {
			return nil, err
		}
		return done, ns.RemoveQuota(ctx, c, a["path"], k)
	})
	handle("quota/ls", false, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		p := a["path"]
		if p == "" {
			p = "/"
		}
		qs, err := ns.Quotas(ctx, c, p)
		if err != nil {
			return nil, err
		}
		out := []client.Quota{}
		kinds := map[byte]string{namespace.QuotaUser: "user", namespace.QuotaGroup: "group", namespace.QuotaProject: "project"}
		for _, q := range qs {
			keys := map[namespace.QuotaKey]bool{}
			for k := range q.Limits {
				keys[k] = true
			}
			for k := range keys {
				out = append(out, client.Quota{Path: q.Path, Kind: kinds[k.Kind], ID: k.ID, LimitBytes: q.Limits[k].Bytes,
					LimitFiles: q.Limits[k].Files, UsedBytes: q.Used[k].Bytes, UsedFiles: q.Used[k].Files, BookedBytes: q.Booked[k].Bytes})
			}
		}
		sort.Slice(out, func(i, j int) bool {
			if out[i].Path != out[j].Path {
				return out[i].Path < out[j].Path
			}
			if out[i].Kind != out[j].Kind {
				return out[i].Kind < out[j].Kind
			}
			return out[i].ID < out[j].ID
		})
		return out, nil
	})
	handle("recycle/ls", false, func(ctx context.Context, c auth.Principal, _ apiArgs) (any, error) {
		es, err := ns.RecycleList(ctx, c)
		if err != nil {
			return nil, err
		}
		out := []client.RecycleEntry{}
		for _, e := range es {
			out = append(out, client.RecycleEntry{Key: e.Key, Path: e.Path, Dir: e.Dir, UID: e.UID, GID: e.GID,
				Size: e.Size, Files: e.Files, Time: time.Unix(0, e.Time)})
		}
		return out, nil
	})
	handle("recycle/restore", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		p, err := ns.RecycleRestore(ctx, c, a["key"], a.bool("force_rename"))
		return map[string]string{"path": p}, err
	})
	handle("recycle/purge", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		var older time.Duration
		if v := a["older_than"]; v != "" {
			var err error
			if older, err = time.ParseDuration(v); err != nil {
				return nil, kerr.New(kerr.Invalid, "recycle purge", v, "bad duration (e.g. 72h)")
			}
		}
		n, err := ns.RecyclePurge(ctx, c, a["key"], older)
		return map[string]int{"purged": n}, err
	})
	handle("file/versions", false, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		vs, err := ns.Versions(ctx, c, a["path"])
		if err != nil {
			return nil, err
		}
		p, _ := namespace.CleanPath(a["path"])
		out := []client.Version{}
		for _, v := range vs {
			out = append(out, client.Version{ID: v.Name, Path: namespace.VersionsPath(p) + "/" + v.Name, Fid: v.ID,
				Size: v.Size, MTime: time.Unix(0, v.MTime), Checksums: v.Checksums})
		}
		return out, nil
	})
	handle("file/restore-version", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		n, err := ns.RestoreVersion(ctx, c, a["path"], a["version"])
		if err != nil {
			return nil, err
		}
		p, _ := namespace.CleanPath(a["path"])
		return entryOf(p, n), nil
	})
	mux.HandleFunc("/api/v1/ns/status", f.serveNSStatus)
	handle("ns/step-down", true, f.stepDown)
	handle("whoami", false, func(_ context.Context, c auth.Principal, _ apiArgs) (any, error) {
		w := client.Whoami{UID: c.UID, GID: c.GID, Groups: c.Groups, Name: c.Name, Method: c.Method}
		for _, s := range c.Scopes {
			w.Scopes = append(w.Scopes, s.Op+":"+s.Path)
		}
		return w, nil
	})
	handle("token/issue", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		var r nsserver.TokenRequest
		ttl, err := time.ParseDuration(a["ttl"])
		if err != nil {
			return nil, kerr.New(kerr.Invalid, "token issue", a["ttl"], "bad lifetime")
		}
		r.User, r.TTL = a["user"], ttl
		for k, dst := range map[string]*[]string{"paths": &r.Paths, "scopes": &r.Scopes, "audience": &r.Audience} {
			if a[k] != "" {
				if err := json.Unmarshal([]byte(a[k]), dst); err != nil {
					return nil, kerr.New(kerr.Invalid, "token issue", k, "want a list of strings")
				}
			}
		}
		tok, err := ns.IssueToken(ctx, c, r)
		return client.Token{Token: tok}, err
	})
	handle("token/rotate", true, func(ctx context.Context, c auth.Principal, _ apiArgs) (any, error) {
		kid, err := ns.RotateTokenKey(ctx, c)
		return client.TokenKey{KID: kid}, err
	})
	handle("token/keys", false, func(ctx context.Context, c auth.Principal, _ apiArgs) (any, error) {
		keys, err := ns.TokenKeys(ctx, c)
		var out []client.TokenKey
		for _, k := range keys {
			out = append(out, client.TokenKey{KID: k.KID, Created: k.Created, Retired: k.Retired, Next: k.Next})
		}
		return out, err
	})
	handle("space/define", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		return done, ns.DefineSpace(ctx, c, a["name"])
	})
	handle("space/config", true, func(ctx context.Context, c auth.Principal, a apiArgs) (any, error) {
		return done, ns.ConfigSpace(ctx, c, a["name"], a["key"], a["value"])
	})
	f.fsckAPI(handle)
	handle("space/ls", false, func(ctx context.Context, c auth.Principal, _ apiArgs) (any, error) {
		sps, err := ns.Spaces(ctx, c)
		var out []client.Space
		for _, s := range sps {
			out = append(out, client.Space(s))
		}
		return out, err
	})
	f.moveAPI(handle)
	return mux
}

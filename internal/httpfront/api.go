package httpfront

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/nsserver"
)

// The admin JSON API (/api/v1/ROUTE, internal/client is its Go client):
// GET for what reads, POST with a JSON body for what changes. Each route
// reads its nsapi request (from the query's parameters and the body's
// fields), calls the namespace service as the authenticated principal
// and answers the service's nsapi value as JSON, or an nsapi.ErrorBody
// with the status kerr maps the error to. The routes of a family are
// in one file: api_files.go (entries and attributes, versions),
// api_quota.go (quota, recycle bin), api_fleet.go (filesystems and
// spaces), api_move.go (drain status, groups, conversion), api_fsck.go,
// api_access.go (whoami, tokens, access rules, who), api_fusex.go
// (client sessions) and ha.go (ns status, step-down).

// Methods of a route.
const (
	get  = false
	post = true
)

// apiRoutes are the routes of the admin API.
var apiRoutes = []apiRoute{
	{"stat", get, typed(api.stat)},
	{"ls", get, typed(api.list)},
	{"fileinfo", get, typed(api.fileInfo)},
	{"mkdir", post, typed(api.mkdir)},
	{"chmod", post, typed(api.chmod)},
	{"chown", post, typed(api.chown)},
	{"touch", post, typed(api.touch)},
	{"symlink", post, typed(api.symlink)},
	{"truncate", post, typed(api.truncate)},
	{"utimes", post, typed(api.utimes)},
	{"statfs", get, typed(api.statFS)},
	{"rm", post, typed(api.remove)},
	{"mv", post, typed(api.rename)},
	{"attr/set", post, typed(api.setAttr)},
	{"attr/rm", post, typed(api.removeAttr)},
	{"attr/ls", get, typed(api.attrs)},
	{"file/versions", get, typed(api.versions)},
	{"file/restore-version", post, typed(api.restoreVersion)},

	{"quota/set", post, typed(api.setQuota)},
	{"quota/rm", post, typed(api.removeQuota)},
	{"quota/ls", get, typed(api.quotas)},
	{"recycle/ls", get, typed(api.recycleList)},
	{"recycle/restore", post, typed(api.recycleRestore)},
	{"recycle/purge", post, typed(api.recyclePurge)},

	{"fs/ls", get, typed(api.filesystems)},
	{"fs/paths", get, typed(api.filesystemPaths)},
	{"fs/add", post, typed(api.addFilesystem)},
	{"fs/config", post, typed(api.configFilesystem)},
	{"fs/reinit", post, typed(api.reinitFilesystem)},
	{"space/define", post, typed(api.defineSpace)},
	{"space/config", post, typed(api.configSpace)},
	{"space/ls", get, typed(api.spaces)},

	{"fs/status", get, typed(api.drainStatus)},
	{"group/ls", get, typed(api.groups)},
	{"group/set", post, typed(api.setGroup)},
	{"file/convert", post, typed(api.convert)},
	{"file/convert/status", get, typed(api.convertStatus)},

	{"fsck/stat", get, typed(api.fsckStat)},
	{"fsck/report", get, typed(api.fsckReport)},
	{"fsck/run", post, typed(api.fsckRun)},
	{"fsck/repair", post, typed(api.fsckRepair)},

	{"whoami", get, typed(api.whoami)},
	{"token/issue", post, typed(api.issueToken)},
	{"token/rotate", post, typed(api.rotateTokenKey)},
	{"token/keys", get, typed(api.tokenKeys)},

	{"fusex/ls", get, typed(api.fusexList)},
	{"fusex/caps", get, typed(api.fusexCaps)},
	{"fusex/evict", post, typed(api.fusexEvict)},
	{"fusex/dropcaps", post, typed(api.fusexDropCaps)},
	{"fusex/droplocks", post, typed(api.fusexDropLocks)},
	{"fusex/conf", post, typed(api.fusexConf)},

	{"ns/step-down", post, typed(api.stepDown)},

	{"access/ls", get, typed(api.accessRules)},
	{"access/ban", post, accessVerb("ban")},
	{"access/unban", post, accessVerb("unban")},
	{"access/allow", post, accessVerb("allow")},
	{"access/unallow", post, accessVerb("unallow")},
	{"access/stall", post, accessVerb("stall")},
	{"access/redirect", post, accessVerb("redirect")},
	{"access/limit", post, accessVerb("limit")},
	{"who", get, typed(api.who)},
	{"node/ls", get, typed(api.nodes)},
	{"node/config", post, typed(api.configNode)},
	{"ns/stat", get, typed(api.nsStat)},
	{"config/save", post, typed(api.saveConfig)},
	{"config/load", post, typed(api.loadConfig)},
	{"config/ls", get, typed(api.savedConfigs)},
	{"debug", post, typed(api.debug)},
	{"io/stat", get, typed(api.ioStat)},
	// ns/status: serveNSStatus (ha.go), also answered by standbys.
	// srr: serveSRR (srr.go), the Storage Resource Report.
	// ns/dump: serveDump (api_dump.go), streamed, the admin only.
}

// api calls the namespace service for the admin API's routes.
type api struct{ ns *nsserver.Server }

// done is the answer of a route that changes something and tells nothing.
type done = struct{}

// apiRoute is one route: its path under /api/v1/, whether it is POST
// (else GET), and what serves it.
type apiRoute struct {
	path  string
	write bool
	serve func(a api, ctx context.Context, p auth.Principal, args nsapi.Args) (any, error)
}

// request is what every route's nsapi request type is.
type request[R any] interface {
	*R
	FromArgs(nsapi.Args) error
}

// typed serves a route with fn, which takes its nsapi request R.
func typed[R any, P request[R], O any](fn func(api, context.Context, auth.Principal, R) (O, error)) func(api, context.Context, auth.Principal, nsapi.Args) (any, error) {
	return func(a api, ctx context.Context, p auth.Principal, args nsapi.Args) (any, error) {
		var r R
		if err := P(&r).FromArgs(args); err != nil {
			return nil, err
		}
		return fn(a, ctx, p, r)
	}
}

// apiHandler serves the admin API's routes.
func (f *Namespace) apiHandler() http.Handler {
	mux := http.NewServeMux()
	a := api{ns: f.NS}
	for _, rt := range apiRoutes {
		mux.HandleFunc("/api/v1/"+rt.path, func(w http.ResponseWriter, r *http.Request) {
			if rt.write != (r.Method == http.MethodPost) {
				writeJSONError(w, kerr.New(kerr.Unsupported, r.Method, r.URL.Path, "wrong method"))
				return
			}
			args, err := apiArgs(r)
			if err != nil {
				writeJSONError(w, err)
				return
			}
			p, err := f.principal(r)
			if err != nil {
				if !redirected(w, r, err) {
					writeJSONError(w, err)
				}
				return
			}
			out, err := rt.serve(a, r.Context(), p, args)
			if err != nil {
				writeJSONError(w, err)
				return
			}
			writeJSON(w, out)
		})
	}
	mux.HandleFunc("/api/v1/ns/status", f.serveNSStatus)
	mux.HandleFunc("/api/v1/srr", f.serveSRR) // kaon srr: the report of --srr-path (srr.go)
	mux.HandleFunc("/api/v1/ns/dump", f.serveDump)
	return mux
}

// apiArgs reads the arguments of an admin API request: the query's
// parameters, then a POST's JSON body (up to 1 MiB).
func apiArgs(r *http.Request) (nsapi.Args, error) {
	args := nsapi.Args{}
	for k, v := range r.URL.Query() {
		args[k] = v[0]
	}
	if r.Method != http.MethodPost {
		return args, nil
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if len(body) == 0 {
		return args, nil
	}
	args, err := nsapi.ArgsOf(args, body)
	if err != nil {
		return nil, kerr.Wrap(kerr.Invalid, "api", r.URL.Path, err)
	}
	return args, nil
}

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
	_ = json.NewEncoder(w).Encode(nsapi.ErrorBody{Kind: k, Message: err.Error()})
}

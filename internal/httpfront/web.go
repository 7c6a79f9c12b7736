package httpfront

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/webview"
)

// The web view (package webview renders it): a browser's GET of a
// directory (Accept: text/html) gets a page, its forms post to the
// directory's URL. Every listing and action is the namespace service's
// call that curl's request becomes, for the same principal; only the
// rendering and the browser session are the web view's.

// statusQuery is the query of the admin's status page ("/?status").
const statusQuery = "status"

// webSessionBearer lends r the token r's browser session keeps, for the
// requests a browser makes: GET and HEAD (pages, downloads) and form
// posts, which the web view refuses without the session's CSRF token. A
// token in the request itself wins.
func (f *Namespace) webSessionBearer(r *http.Request) *http.Request {
	if bearer(r) != "" || !(r.Method == http.MethodGet || r.Method == http.MethodHead || isForm(r)) {
		return r
	}
	if tok := f.web.Token(r); tok != "" {
		return r.WithContext(context.WithValue(r.Context(), bearerKey{}, tok))
	}
	return r
}

// isForm says whether r is a browser's form post.
func isForm(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data"
}

// serveWeb answers r when it is the web view's; false when WebDAV does
// (clients that do not ask for HTML, files, HEAD).
func (f *Namespace) serveWeb(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.URL.Path == webview.StylePath && r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/css"):
		webview.ServeStyle(w, r)
		return true
	case isForm(r):
		f.webPost(w, r)
		return true
	case r.Method != http.MethodGet || !webview.Wants(r):
		return false
	}
	p, err := nsapi.CleanPath(r.URL.Path)
	if err != nil {
		f.webError(w, r, webview.Viewer{}, p, err)
		return true
	}
	v, id, c, err := f.viewer(w, r)
	if err != nil {
		f.webError(w, r, v, p, authError(err, "GET", p))
		return true
	}
	if r.URL.RawQuery == statusQuery && p == "/" {
		f.webStatus(w, r, v, c)
		return true
	}
	n, err := f.NS.Follow(r.Context(), c, p) // a symbolic link shows what it leads to
	if err != nil {
		f.webError(w, r, v, p, err)
		return true
	}
	if !n.IsDir {
		return false // a download: WebDAV's GET redirects to the data
	}
	ents, err := f.NS.List(r.Context(), c, n.Path) // links in it shown as links
	if err != nil {
		f.webError(w, r, v, p, err)
		return true
	}
	page, _ := strconv.Atoi(r.URL.Query().Get("page"))
	webview.RenderDir(w, http.StatusOK, webview.Dir{Viewer: v, Path: p, Entries: ents, Page: page, Message: f.web.TakeFlash(id)})
	return true
}

// viewer authenticates r's client for a page and starts its browser
// session (id; the CSRF token its forms carry).
func (f *Namespace) viewer(w http.ResponseWriter, r *http.Request) (v webview.Viewer, id string, c auth.Principal, err error) {
	id = f.web.Ensure(w, r)
	v = webview.Viewer{CSRF: f.web.CSRF(id), Token: f.web.Token(r) != ""}
	if c, err = f.principal(r); err != nil {
		return v, id, c, err
	}
	v.Name, v.Method = c.Name, c.Method
	v.Admin = Admin(f.Auth, r, "status") == nil
	return v, id, c, nil
}

// webError answers err as a page with the status kerr maps it to.
func (f *Namespace) webError(w http.ResponseWriter, r *http.Request, v webview.Viewer, p string, err error) {
	status := kerr.HTTPStatus(kerr.KindOf(err))
	if errors.Is(err, webview.ErrCSRF) {
		status = http.StatusForbidden
	}
	if v.CSRF == "" {
		v.CSRF = f.web.CSRF(f.web.Ensure(w, r))
	}
	webview.RenderError(w, webview.ErrorPage{Viewer: v, Path: p, Status: status, Reason: err.Error()})
}

// webPost does what a page's form asks: log in or out, mkdir, delete,
// upload, in the directory the form was posted to, then sends the
// browser back to that directory's page.
func (f *Namespace) webPost(w http.ResponseWriter, r *http.Request) {
	p, err := nsapi.CleanPath(r.URL.Path)
	if err != nil {
		f.webError(w, r, webview.Viewer{}, p, err)
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "multipart/form-data" {
		f.webUpload(w, r, p)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		f.webError(w, r, webview.Viewer{}, p, kerr.New(kerr.Invalid, "POST", p, "bad form: "+err.Error()))
		return
	}
	if err := f.web.CheckCSRF(r, r.PostFormValue("csrf")); err != nil {
		f.webError(w, r, webview.Viewer{}, p, err)
		return
	}
	op := r.PostFormValue("op")
	if op == "login" {
		f.webLogin(w, r, p)
		return
	}
	if op == "logout" {
		f.web.SetToken(r, "")
		f.web.Flash(r, "token forgotten")
		http.Redirect(w, r, webview.Href(p, true), http.StatusSeeOther)
		return
	}
	c, err := f.principal(r)
	if err != nil {
		f.webError(w, r, webview.Viewer{}, p, authError(err, op, p))
		return
	}
	target, err := childPath(p, r.PostFormValue("name"), op)
	if err != nil {
		f.webError(w, r, webview.Viewer{}, p, err)
		return
	}
	switch op {
	case "mkdir":
		err = f.NS.Mkdir(r.Context(), c, target, 0o755, false)
	case "delete":
		err = f.NS.Remove(r.Context(), c, target, nsapi.RemoveOptions{Any: true})
	default:
		err = kerr.New(kerr.Invalid, "POST", p, fmt.Sprintf("unknown action %q", op))
	}
	if err != nil {
		f.webError(w, r, webview.Viewer{}, target, err)
		return
	}
	verb := map[string]string{"mkdir": "created", "delete": "deleted"}[op]
	f.web.Flash(r, target+" "+verb)
	http.Redirect(w, r, webview.Href(p, true), http.StatusSeeOther)
}

// childPath is name in directory dir, refusing names that are not one
// path element.
func childPath(dir, name, op string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return "", kerr.New(kerr.Invalid, op, path.Join(dir, name), fmt.Sprintf("%q is not a name", name))
	}
	return nsapi.CleanPath(path.Join(dir, name))
}

// webLogin verifies a pasted token and keeps it in the browser session:
// later requests of this browser authenticate with it. The token is
// never logged nor sent back.
func (f *Namespace) webLogin(w http.ResponseWriter, r *http.Request, p string) {
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if tok == "" || !acceptsTokens(f.Auth) {
		f.webError(w, r, webview.Viewer{}, p, kerr.New(kerr.Invalid, "login", p, "this server accepts no bearer tokens, or none was pasted"))
		return
	}
	if r.TLS == nil && !loopback(r.RemoteAddr) {
		f.webError(w, r, webview.Viewer{}, p, kerr.New(kerr.Permission, "login", p, "a token is pasted over https only (or on loopback): it would cross the network in clear"))
		return
	}
	c, err := authenticate(f.Auth, r.WithContext(context.WithValue(r.Context(), bearerKey{}, tok)), false)
	if err != nil {
		f.webError(w, r, webview.Viewer{}, p, authError(err, "login", p))
		return
	}
	f.web.SetToken(r, tok)
	f.web.Flash(r, "authenticated as "+c.Name+" by token")
	http.Redirect(w, r, webview.Href(p, true), http.StatusSeeOther)
}

// webUpload streams a multipart form's files into directory dir, each as
// a PUT would: the service opens it for this principal, the bytes go to
// the storage server the grant names (this server relays them: a
// browser's form cannot follow a redirect with its body). The csrf field
// must come before the first file, as the page's form sends it.
func (f *Namespace) webUpload(w http.ResponseWriter, r *http.Request, dir string) {
	mr, err := r.MultipartReader()
	if err != nil {
		f.webError(w, r, webview.Viewer{}, dir, kerr.New(kerr.Invalid, "upload", dir, "bad form: "+err.Error()))
		return
	}
	csrf, checked, n := "", false, 0
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			f.webError(w, r, webview.Viewer{}, dir, kerr.New(kerr.Invalid, "upload", dir, "bad form: "+err.Error()))
			return
		}
		if part.FileName() == "" {
			if part.FormName() == "csrf" {
				b, _ := io.ReadAll(io.LimitReader(part, 256))
				csrf = string(b)
			}
			continue
		}
		if !checked {
			if err := f.web.CheckCSRF(r, csrf); err != nil {
				f.webError(w, r, webview.Viewer{}, dir, err)
				return
			}
			checked = true
		}
		target, err := childPath(dir, path.Base(part.FileName()), "upload")
		if err == nil {
			err = f.relayUpload(r, target, part)
		}
		if err != nil {
			f.webError(w, r, webview.Viewer{}, target, err)
			return
		}
		n++
	}
	if !checked {
		if err := f.web.CheckCSRF(r, csrf); err != nil {
			f.webError(w, r, webview.Viewer{}, dir, err)
			return
		}
	}
	f.web.Flash(r, fmt.Sprintf("%d file(s) uploaded to %s", n, dir))
	http.Redirect(w, r, webview.Href(dir, true), http.StatusSeeOther)
}

// relayUpload writes body to p as r's principal: the open is the one a
// PUT makes, the bytes go to the grant's storage server.
func (f *Namespace) relayUpload(r *http.Request, p string, body io.Reader) error {
	c, err := f.principal(r)
	if err != nil {
		return authError(err, "upload", p)
	}
	g, err := f.NS.Open(r.Context(), c, p, nsapi.OpenRequest{Write: true, Create: true, Truncate: true})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Hour)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, dataURL(r, g), body)
	if err != nil {
		return kerr.New(kerr.IO, "upload", p, err.Error())
	}
	resp, err := f.dataClient().Do(req)
	if err != nil {
		return kerr.New(kerr.IO, "upload", p, "storage server: "+err.Error())
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return kerr.New(kerr.KindOfHTTP(resp.StatusCode), "upload", p, fmt.Sprintf("storage server answered %s: %s", resp.Status, strings.TrimSpace(string(msg))))
	}
	return nil
}

func (f *Namespace) dataClient() *http.Client {
	if f.DataClient != nil {
		return f.DataClient
	}
	return http.DefaultClient
}

// webStatus is the admin's status page: what `kaon space ls`, `fs ls`,
// `group ls`, `fs status`, `fsck stat` and `ns status` tell, on one page
// that reloads itself.
func (f *Namespace) webStatus(w http.ResponseWriter, r *http.Request, v webview.Viewer, c auth.Principal) {
	if err := Admin(f.Auth, r, "status"); err != nil {
		f.webError(w, r, v, "/", err)
		return
	}
	ctx := r.Context()
	st := webview.Status{Viewer: v, Now: time.Now(), Refresh: 5}
	note := func(what string, err error) {
		if err != nil {
			st.Errors = append(st.Errors, what+": "+err.Error())
		}
	}
	var err error
	st.Spaces, err = f.NS.Spaces(ctx, c)
	note("spaces", err)
	st.Groups, err = f.NS.Groups(ctx, c)
	note("groups", err)
	if fsck, err := f.NS.FsckStat(ctx, c); err == nil {
		st.Fsck = &fsck
	} else {
		note("fsck", err)
	}
	st.HA = f.nsStatus(r)
	st.Refusals, err = f.NS.RecentRefusals(ctx, c)
	note("refusals", err)
	fss, err := f.NS.Filesystems(ctx, c)
	note("filesystems", err)
	nodes := map[string]*webview.NodeRow{}
	counted := map[string]bool{} // node and backend: a shared disk counts once
	for _, fs := range fss {
		row := webview.FsRow{Filesystem: fs}
		if fs.Capacity > 0 {
			row.Fill = 100 * float64(fs.Used) / float64(fs.Capacity)
		}
		if strings.Contains(fs.ConfigStatus, "drain") {
			if ds, err := f.NS.DrainStatus(ctx, c, fs.ID); err == nil {
				row.Drain = &ds
				st.InFlight += ds.InFlight
			}
		}
		st.Filesystems = append(st.Filesystems, row)
		n := nodes[fs.Node]
		if n == nil {
			n = &webview.NodeRow{Name: fs.Node}
			nodes[fs.Node] = n
		}
		n.Filesystems++
		if fs.BootStatus == "booted" {
			n.Booted++
		}
		if fs.LastBeat.After(n.LastBeat) {
			n.LastBeat = fs.LastBeat
		}
		if k := fs.Node + "\x00" + fs.Backend; fs.Backend == "" || !counted[k] {
			counted[k] = true
			n.Capacity += fs.Capacity
			n.Used += fs.Used
		}
	}
	for _, fs := range fss {
		if n := nodes[fs.Node]; n != nil {
			st.Nodes = append(st.Nodes, *n)
			delete(nodes, fs.Node)
		}
	}
	webview.RenderStatus(w, st)
}

// nsStatus is the namespace servers' status as r's server knows it: on
// a replicated instance NSStatus's, else this one server, active.
func (f *Namespace) nsStatus(r *http.Request) nsapi.NSStatus {
	if f.NSStatus != nil {
		return f.NSStatus(r.Context())
	}
	self := "http://" + r.Host
	if r.TLS != nil {
		self = "https://" + r.Host
	}
	return nsapi.NSStatus{Engine: nsapi.NSEngine{Name: "pebble"}, Active: self, Self: self,
		Servers: []nsapi.NSServer{{ID: r.Host, HTTP: self, Role: "active"}}}
}

// loopback says whether addr (host:port) is a loopback address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

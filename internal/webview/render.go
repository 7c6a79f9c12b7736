package webview

import (
	"embed"
	"fmt"
	"html/template"
	"mime"
	"net/http"
	"net/url"
	"os/user"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/nsapi"
)

//go:embed templates/*.html static/style.css
var files embed.FS

// StylePath is where the page's style sheet is served (Wants is false for
// it: a browser asks for text/css).
const StylePath = "/.kaon/style.css"

// CSP allows the page's own style sheet and forms posting to this
// server; no script, no frame, no plug-in, nothing from elsewhere.
const CSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"size":   humanSize,
	"date":   func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"pct":    func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + "%" },
	"owner":  ownerName,
	"group":  groupName,
	"add":    func(a, b int) int { return a + b },
	"minus1": func(a int) int { return a - 1 },
}).ParseFS(files, "templates/*.html"))

// Wants says whether r asks for a page: a browser's GET, whose Accept
// names text/html. curl, davix, gfal and WebDAV clients send */* or
// nothing, and keep getting what they got before.
func Wants(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err == nil && (mt == "text/html" || mt == "application/xhtml+xml") && params["q"] != "0" {
			return true
		}
	}
	return false
}

// Headers sets what every page answer carries.
func Headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "text/html; charset=utf-8")
}

// ServeStyle serves the embedded style sheet.
func ServeStyle(w http.ResponseWriter, r *http.Request) {
	b, _ := files.ReadFile("static/style.css")
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "max-age=3600")
	_, _ = w.Write(b)
}

// Viewer is who looks, as the front end authenticated them.
type Viewer struct {
	Name, Method string
	Admin        bool
	Token        bool   // a pasted token authenticates this session
	CSRF         string // the session's CSRF token, for the forms
}

// Dir is a directory page.
type Dir struct {
	Viewer
	Path    string
	Entries []nsapi.Entry
	Page    int    // which PageSize rows are shown (0: the first)
	Message string // what the last action did, or why it failed
}

// PageSize is how many entries a page shows: a directory of a million
// files is browsed page by page (?page=N), not sent as one page.
const PageSize = 1000

type crumb struct{ Name, Href string }

type dirPage struct {
	Dir
	Crumbs     []crumb
	Rows       []row
	Files      int
	Dirs       int
	Bytes      int64
	First      int // 1-based number of the first row shown
	Prev, Next string
}

// row is an entry as a table row (flat: the template finds fields of
// embedded structs by reflection, row by row).
type row struct {
	Name, Href string
	IsDir      bool
	Target     string // a symbolic link's (the link opens what it leads to)
	Size       int64
	UID, GID   uint32
	Mode       uint32
	MTime      time.Time
	Checksums  []string // "type:value", sorted
}

// RenderDir writes d as a page with status.
func RenderDir(w http.ResponseWriter, status int, d Dir) {
	pg := dirPage{Dir: d}
	acc := "/"
	pg.Crumbs = []crumb{{Name: "/", Href: "/"}}
	for _, c := range strings.Split(strings.Trim(d.Path, "/"), "/") {
		if c == "" {
			continue
		}
		acc = path.Join(acc, c)
		pg.Crumbs = append(pg.Crumbs, crumb{Name: c, Href: Href(acc, true)})
	}
	ents := append([]nsapi.Entry(nil), d.Entries...)
	sort.SliceStable(ents, func(i, j int) bool {
		if ents[i].IsDir != ents[j].IsDir {
			return ents[i].IsDir
		}
		return ents[i].Name < ents[j].Name
	})
	for _, e := range ents {
		if e.IsDir {
			pg.Dirs++
		} else {
			pg.Files++
			pg.Bytes += e.Size
		}
	}
	from := min(max(d.Page, 0)*PageSize, len(ents))
	to := min(from+PageSize, len(ents))
	pg.First = from + 1
	if from > 0 {
		pg.Prev = "?page=" + strconv.Itoa(d.Page-1)
	}
	if to < len(ents) {
		pg.Next = "?page=" + strconv.Itoa(d.Page+1)
	}
	for _, e := range ents[from:to] {
		rw := row{Name: e.Name, Href: Href(path.Join(d.Path, e.Name), e.IsDir), IsDir: e.IsDir, Size: e.Size,
			UID: e.UID, GID: e.GID, Mode: e.Mode, MTime: e.MTime, Target: e.Target}
		for t, v := range e.Checksums {
			rw.Checksums = append(rw.Checksums, t+":"+v)
		}
		sort.Strings(rw.Checksums)
		pg.Rows = append(pg.Rows, rw)
	}
	render(w, status, "dir.html", pg)
}

// Status is the admin's status page.
type Status struct {
	Viewer
	Now         time.Time
	Refresh     int // seconds
	Spaces      []nsapi.Space
	Filesystems []FsRow
	Nodes       []NodeRow
	Groups      []nsapi.Group
	HA          nsapi.NSStatus
	Fsck        *nsapi.FsckStatus
	InFlight    int // stripe moves in flight across draining filesystems
	Refusals    []nsapi.Refusal
	Errors      []string // parts that could not be gathered, and why
}

// FsRow is a filesystem with its fill and, when it drains, the progress.
type FsRow struct {
	nsapi.Filesystem
	Fill  float64 // percent
	Drain *nsapi.FsStatus
}

// NodeRow is a storage server as its filesystems' heartbeats show it.
type NodeRow struct {
	Name        string
	Filesystems int
	Booted      int
	LastBeat    time.Time
	Capacity    uint64
	Used        uint64
}

// RenderStatus writes s as a page that reloads itself every s.Refresh
// seconds.
func RenderStatus(w http.ResponseWriter, s Status) {
	render(w, http.StatusOK, "status.html", s)
}

// ErrorPage is a refusal or failure, as a page.
type ErrorPage struct {
	Viewer
	Path   string
	Status int
	Reason string
}

// RenderError writes e as a page with e.Status.
func RenderError(w http.ResponseWriter, e ErrorPage) {
	render(w, e.Status, "error.html", struct {
		ErrorPage
		Text string
	}{e, http.StatusText(e.Status)})
}

func render(w http.ResponseWriter, status int, name string, data any) {
	var b strings.Builder
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		http.Error(w, "rendering "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	Headers(w)
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// Href is the escaped URL path of p (a directory's ends with /).
func Href(p string, dir bool) string {
	u := (&url.URL{Path: p}).EscapedPath()
	if dir && !strings.HasSuffix(u, "/") {
		u += "/"
	}
	return u
}

// humanSize is n bytes in binary units (n: any integer type).
func humanSize(v any) string {
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case uint64:
		n = int64(min(x, 1<<63-1))
	case int:
		n = int64(x)
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Owners' names come from this host's user database (the one the unix
// method authenticates with), cached; a number without a name shows as is.
var names sync.Map // "u123" / "g123" → string

func ownerName(uid uint32) string { return lookup('u', uid) }
func groupName(gid uint32) string { return lookup('g', gid) }

func lookup(kind byte, id uint32) string {
	key := string(kind) + strconv.FormatUint(uint64(id), 10)
	if v, ok := names.Load(key); ok {
		return v.(string)
	}
	name := strconv.FormatUint(uint64(id), 10)
	if kind == 'u' {
		if u, err := user.LookupId(name); err == nil {
			name = u.Username
		}
	} else if g, err := user.LookupGroupId(name); err == nil {
		name = g.Name
	}
	names.Store(key, name)
	return name
}

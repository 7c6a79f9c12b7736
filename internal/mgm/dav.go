package mgm

import (
	"encoding/xml"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/httpfront"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/namespace"
)

// Handler serves the namespace endpoint: WebDAV on every path, the admin
// JSON API under /api/v1/ and the storage-server protocol under
// /internal/v1/.
func (s *Server) Handler() http.Handler {
	internal := cluster.Handler(s, s.key.Internal())
	api := s.apiHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/internal/v1/"):
			internal.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, "/api/v1/"):
			api.ServeHTTP(w, r)
		default:
			s.serveDAV(w, r)
		}
	})
}

func davError(w http.ResponseWriter, err error, status int) {
	if status == 0 {
		status = kerr.HTTPStatus(kerr.KindOf(err))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintln(w, err.Error())
}

func (s *Server) serveDAV(w http.ResponseWriter, r *http.Request) {
	p, err := namespace.CleanPath(r.URL.Path)
	if err != nil {
		davError(w, kerr.WithOp(err, r.Method), 0)
		return
	}
	c := s.caller(r)
	switch r.Method {
	case http.MethodOptions:
		w.Header().Set("Allow", "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, MOVE, PROPFIND")
		w.Header().Set("DAV", "1")
		w.WriteHeader(http.StatusOK)
	case http.MethodGet, http.MethodHead:
		s.davGet(w, r, c, p)
	case http.MethodPut:
		if strings.HasSuffix(r.URL.Path, "/") && p != "/" {
			davError(w, kerr.New(kerr.IsDir, "PUT", p, "cannot write to a directory path"), 0)
			return
		}
		red, err := s.OpenWrite(c, p, namespace.CreateOptions{}, true)
		if kerr.Is(err, kerr.NotFound) {
			davError(w, err, http.StatusConflict) // no parent collection (RFC 4918 9.7.1)
			return
		}
		if err != nil {
			davError(w, err, 0)
			return
		}
		http.Redirect(w, r, red.URL(), http.StatusTemporaryRedirect)
	case http.MethodDelete:
		if err := s.ns.RemoveAll(c, p); err != nil {
			davError(w, err, 0)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case "MKCOL":
		if r.ContentLength > 0 {
			davError(w, kerr.New(kerr.Unsupported, "MKCOL", p, "MKCOL with a body is not supported"), http.StatusUnsupportedMediaType)
			return
		}
		err := s.ns.Mkdir(c, p, 0o755, false)
		switch {
		case err == nil:
			w.WriteHeader(http.StatusCreated)
		case kerr.Is(err, kerr.Exists):
			davError(w, err, http.StatusMethodNotAllowed)
		case kerr.Is(err, kerr.NotFound), kerr.Is(err, kerr.NotDir):
			davError(w, err, http.StatusConflict)
		default:
			davError(w, err, 0)
		}
	case "MOVE":
		s.davMove(w, r, c, p)
	case "PROPFIND":
		s.davPropfind(w, r, c, p)
	default:
		w.Header().Set("Allow", "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, MOVE, PROPFIND")
		davError(w, kerr.New(kerr.Unsupported, r.Method, p, "method not supported"), http.StatusMethodNotAllowed)
	}
}

func (s *Server) davGet(w http.ResponseWriter, r *http.Request, c namespace.Caller, p string) {
	n, err := s.ns.Stat(c, p)
	if err != nil {
		davError(w, err, 0)
		return
	}
	h := w.Header()
	h.Set("Last-Modified", time.Unix(0, n.MTime).UTC().Format(http.TimeFormat))
	if n.IsDir {
		h.Set("Content-Type", "text/html; charset=utf-8")
		if r.Method == http.MethodHead {
			return
		}
		s.htmlListing(w, c, p)
		return
	}
	if r.Header.Get("Want-Digest") != "" && !n.Permits(c, 4) {
		// A digest tells about the content: same rule as the bytes.
		davError(w, kerr.New(kerr.Permission, "checksum", p, "read permission denied"), 0)
		return
	}
	if want := checksum.WantedTypes(r.Header.Get("Want-Digest"), false); len(want) > 0 && !hasAny(n.Checksums, want) {
		if n, err = s.EnsureChecksum(r.Context(), c, p, want[0]); err != nil {
			davError(w, err, 0)
			return
		}
	}
	if r.Method == http.MethodHead {
		h.Set("Content-Length", strconv.FormatInt(n.Size, 10))
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Accept-Ranges", "bytes")
		h.Set("ETag", fmt.Sprintf("\"%x\"", n.ID))
		httpfront.SetDigest(w, r, n.Checksums)
		return
	}
	red, _, err := s.OpenRead(c, p)
	if err != nil {
		davError(w, err, 0)
		return
	}
	http.Redirect(w, r, red.URL(), http.StatusTemporaryRedirect)
}

func hasAny(sums map[string]string, types []string) bool {
	for _, t := range types {
		if sums[t] != "" {
			return true
		}
	}
	return false
}

func (s *Server) htmlListing(w http.ResponseWriter, c namespace.Caller, p string) {
	ents, err := s.ns.List(c, p)
	if err != nil {
		davError(w, err, 0)
		return
	}
	fmt.Fprintf(w, "<!doctype html><title>%s</title><h1>%s</h1><ul>\n", html.EscapeString(p), html.EscapeString(p))
	for _, e := range ents {
		name := e.Name
		if e.IsDir {
			name += "/"
		}
		fmt.Fprintf(w, "<li><a href=\"%s\">%s</a> %d</li>\n", html.EscapeString(hrefOf(path.Join(p, e.Name), e.IsDir)), html.EscapeString(name), sizeOf(e))
	}
	fmt.Fprintln(w, "</ul>")
}

func sizeOf(n *namespace.Inode) int64 {
	if n.IsDir {
		return n.TreeSize
	}
	return n.Size
}

func hrefOf(p string, dir bool) string {
	u := (&url.URL{Path: p}).EscapedPath()
	if dir && !strings.HasSuffix(u, "/") {
		u += "/"
	}
	return u
}

func (s *Server) davMove(w http.ResponseWriter, r *http.Request, c namespace.Caller, from string) {
	dest := r.Header.Get("Destination")
	if dest == "" {
		davError(w, kerr.New(kerr.Invalid, "MOVE", from, "missing Destination header"), 0)
		return
	}
	u, err := url.Parse(dest)
	if err != nil {
		davError(w, kerr.New(kerr.Invalid, "MOVE", from, "bad Destination header"), 0)
		return
	}
	if u.Host != "" && u.Host != r.Host {
		davError(w, kerr.New(kerr.Unsupported, "MOVE", from, "destination on another server"), http.StatusBadGateway)
		return
	}
	to, err := namespace.CleanPath(u.Path)
	if err != nil {
		davError(w, kerr.WithOp(err, "MOVE"), 0)
		return
	}
	overwrite := !strings.EqualFold(strings.TrimSpace(r.Header.Get("Overwrite")), "F")
	switch {
	case to == from:
		davError(w, kerr.New(kerr.Permission, "MOVE", from, "source and destination are the same"), http.StatusForbidden)
		return
	case namespace.IsAncestor(from, to):
		davError(w, kerr.New(kerr.Invalid, "MOVE", to, "cannot move a directory into its own subtree"), http.StatusConflict)
		return
	}
	_, existed := s.ns.Stat(c, to)
	err = s.ns.Rename(c, from, to, overwrite)
	switch {
	case err == nil && existed == nil:
		w.WriteHeader(http.StatusNoContent) // replaced an existing resource
	case err == nil:
		w.WriteHeader(http.StatusCreated)
	case kerr.Is(err, kerr.Exists):
		davError(w, err, http.StatusPreconditionFailed)
	case kerr.Is(err, kerr.NotFound) && err.(*kerr.Error).Path == to:
		davError(w, err, http.StatusConflict)
	default:
		davError(w, err, 0)
	}
}

type propResponse struct {
	XMLName  xml.Name `xml:"D:response"`
	Href     string   `xml:"D:href"`
	Propstat struct {
		Prop   davProp `xml:"D:prop"`
		Status string  `xml:"D:status"`
	} `xml:"D:propstat"`
}

type davProp struct {
	DisplayName  string `xml:"D:displayname"`
	ResourceType *struct {
		Collection *struct{} `xml:"D:collection"`
	} `xml:"D:resourcetype"`
	ContentLength *int64   `xml:"D:getcontentlength,omitempty"`
	LastModified  string   `xml:"D:getlastmodified"`
	CreationDate  string   `xml:"D:creationdate"`
	ETag          string   `xml:"D:getetag"`
	ContentType   string   `xml:"D:getcontenttype,omitempty"`
	QuotaUsed     *int64   `xml:"D:quota-used-bytes,omitempty"`
	Fid           uint64   `xml:"K:fid"`
	Mode          string   `xml:"K:mode"`
	Layout        string   `xml:"K:layout,omitempty"`
	Checksum      []string `xml:"K:checksum,omitempty"`
	TreeSize      *int64   `xml:"K:treesize,omitempty"`
	TreeFiles     *int64   `xml:"K:files,omitempty"`
	TreeDirs      *int64   `xml:"K:dirs,omitempty"`
	TreeMTime     string   `xml:"K:treemtime,omitempty"`
}

func propsOf(p string, n *namespace.Inode) propResponse {
	var r propResponse
	r.Href = hrefOf(p, n.IsDir)
	r.Propstat.Status = "HTTP/1.1 200 OK"
	pr := &r.Propstat.Prop
	pr.DisplayName = path.Base(p)
	pr.LastModified = time.Unix(0, n.MTime).UTC().Format(http.TimeFormat)
	pr.CreationDate = time.Unix(0, n.BTime).UTC().Format(time.RFC3339)
	pr.ETag = fmt.Sprintf("\"%x\"", n.ID)
	pr.Fid = n.ID
	// LCGDM-style mode (davix reads it): octal with the file type bits.
	typ := uint32(0o100000)
	if n.IsDir {
		typ = 0o040000
	}
	pr.Mode = fmt.Sprintf("%o", typ|n.Mode)
	pr.ResourceType = &struct {
		Collection *struct{} `xml:"D:collection"`
	}{}
	if n.IsDir {
		pr.ResourceType.Collection = &struct{}{}
		ts, tf, td := n.TreeSize, n.TreeFiles, n.TreeDirs
		pr.QuotaUsed, pr.TreeSize, pr.TreeFiles, pr.TreeDirs = &ts, &ts, &tf, &td
		pr.TreeMTime = time.Unix(0, n.TreeMTime).UTC().Format(time.RFC3339Nano)
	} else {
		size := n.Size
		pr.ContentLength = &size
		pr.ContentType = "application/octet-stream"
		pr.Layout = n.Layout
		for _, t := range checksum.SortedTypes(n.Checksums) {
			pr.Checksum = append(pr.Checksum, t+":"+n.Checksums[t])
		}
	}
	return r
}

func (s *Server) davPropfind(w http.ResponseWriter, r *http.Request, c namespace.Caller, p string) {
	depth := r.Header.Get("Depth")
	if depth == "" || strings.EqualFold(depth, "infinity") {
		w.Header().Set("Content-Type", "application/xml; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `<?xml version="1.0" encoding="utf-8"?><D:error xmlns:D="DAV:"><D:propfind-finite-depth/></D:error>`)
		return
	}
	if depth != "0" && depth != "1" {
		davError(w, kerr.New(kerr.Invalid, "PROPFIND", p, "Depth must be 0 or 1"), 0)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	n, err := s.ns.Stat(c, p)
	if err != nil {
		davError(w, err, 0)
		return
	}
	resps := []propResponse{propsOf(p, n)}
	if depth == "1" && n.IsDir {
		ents, err := s.ns.List(c, p)
		if err != nil {
			davError(w, err, 0)
			return
		}
		for _, e := range ents {
			resps = append(resps, propsOf(path.Join(p, e.Name), e))
		}
	}
	w.Header().Set("Content-Type", "application/xml; charset=utf-8")
	w.WriteHeader(http.StatusMultiStatus)
	io.WriteString(w, `<?xml version="1.0" encoding="utf-8"?>`+"\n"+`<D:multistatus xmlns:D="DAV:" xmlns:K="http://kaon-storage.org/ns/">`)
	enc := xml.NewEncoder(w)
	for _, rp := range resps {
		_ = enc.Encode(rp)
	}
	io.WriteString(w, "</D:multistatus>\n")
}

package httpfront

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

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/httpserve"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// dataURL is where a grant sends the HTTP client of r: over TLS when r
// came over TLS, in plaintext when it did not (a storage server serves
// both on one port unless TLS is required, and then so does this one).
func dataURL(r *http.Request, g *nsapi.Grant) string {
	base := g.Server.HTTP
	if i := strings.Index(base, "://"); i >= 0 {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + base[i:]
	}
	return fmt.Sprintf("%s%s%x?cap=%s", base, httpserve.DataPath, g.File.ID, url.QueryEscape(g.Token))
}

func (f *Namespace) serveDAV(w http.ResponseWriter, r *http.Request) {
	p, err := nsapi.CleanPath(r.URL.Path)
	if err != nil {
		textError(w, kerr.WithOp(err, r.Method), 0)
		return
	}
	c, err := f.principal(r)
	if err != nil {
		if !redirected(w, r, err) {
			textError(w, authError(err, r.Method, p), 0)
		}
		return
	}
	ctx := r.Context()
	switch r.Method {
	case http.MethodOptions:
		w.Header().Set("Allow", "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, MOVE, COPY, PROPFIND")
		w.Header().Set("DAV", "1")
		w.WriteHeader(http.StatusOK)
	case http.MethodGet, http.MethodHead:
		f.davGet(w, r, c, p)
	case http.MethodPut:
		if strings.HasSuffix(r.URL.Path, "/") && p != "/" {
			textError(w, kerr.New(kerr.IsDir, "PUT", p, "cannot write to a directory path"), 0)
			return
		}
		_, _, ranged, err := httpserve.PutRange(r, p)
		if err != nil {
			textError(w, err, 0)
			return
		}
		// A ranged PUT updates the file in place; a whole one replaces it,
		// or rewrites it (Kaon-Rewrite: ID.DATAVERSION, nsapi.OpenRequest's
		// Rewrite: the answer names the new id in Kaon-Rewrite, which tells
		// the client the server took it).
		o := nsapi.OpenRequest{Write: true, Create: true, Truncate: !ranged, Update: ranged,
			MkPath: true, Size: max(r.ContentLength, 0), App: appOf(r)}
		if v := r.Header.Get(nsapi.RewriteHeader); v != "" && !ranged {
			if o.Rewrite, o.RewriteVersion, err = parseRewrite(v, p); err != nil {
				textError(w, err, 0)
				return
			}
			if err = parseRewriteAttrs(r.Header, p, &o); err != nil {
				textError(w, err, 0)
				return
			}
		}
		g, err := f.NS.Open(ctx, c, p, o)
		if kerr.Is(err, kerr.NotFound) {
			textError(w, err, http.StatusConflict) // no parent collection (RFC 4918 9.7.1)
			return
		}
		if err != nil {
			textError(w, err, 0)
			return
		}
		if o.Rewrite != 0 {
			w.Header().Set(nsapi.RewriteHeader, strconv.FormatUint(g.File.ID, 10))
			// the attributes taken, echoed (the client applies them
			// itself where a server does not)
			if o.SetMode {
				w.Header().Set(nsapi.RewriteModeHeader, strconv.FormatUint(uint64(o.Mode), 8))
			}
			if o.MTime != 0 {
				w.Header().Set(nsapi.RewriteMTimeHeader, strconv.FormatInt(o.MTime, 10))
			}
		}
		http.Redirect(w, r, dataURL(r, g), http.StatusTemporaryRedirect)
	case http.MethodDelete:
		if err := f.NS.Remove(ctx, c, p, nsapi.RemoveOptions{Recursive: true}); err != nil {
			textError(w, err, 0)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case "MKCOL":
		if r.ContentLength > 0 {
			textError(w, kerr.New(kerr.Unsupported, "MKCOL", p, "MKCOL with a body is not supported"), http.StatusUnsupportedMediaType)
			return
		}
		err := f.NS.Mkdir(ctx, c, p, 0o755, false)
		switch {
		case err == nil:
			w.WriteHeader(http.StatusCreated)
		case kerr.Is(err, kerr.Exists):
			textError(w, err, http.StatusMethodNotAllowed)
		case kerr.Is(err, kerr.NotFound), kerr.Is(err, kerr.NotDir):
			textError(w, err, http.StatusConflict)
		default:
			textError(w, err, 0)
		}
	case "MOVE":
		f.davMove(w, r, c, p)
	case "COPY":
		f.davCopy(w, r, c, p) // third-party copy (tpc.go)
	case "PROPFIND":
		f.davPropfind(w, r, c, p)
	case http.MethodPost:
		f.mintMacaroon(w, r, c, p) // macaroon.go
	default:
		w.Header().Set("Allow", "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, MOVE, COPY, PROPFIND")
		textError(w, kerr.New(kerr.Unsupported, r.Method, p, "method not supported"), http.StatusMethodNotAllowed)
	}
}

func (f *Namespace) davGet(w http.ResponseWriter, r *http.Request, c auth.Principal, p string) {
	ctx := r.Context()
	n, err := f.NS.Follow(ctx, c, p) // a symbolic link serves what it leads to
	if err != nil {
		textError(w, err, 0)
		return
	}
	h := w.Header()
	h.Set("Last-Modified", n.MTime.UTC().Format(http.TimeFormat))
	if n.IsDir {
		h.Set("Content-Type", "text/html; charset=utf-8")
		if r.Method == http.MethodHead {
			return
		}
		f.htmlListing(w, r, c, p)
		return
	}
	// A digest tells about the content: the service checks the read
	// permission, and computes a type nobody recorded yet; each header
	// (Want-Digest, Want-Repr-Digest) gets its most wanted type recorded,
	// else its most wanted one computed.
	for _, want := range httpserve.WantedDigests(r) {
		typ := want[0]
		for _, t := range want {
			if n.Checksums[t] != "" {
				typ = t
				break
			}
		}
		if n, err = f.NS.Checksum(ctx, c, p, typ); err != nil {
			textError(w, err, 0)
			return
		}
	}
	if r.Method == http.MethodHead {
		h.Set("Content-Length", strconv.FormatInt(n.Size, 10))
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Accept-Ranges", "bytes")
		h.Set("ETag", fmt.Sprintf("\"%x\"", n.ID))
		httpserve.SetDigest(w, r, n.Checksums)
		return
	}
	g, err := f.NS.Open(ctx, c, p, nsapi.OpenRequest{App: appOf(r)})
	if err != nil {
		textError(w, err, 0)
		return
	}
	http.Redirect(w, r, dataURL(r, g), http.StatusTemporaryRedirect)
}

func (f *Namespace) htmlListing(w http.ResponseWriter, r *http.Request, c auth.Principal, p string) {
	ents, err := f.NS.ListFollowing(r.Context(), c, p)
	if err != nil {
		textError(w, err, 0)
		return
	}
	fmt.Fprintf(w, "<!doctype html><title>%s</title><h1>%s</h1><ul>\n", html.EscapeString(p), html.EscapeString(p))
	for _, e := range ents {
		name := e.Name
		if e.IsDir {
			name += "/"
		}
		fmt.Fprintf(w, "<li><a href=\"%s\">%s</a> %d</li>\n", html.EscapeString(hrefOf(e.Path, e.IsDir)), html.EscapeString(name), e.Size)
	}
	fmt.Fprintln(w, "</ul>")
}

func hrefOf(p string, dir bool) string {
	u := (&url.URL{Path: p}).EscapedPath()
	if dir && !strings.HasSuffix(u, "/") {
		u += "/"
	}
	return u
}

func (f *Namespace) davMove(w http.ResponseWriter, r *http.Request, c auth.Principal, from string) {
	dest := r.Header.Get("Destination")
	if dest == "" {
		textError(w, kerr.New(kerr.Invalid, "MOVE", from, "missing Destination header"), 0)
		return
	}
	u, err := url.Parse(dest)
	if err != nil {
		textError(w, kerr.New(kerr.Invalid, "MOVE", from, "bad Destination header"), 0)
		return
	}
	if u.Host != "" && u.Host != r.Host {
		textError(w, kerr.New(kerr.Unsupported, "MOVE", from, "destination on another server"), http.StatusBadGateway)
		return
	}
	to, err := nsapi.CleanPath(u.Path)
	if err != nil {
		textError(w, kerr.WithOp(err, "MOVE"), 0)
		return
	}
	overwrite := !strings.EqualFold(strings.TrimSpace(r.Header.Get("Overwrite")), "F")
	switch {
	case to == from:
		textError(w, kerr.New(kerr.Permission, "MOVE", from, "source and destination are the same"), http.StatusForbidden)
		return
	case nsapi.IsAncestor(from, to):
		textError(w, kerr.New(kerr.Invalid, "MOVE", to, "cannot move a directory into its own subtree"), http.StatusConflict)
		return
	}
	replaced, err := f.NS.Rename(r.Context(), c, from, to, overwrite)
	switch {
	case err == nil && replaced:
		w.WriteHeader(http.StatusNoContent) // replaced an existing resource
	case err == nil:
		w.WriteHeader(http.StatusCreated)
	case kerr.Is(err, kerr.Exists):
		textError(w, err, http.StatusPreconditionFailed)
	case kerr.Is(err, kerr.NotFound) && err.(*kerr.Error).Path == to:
		textError(w, err, http.StatusConflict)
	default:
		textError(w, err, 0)
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
	LinkTarget    string   `xml:"K:symlink-target,omitempty"` // a link that leads nowhere, listed as itself
	Checksum      []string `xml:"K:checksum,omitempty"`
	TreeSize      *int64   `xml:"K:treesize,omitempty"`
	TreeFiles     *int64   `xml:"K:files,omitempty"`
	TreeDirs      *int64   `xml:"K:dirs,omitempty"`
	TreeMTime     string   `xml:"K:treemtime,omitempty"`
}

func propsOf(n nsapi.Entry) propResponse {
	var r propResponse
	r.Href = hrefOf(n.Path, n.IsDir)
	r.Propstat.Status = "HTTP/1.1 200 OK"
	pr := &r.Propstat.Prop
	pr.DisplayName = path.Base(n.Path)
	pr.LastModified = n.MTime.UTC().Format(http.TimeFormat)
	pr.CreationDate = n.BTime.UTC().Format(time.RFC3339)
	pr.ETag = fmt.Sprintf("\"%x\"", n.ID)
	pr.Fid = n.ID
	// LCGDM-style mode (davix reads it): octal with the file type bits.
	typ := uint32(0o100000)
	switch {
	case n.IsDir:
		typ = 0o040000
	case n.IsLink():
		typ = 0o120000
		pr.LinkTarget = n.Target
	}
	pr.Mode = fmt.Sprintf("%o", typ|n.Mode)
	pr.ResourceType = &struct {
		Collection *struct{} `xml:"D:collection"`
	}{}
	if n.IsDir {
		pr.ResourceType.Collection = &struct{}{}
		ts, tf, td := n.TreeSize, n.TreeFiles, n.TreeDirs
		pr.QuotaUsed, pr.TreeSize, pr.TreeFiles, pr.TreeDirs = &ts, &ts, &tf, &td
		pr.TreeMTime = n.TreeMTime.UTC().Format(time.RFC3339Nano)
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

func (f *Namespace) davPropfind(w http.ResponseWriter, r *http.Request, c auth.Principal, p string) {
	depth := r.Header.Get("Depth")
	if depth == "" || strings.EqualFold(depth, "infinity") {
		w.Header().Set("Content-Type", "application/xml; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `<?xml version="1.0" encoding="utf-8"?><D:error xmlns:D="DAV:"><D:propfind-finite-depth/></D:error>`)
		return
	}
	if depth != "0" && depth != "1" {
		textError(w, kerr.New(kerr.Invalid, "PROPFIND", p, "Depth must be 0 or 1"), 0)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
	n, err := f.NS.Follow(r.Context(), c, p) // a symbolic link shows what it leads to
	if err != nil {
		textError(w, err, 0)
		return
	}
	n.Path = p
	resps := []propResponse{propsOf(n)}
	if depth == "1" && n.IsDir {
		ents, err := f.NS.ListFollowing(r.Context(), c, p)
		if err != nil {
			textError(w, err, 0)
			return
		}
		for _, e := range ents {
			resps = append(resps, propsOf(e))
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

// parseRewriteAttrs reads the mode and time a rewrite commits with its
// content (nsapi.RewriteModeHeader, RewriteMTimeHeader) into o.
func parseRewriteAttrs(h http.Header, path string, o *nsapi.OpenRequest) error {
	if v := h.Get(nsapi.RewriteModeHeader); v != "" {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m > 0o7777 {
			return kerr.New(kerr.Invalid, "PUT", path, nsapi.RewriteModeHeader+" "+strconv.Quote(v)+": want octal permission bits")
		}
		o.SetMode, o.Mode = true, uint32(m)
	}
	if v := h.Get(nsapi.RewriteMTimeHeader); v != "" {
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil || t == 0 {
			return kerr.New(kerr.Invalid, "PUT", path, nsapi.RewriteMTimeHeader+" "+strconv.Quote(v)+": want Unix nanoseconds")
		}
		o.MTime = t
	}
	return nil
}

// parseRewrite reads the nsapi.RewriteHeader v of a PUT of path.
func parseRewrite(v, path string) (fid, version uint64, err error) {
	a, b, ok := strings.Cut(strings.TrimSpace(v), ".")
	fid, err1 := strconv.ParseUint(a, 10, 64)
	version, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || fid == 0 {
		return 0, 0, kerr.New(kerr.Invalid, "PUT", path, nsapi.RewriteHeader+" "+strconv.Quote(v)+": want ID.DATAVERSION")
	}
	return fid, version, nil
}

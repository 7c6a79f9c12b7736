// Package xrdfront is Kaon's root:// front end, beside httpfront: it binds
// the XRootD protocol server (internal/xrootd) to Kaon. On a namespace
// server's listener it translates requests into calls of the namespace
// service (opens are redirected to a storage server's root:// listener with
// the capability as opaque data); on a storage server's listener it serves
// bytes for a verified capability.
package xrdfront

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/nsserver"
	"github.com/kaon-storage/kaon/internal/storage"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// OpaqueCap is the opaque key carrying the capability in redirects.
const OpaqueCap = "kaon.cap"

// Identifier authenticates root:// logins with chain (the methods of
// --auth); a login the chain refuses is refused.
func Identifier(chain auth.Chain) func(user string, remote, local net.Addr) xrootd.Identity {
	return func(user string, remote, local net.Addr) xrootd.Identity {
		p, err := chain.Authenticate(context.Background(), &auth.Request{Remote: remote, Local: local, Login: user})
		return xrootd.Identity{User: user, UID: p.UID, GID: p.GID, Principal: p, Err: err}
	}
}

// AuthenticateToken authenticates a ztn bearer token through chain (the
// token method reads auth.Request.Bearer); its refusal refuses the session.
// ztn is offered on TLS connections only (xrootd.Ztn).
func AuthenticateToken(chain auth.Chain) func(ctx context.Context, user string, remote, local net.Addr, token string) (xrootd.Identity, error) {
	return func(ctx context.Context, user string, remote, local net.Addr, token string) (xrootd.Identity, error) {
		p, err := chain.Authenticate(ctx, &auth.Request{Remote: remote, Local: local, Bearer: token, Login: user, TLS: true})
		if err != nil {
			return xrootd.Identity{}, err
		}
		return xrootd.Identity{User: p.Name, UID: p.UID, GID: p.GID, Principal: p}, nil
	}
}

// AuthenticateKerberos says who a krb5 login is: its AP-REQ goes to the
// krb5 method (the same keytab and principal mapping as https's
// Negotiate). Its refusal refuses the login with the reason.
func AuthenticateKerberos(krb5m auth.Authenticator) func(ctx context.Context, p xrootd.Peer, apreq []byte) (xrootd.Identity, error) {
	return func(ctx context.Context, peer xrootd.Peer, apreq []byte) (xrootd.Identity, error) {
		return login(ctx, krb5m, &auth.Request{Remote: peer.Remote, Local: peer.Local, Kerberos: apreq, Login: peer.User, TLS: peer.TLS}, "no Kerberos ticket", "")
	}
}

// AuthenticateCerts says who a gsi login is: the certificate chain whose
// key the client proved it holds goes to the x509 method (the same CA directory,
// proxy checks and grid-mapfile as HTTPS client certificates); the
// principal's method is "gsi". Its refusal refuses the login with the
// reason.
func AuthenticateCerts(x509m auth.Authenticator) func(ctx context.Context, p xrootd.Peer, chain []*x509.Certificate) (xrootd.Identity, error) {
	return func(ctx context.Context, peer xrootd.Peer, chain []*x509.Certificate) (xrootd.Identity, error) {
		return login(ctx, x509m, &auth.Request{Remote: peer.Remote, Local: peer.Local, Certs: chain, Login: peer.User}, "no certificate", "gsi")
	}
}

// login is the identity method m gives the credential in r, as a security
// protocol's exchange takes it: a refusal is its reason alone (the
// protocol names itself), none when m does not apply; method, when not
// empty, names the protocol in the principal.
func login(ctx context.Context, m auth.Authenticator, r *auth.Request, none, method string) (xrootd.Identity, error) {
	p, ok, err := m.Authenticate(ctx, r)
	if err != nil {
		var ke *kerr.Error
		if errors.As(err, &ke) && ke.Msg != "" {
			return xrootd.Identity{}, errors.New(ke.Msg)
		}
		return xrootd.Identity{}, err
	}
	if !ok {
		return xrootd.Identity{}, errors.New(none)
	}
	if method != "" {
		p.Method = method
	}
	return xrootd.Identity{User: p.Name, UID: p.UID, GID: p.GID, Principal: p}, nil
}

// rctx marks a request as arriving over root:// (for the audit log).
func rctx(ctx context.Context) context.Context { return auth.WithProtocol(ctx, "root") }

// principal is who a session acts as.
func principal(id xrootd.Identity) auth.Principal {
	if p, ok := id.Principal.(auth.Principal); ok {
		return p
	}
	return auth.Principal{UID: id.UID, GID: id.GID, Name: id.User, Method: "xrootd"}
}

// info is what root:// says of an entry (a directory's size is its
// subtree's).
func info(e nsapi.Entry) xrootd.FileInfo {
	return xrootd.FileInfo{Name: e.Name, IsDir: e.IsDir, Size: e.Size, Mode: e.Mode, ID: e.ID,
		MTime: e.MTime, CTime: e.CTime, ATime: e.MTime,
		Owner: strconv.FormatUint(uint64(e.UID), 10), Group: strconv.FormatUint(uint64(e.GID), 10)}
}

// Namespace serves the manager listener from the namespace service.
type Namespace struct{ NS *nsserver.Server }

// admit is who a request of session id acts as and its context, once the
// namespace service's access rules admit it (nsserver.Admit): a rule's
// redirect to a root:// server is a kXR_redirect there.
func (n Namespace) admit(ctx context.Context, id xrootd.Identity) (context.Context, auth.Principal, error) {
	ctx, c := rctx(ctx), principal(id)
	err := n.NS.Admit(ctx, c)
	var rd *nsapi.Redirect
	if errors.As(err, &rd) && rd.XRootD != "" {
		if host, port, perr := xrootd.SplitHostPort(rd.XRootD); perr == nil {
			return ctx, c, &xrootd.RedirectError{Host: host, Port: port}
		}
	}
	return ctx, c, err
}

var _ xrootd.Namespace = Namespace{}

// Stat answers kXR_stat for what p leads to: symbolic links are
// followed, as xrootd's stat(2) over a POSIX tree does (nsserver's
// symlink.go says how, and where a link may lead).
func (n Namespace) Stat(ctx context.Context, id xrootd.Identity, p string) (xrootd.FileInfo, error) {
	ctx, c, err := n.admit(ctx, id)
	if err != nil {
		return xrootd.FileInfo{}, err
	}
	in, err := n.NS.Follow(ctx, c, p)
	if err != nil {
		return xrootd.FileInfo{}, err
	}
	return info(in), nil
}

// List answers kXR_dirlist of the directory p leads to, a symbolic link
// in it with what it leads to (nsserver.ListFollowing), as xrootd's
// dirlist stats each entry: xrdfs ls -l and xrdcp -r see a file or a
// directory.
func (n Namespace) List(ctx context.Context, id xrootd.Identity, p string) ([]xrootd.FileInfo, error) {
	ctx, c, err := n.admit(ctx, id)
	if err != nil {
		return nil, err
	}
	ents, err := n.NS.ListFollowing(ctx, c, p)
	if err != nil {
		return nil, err
	}
	out := make([]xrootd.FileInfo, len(ents))
	for i, e := range ents {
		out[i] = info(e)
	}
	return out, nil
}

func (n Namespace) Mkdir(ctx context.Context, id xrootd.Identity, p string, mode uint32, parents bool) error {
	ctx, c, err := n.admit(ctx, id)
	if err != nil {
		return err
	}
	return n.NS.Mkdir(ctx, c, p, mode, parents)
}

func (n Namespace) Remove(ctx context.Context, id xrootd.Identity, p string) error {
	ctx, c, err := n.admit(ctx, id)
	if err != nil {
		return err
	}
	return n.NS.Remove(ctx, c, p, nsapi.RemoveOptions{})
}

func (n Namespace) Rmdir(ctx context.Context, id xrootd.Identity, p string) error {
	ctx, c, err := n.admit(ctx, id)
	if err != nil {
		return err
	}
	return n.NS.Remove(ctx, c, p, nsapi.RemoveOptions{Dir: true})
}

// Rename replaces an existing destination file, as POSIX rename does.
func (n Namespace) Rename(ctx context.Context, id xrootd.Identity, from, to string) error {
	ctx, c, err := n.admit(ctx, id)
	if err != nil {
		return err
	}
	_, err = n.NS.Rename(ctx, c, from, to, true)
	return err
}

func (n Namespace) Chmod(ctx context.Context, id xrootd.Identity, p string, mode uint32) error {
	ctx, c, err := n.admit(ctx, id)
	if err != nil {
		return err
	}
	return n.NS.Chmod(ctx, c, p, mode)
}

func (n Namespace) Truncate(ctx context.Context, id xrootd.Identity, p string, size int64) error {
	ctx, c, err := n.admit(ctx, id)
	if err != nil {
		return err
	}
	return n.NS.Truncate(ctx, c, p, size)
}

// Checksum answers kXR_query checksum; types the upload did not compute
// are computed now by the namespace service.
func (n Namespace) Checksum(ctx context.Context, id xrootd.Identity, p, algo string) (string, error) {
	algo = checksumType(algo)
	ctx, c, err := n.admit(ctx, id)
	if err != nil {
		return "", err
	}
	in, err := n.NS.Checksum(ctx, c, p, algo)
	if err != nil {
		return "", err
	}
	return in.Checksums[algo], nil
}

// checksumType maps an XRootD checksum name to ours (adler32 by default).
func checksumType(algo string) string {
	switch algo {
	case "":
		return "adler32"
	case "sha-256":
		return "sha256"
	}
	return algo
}

func (n Namespace) Locate(ctx context.Context, id xrootd.Identity, p string) ([]string, error) {
	ctx, c, err := n.admit(ctx, id)
	if err != nil {
		return nil, err
	}
	nodes, err := n.NS.Locate(ctx, c, p)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, nd := range nodes {
		if nd.XRootD != "" {
			out = append(out, nd.XRootD)
		}
	}
	sort.Strings(out)
	return out, nil
}

func (n Namespace) StatFS(ctx context.Context, id xrootd.Identity, p string) (xrootd.StatFS, error) {
	ctx, c, err := n.admit(ctx, id)
	if err != nil {
		return xrootd.StatFS{}, err
	}
	st, err := n.NS.StatFS(ctx, c, p)
	if err != nil {
		return xrootd.StatFS{}, err
	}
	return xrootd.StatFS{Space: st.Space, Total: st.Total, Free: st.Free, MaxFree: st.MaxFree, Filesystems: st.Filesystems}, nil
}

func (n Namespace) Open(ctx context.Context, id xrootd.Identity, p string, req xrootd.OpenRequest) (xrootd.Redirect, error) {
	// xrdcp announces an upload's size as oss.asize: it is booked against
	// quota before any byte moves.
	size, _ := strconv.ParseInt(req.Opaque.Get("oss.asize"), 10, 64)
	ctx, c, err := n.admit(ctx, id)
	if err != nil {
		return xrootd.Redirect{}, err
	}
	g, err := n.NS.Open(ctx, c, p, nsapi.OpenRequest{App: nsapi.AppName(req.Opaque.Get("eos.app"), "xrootd"), Write: req.Write, Create: req.Create,
		Truncate: req.Truncate, Exclusive: req.Exclusive, MkPath: req.MkPath, Mode: req.Mode, Size: max(size, 0)})
	if err != nil {
		return xrootd.Redirect{}, err
	}
	if g.Server.XRootD == "" {
		return xrootd.Redirect{}, kerr.New(kerr.Unsupported, "open", p, "the storage server holding this file has no root:// endpoint")
	}
	host, port, err := net.SplitHostPort(g.Server.XRootD)
	if err != nil {
		return xrootd.Redirect{}, kerr.Wrap(kerr.Internal, "open", p, err)
	}
	pn, _ := strconv.Atoi(port)
	return xrootd.Redirect{Host: host, Port: pn, Opaque: OpaqueCap + "=" + url.QueryEscape(g.Token)}, nil
}

// xrdAdmitWait is how long a root:// open waits for stream memory before
// it is answered with kXR_wait (the client then retries by itself).
const xrdAdmitWait = 5 * time.Second

// Data serves a storage server's root:// listener.
type Data struct {
	S *storage.Server
}

var _ xrootd.DataStore = Data{}

func (d Data) Open(ctx context.Context, id xrootd.Identity, p string, req xrootd.OpenRequest) (xrootd.DataFile, error) {
	clean, err := nsapi.CleanPath(p)
	if err != nil {
		return nil, err
	}
	token := req.Opaque.Get(OpaqueCap)
	write := req.Write || req.Create || req.Truncate
	c, err := d.S.Verify(token, capability.Access{Path: clean, Write: write})
	if err != nil {
		return nil, err
	}
	if c.Update {
		u, err := d.S.NewUpdate(ctx, c, token)
		if err != nil {
			return nil, err
		}
		return &updateFile{u: u, c: c}, nil
	}
	if write {
		u, err := d.S.NewUpload(ctx, c, token, xrdAdmitWait)
		if err != nil {
			return nil, err
		}
		return &writeFile{u: u, c: c}, nil
	}
	f, err := d.S.Open(context.WithoutCancel(ctx), c, token, xrdAdmitWait)
	if err != nil {
		return nil, err
	}
	return &readFile{f: f, c: c}, nil
}

// writeFile is an upload in progress.
type writeFile struct {
	u *storage.Upload
	c *capability.Capability
}

func (w *writeFile) ReadAt([]byte, int64) (int, error) {
	return 0, kerr.New(kerr.Unsupported, "read", w.c.Path, "file is open for writing")
}
func (w *writeFile) WriteAt(p []byte, off int64) (int, error) { return w.u.WriteAt(p, off) }
func (w *writeFile) Truncate(size int64) error                { return w.u.Truncate(size) }
func (w *writeFile) Sync() error                              { return nil }
func (w *writeFile) Stat() (xrootd.FileInfo, error) {
	now := time.Now()
	return xrootd.FileInfo{Name: baseName(w.c.Path), Size: w.u.Size(), Mode: 0o644, ID: w.c.Fid, MTime: now, CTime: now, ATime: now}, nil
}
func (w *writeFile) Checksum(string) (string, error) {
	return "", kerr.New(kerr.Busy, "checksum", w.c.Path, "upload not finished")
}
func (w *writeFile) Close() error { return w.u.Commit(context.Background()) }
func (w *writeFile) Abort() error { w.u.Abort(context.Background()); return nil }

// updateFile is a committed file open for an update in place
// (kXR_open_updt, or kXR_open_apnd: as with Debian's xrootd, a write goes
// where its offset says, and a client appends by writing at the size):
// kXR_sync and the close commit what was written (the file's next data
// version).
type updateFile struct {
	u *storage.Update
	c *capability.Capability
}

func (f *updateFile) ReadAt(p []byte, off int64) (int, error)  { return f.u.ReadAt(p, off) }
func (f *updateFile) WriteAt(p []byte, off int64) (int, error) { return f.u.WriteAt(p, off) }
func (f *updateFile) Truncate(size int64) error                { return f.u.Truncate(size) }
func (f *updateFile) Sync() error                              { return f.u.Sync(context.Background()) }
func (f *updateFile) Stat() (xrootd.FileInfo, error) {
	now := time.Now()
	return xrootd.FileInfo{Name: baseName(f.c.Path), Size: f.u.Size(), Mode: 0o644, ID: f.c.Fid, MTime: now, CTime: now, ATime: now}, nil
}

// Checksum of a file being updated: what it has written is not
// committed, so no checksum describes it yet.
func (f *updateFile) Checksum(string) (string, error) {
	return "", kerr.New(kerr.Busy, "checksum", f.c.Path, "the file is open for an update; ask after it is closed")
}
func (f *updateFile) Close() error { return f.u.Commit(context.Background()) }
func (f *updateFile) Abort() error { f.u.Abort(); return nil }

// readFile is a committed file open for reading.
type readFile struct {
	f storage.File
	c *capability.Capability
}

func (r *readFile) ReadAt(p []byte, off int64) (int, error) { return r.f.ReadAt(p, off) }
func (r *readFile) WriteAt([]byte, int64) (int, error) {
	return 0, kerr.New(kerr.ReadOnly, "write", r.c.Path, "file is open for reading")
}
func (r *readFile) Truncate(int64) error {
	return kerr.New(kerr.ReadOnly, "truncate", r.c.Path, "file is open for reading")
}
func (r *readFile) Sync() error { return nil }
func (r *readFile) Stat() (xrootd.FileInfo, error) {
	now := time.Now()
	return xrootd.FileInfo{Name: baseName(r.c.Path), Size: r.c.Size, Mode: 0o644, ID: r.c.Fid, MTime: now, CTime: now, ATime: now}, nil
}

// Checksum answers kXR_query checksum on the open file: from the record,
// or computed now from the data when the upload did not compute the type.
func (r *readFile) Checksum(algo string) (string, error) {
	typ := checksumType(algo)
	if v := r.c.Sums[typ]; v != "" {
		return v, nil
	}
	if !checksum.Valid(typ) {
		return "", kerr.New(kerr.Unsupported, "checksum", r.c.Path, fmt.Sprintf("unknown checksum type %q", typ))
	}
	v, bad, _, err := checksum.Recompute(io.NewSectionReader(r.f, 0, r.c.Size), typ, r.c.Sums)
	switch {
	case err != nil:
		return "", kerr.Wrap(kerr.IO, "checksum", r.c.Path, err)
	case bad != "":
		return "", kerr.New(kerr.IO, "checksum", r.c.Path, "stored data does not match the "+bad+" recorded at write time")
	}
	return v, nil
}
func (r *readFile) Close() error { return r.f.Close() }
func (r *readFile) Abort() error { return r.f.Close() }

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

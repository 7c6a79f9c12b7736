package httpfront

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/gateway"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/httpserve"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/nsapi"
	"github.com/kaon-storage/kaon/internal/nsserver"
	"github.com/kaon-storage/kaon/internal/webview"
)

// Namespace serves the namespace endpoint of a namespace server.
type Namespace struct {
	NS   *nsserver.Server
	Key  *capability.Key // for the internal protocol's shared secret
	Auth auth.Chain      // how clients are authenticated (default: unix peers)
	Log  *slog.Logger
	// SRRPath is where the WLCG Storage Resource Report is served ("":
	// only at the admin API's srr route).
	SRRPath string
	// DataClient relays the web view's uploads to storage servers
	// (nil: http.DefaultClient; over TLS one that trusts them).
	DataClient *http.Client
	// NSStatus is the status of a replicated instance's namespace
	// servers, for the web view's status page (nil: this one server).
	NSStatus func(context.Context) nsapi.NSStatus
	internal http.Handler
	web      *webview.Sessions
	api      http.Handler
	once     sync.Once

	wsmu sync.Mutex
	ws   map[*websocket.Conn]struct{} // the session streams taken over from the HTTP server
}

// CloseSessionStreams ends the session streams that are WebSockets: the
// HTTP server's Close and Shutdown do not know them (they are hijacked
// connections). Their clients reconnect.
func (f *Namespace) CloseSessionStreams() {
	f.wsmu.Lock()
	defer f.wsmu.Unlock()
	for c := range f.ws {
		c.Close()
	}
}

// trackStream notes a WebSocket session stream until the returned func
// is called.
func (f *Namespace) trackStream(c *websocket.Conn) func() {
	f.wsmu.Lock()
	defer f.wsmu.Unlock()
	if f.ws == nil {
		f.ws = map[*websocket.Conn]struct{}{}
	}
	f.ws[c] = struct{}{}
	return func() {
		f.wsmu.Lock()
		delete(f.ws, c)
		f.wsmu.Unlock()
	}
}

func (f *Namespace) init() {
	f.once.Do(func() {
		if f.Auth == nil {
			f.Auth = defaultAuth
		}
		if f.Log == nil {
			f.Log = slog.Default()
		}
		f.internal = cluster.Handler(f.NS, f.Key.Internal())
		f.api = f.apiHandler()
		f.web = webview.NewSessions(12*time.Hour, 10000)
	})
}

// ServeHTTP routes: the Storage Resource Report (srr.go), the internal
// protocol, the admin API, the session channel (session.go), the web view
// (web.go) for browsers, WebDAV.
func (f *Namespace) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.init()
	ctx := context.WithValue(auth.WithProtocol(r.Context(), "http"), admissionKey{}, &admission{})
	r = takeBearer(r.WithContext(ctx))
	if cs := challenges(f.Auth); len(cs) > 0 {
		w = &challengeWriter{ResponseWriter: w, schemes: cs}
	}
	if f.serveWellKnown(w, r) {
		return
	}
	switch {
	case f.SRRPath != "" && r.URL.Path == f.SRRPath:
		f.serveSRR(w, r)
	case strings.HasPrefix(r.URL.Path, "/internal/v1/"):
		f.internal.ServeHTTP(w, r)
	case strings.HasPrefix(r.URL.Path, "/api/v1/"):
		f.api.ServeHTTP(w, r)
	case r.URL.Path == nsapi.SessionPath:
		f.serveSession(w, r)
	default:
		r = f.webSessionBearer(r)
		if f.serveWeb(w, r) {
			return
		}
		f.serveDAV(w, r)
	}
}

type connKey struct{}

// connAuth caches a connection's authentication: methods that depend only
// on the connection (unix peers) run once per connection, on its first
// request and in its own goroutine (ConnContext runs in the accept loop,
// which must not wait on the kernel).
type connAuth struct {
	remote, local net.Addr
	dav, admin    connResult // admin API requests may authenticate otherwise (auth.HostRoot)
}

type connResult struct {
	once sync.Once
	p    auth.Principal
	err  error
}

// ConnContext attaches a connection's authentication state to its
// requests (http.Server.ConnContext).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &connAuth{remote: c.RemoteAddr(), local: c.LocalAddr()})
}

// defaultAuth authenticates loopback clients as the local user owning
// their socket (kaon up's default).
var defaultAuth = auth.Chain{auth.Unix{}}

// principal authenticates the client of r (admin API requests as such)
// and has the namespace service's access rules admit the request
// (nsserver.Admit), once per request however many of its handlers ask.
func (f *Namespace) principal(r *http.Request) (auth.Principal, error) {
	p, err := authenticate(f.Auth, r, strings.HasPrefix(r.URL.Path, "/api/v1/"))
	if err != nil {
		return p, err
	}
	a, ok := r.Context().Value(admissionKey{}).(*admission)
	if !ok {
		a = &admission{}
	}
	a.once.Do(func() { a.err = f.NS.Admit(r.Context(), p) })
	return p, a.err
}

// admission is a request's decision of the access rules (principal).
type admission struct {
	once sync.Once
	err  error
}

type admissionKey struct{}

// Admin refuses r unless its client has the admin role, as the admin API
// authenticates it (chain; nil: loopback clients by their socket's
// owner): for what tells about the instance outside the admin API
// (status, metrics). op names the request in the error.
func Admin(chain auth.Chain, r *http.Request, op string) error {
	if chain == nil {
		chain = defaultAuth
	}
	p, err := authenticate(chain, takeBearer(r), true)
	if err != nil {
		return authError(err, op, r.URL.Path)
	}
	return auth.RequireAdmin(p, op)
}

// authenticate authenticates the client of r with chain: a request with a
// bearer token on its own (each token is verified once, then cached by
// the verifier), others by their connection. admin says r is for the
// admin API or admin data (auth.HostRoot applies).
func authenticate(chain auth.Chain, r *http.Request, admin bool) (auth.Principal, error) {
	ca, ok := r.Context().Value(connKey{}).(*connAuth)
	if !ok {
		return auth.Nobody, nil
	}
	if cred, ok := negotiation(r); ok && len(challenges(chain)) > 0 {
		req := &auth.Request{Remote: ca.remote, Local: ca.local, Kerberos: cred, Admin: admin, TLS: r.TLS != nil}
		p, err := chain.Authenticate(r.Context(), req)
		if err == nil {
			httpserve.SetPrincipal(r, p.Name+"/"+p.Method)
		}
		return p, err
	}
	if a := r.Header.Get(gateway.Header); a != "" && acceptsGateway(chain) {
		// A gateway's assertion, per request: it names its request.
		req := &auth.Request{Remote: ca.remote, Local: ca.local, Gateway: a, Target: r.Method + " " + r.URL.RequestURI(), Admin: admin, TLS: r.TLS != nil}
		p, err := chain.Authenticate(r.Context(), req)
		if err == nil {
			httpserve.SetPrincipal(r, p.Name+"/"+p.Method)
		}
		return p, err
	}
	if tok := bearer(r); tok != "" && acceptsTokens(chain) {
		req := &auth.Request{Remote: ca.remote, Local: ca.local, Bearer: tok, Admin: admin, TLS: r.TLS != nil}
		if r.TLS != nil {
			req.Certs = r.TLS.PeerCertificates // a bearer credential no method takes leaves the certificate's identity
		}
		p, err := chain.Authenticate(r.Context(), req)
		if err == nil {
			httpserve.SetPrincipal(r, p.Name+"/"+p.Method)
		}
		return p, err
	}
	cr := &ca.dav
	if admin {
		cr = &ca.admin
	}
	cr.once.Do(func() {
		req := &auth.Request{Remote: ca.remote, Local: ca.local, Admin: admin, TLS: r.TLS != nil}
		if r.TLS != nil {
			req.Certs = r.TLS.PeerCertificates // the x509 method verifies them
		}
		cr.p, cr.err = chain.Authenticate(r.Context(), req)
	})
	if cr.err != nil {
		return cr.p, cr.err
	}
	p := cr.p
	if pid, err := strconv.ParseUint(r.Header.Get(nsapi.CallerPidHeader), 10, 32); err == nil {
		p = auth.ProcessGroups(p, uint32(pid)) // a local mount's caller: its own groups
	}
	httpserve.SetPrincipal(r, p.Name+"/"+p.Method)
	return p, nil
}

// appOf is the application a request comes from, for I/O accounting:
// its eos.app query parameter, else its User-Agent's product.
func appOf(r *http.Request) string {
	ua, _, _ := strings.Cut(r.UserAgent(), "/")
	return nsapi.AppName(r.URL.Query().Get("eos.app"), nsapi.AppName(ua, "http"))
}

// redirected answers a request an access rule sends to another server
// (nsapi.Redirect with an HTTP target) with a 307 there, and reports
// whether it did.
func redirected(w http.ResponseWriter, r *http.Request, err error) bool {
	var rd *nsapi.Redirect
	if !errors.As(err, &rd) || rd.HTTP == "" {
		return false
	}
	http.Redirect(w, r, rd.HTTP+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	return true
}

// textError answers err as text naming the path and the reason, with the
// status kerr maps it to (or status when not 0).
func textError(w http.ResponseWriter, err error, status int) {
	if status == 0 {
		k := kerr.KindOf(err)
		status = kerr.HTTPStatus(k)
		cluster.SetRetryAfter(w, k)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="kaon"`)
	}
	w.WriteHeader(status)
	fmt.Fprintln(w, err.Error())
}

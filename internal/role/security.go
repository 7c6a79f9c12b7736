package role

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/x509auth"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/httpserve"
	"github.com/kaon-storage/kaon/internal/tlsconf"
	"github.com/kaon-storage/kaon/internal/xrdfront"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// Security is a role's TLS material and what --auth asks of it.
type Security struct {
	tls    *tlsconf.Material  // nil without --tls
	x509   auth.Authenticator // the x509 method, when --auth lists it
	tokens bool               // --auth lists token: root:// TLS logins offer ztn
}

// setup loads the TLS material (hosts: the listen hosts the generated host
// certificate must name) and, for a namespace server whose --auth lists
// them (methods), prepares x509 and ztn.
func (s SecurityConfig) setup(data, methods string, hosts ...string) (*Security, error) {
	sec := &Security{}
	if s.Require {
		s.TLS = true
	}
	has := map[string]bool{}
	for _, m := range strings.Split(methods, ",") {
		has[strings.TrimSpace(m)] = true
	}
	sec.tokens = has["token"]
	if s.TLS {
		dir := s.TLSDir
		if strings.HasPrefix(dir, "DATA") {
			if data == "" {
				return nil, fmt.Errorf("--tls: give --data or --tls-dir (where the local CA lives), or --tls-cert/--tls-key")
			}
			dir = filepath.Join(data, strings.TrimPrefix(dir, "DATA"))
		}
		m, err := tlsconf.Setup(tlsconf.Options{Require: s.Require, Cert: s.Cert, Key: s.Key, CADir: s.CADir, Dir: dir, Hosts: hosts})
		if err != nil {
			return nil, err
		}
		sec.tls = m
	}
	if has["x509"] {
		if sec.tls == nil {
			return nil, fmt.Errorf("--auth x509 needs --tls (client certificates come with the TLS handshake)")
		}
		x, err := x509auth.New(sec.tls.CADir, s.GridMap)
		if err != nil {
			return nil, err
		}
		sec.x509 = x
	}
	return sec, nil
}

// listener wraps the TCP listener of an HTTP endpoint: connections close
// lingering (httpserve.LingerListener), TLS is served (and plaintext
// unless required).
func (s *Security) listener(l net.Listener) net.Listener {
	l = httpserve.LingerListener(l) // under TLS: a TLS connection closes through it
	if s == nil || s.tls == nil {
		return l
	}
	return s.tls.HTTPListener(l)
}

// scheme is the scheme of this role's HTTP URLs.
func (s *Security) scheme() string {
	if s != nil && s.tls != nil {
		return "https://"
	}
	return "http://"
}

// httpClient is a client for internal RPC: it trusts the CA directory.
func (s *Security) httpClient() *http.Client {
	if s == nil || s.tls == nil {
		return nil
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: s.tls.Client.Clone(), MaxIdleConnsPerHost: 16}}
}

func (s *Security) clientTLS() *tls.Config {
	if s == nil || s.tls == nil {
		return nil
	}
	return s.tls.Client
}

// xrootd sets a listener's TLS and, on a namespace listener of a server
// accepting tokens, ztn: TLS logins ask for it and the token goes through
// chain (data listeners need no identity: the capability authorizes).
func (s *Security) xrootd(cfg *xrootd.Config, chain auth.Chain) {
	if s == nil {
		return
	}
	if s.tls != nil {
		cfg.TLS, cfg.RequireTLS = s.tls.Server, s.tls.Require
	}
	if cfg.Namespace != nil && s.tokens {
		cfg.AuthenticateToken = xrdfront.AuthenticateToken(chain)
	}
}

// endpoints adds the TLS URLs and the CA to ep (with --require-tls the
// plain fields carry the TLS URLs, so scripts reading them still work).
func (s *Security) endpoints(ep *Endpoints) {
	if s == nil || s.tls == nil {
		return
	}
	swap := func(u, from, to string) string {
		if u == "" {
			return ""
		}
		return to + strings.TrimPrefix(u, from)
	}
	ep.HTTPS, ep.Roots = swap(ep.HTTP, "http://", "https://"), swap(ep.XRootD, "root://", "roots://")
	ep.FSTHTTPS, ep.FSTRoots = swap(ep.FSTHTTP, "http://", "https://"), swap(ep.FSTXrd, "root://", "roots://")
	ep.CA, ep.CADir = s.tls.CAFile, s.tls.CADir
	if s.tls.Require {
		ep.HTTP, ep.XRootD, ep.FSTHTTP, ep.FSTXrd = ep.HTTPS, ep.Roots, ep.FSTHTTPS, ep.FSTRoots
	}
}

// storageClient is the client of storage servers' internal endpoints
// (stripes, whole-file reads), over TLS with --tls.
func storageClient(key *capability.Key, sec *Security) *cluster.StorageClient {
	c := cluster.NewStorageClient(key.Internal())
	if cfg := sec.clientTLS(); cfg != nil {
		if t, ok := c.HTTP.Transport.(*http.Transport); ok {
			t.TLSClientConfig = cfg.Clone()
		}
	}
	return c
}

// listenHosts are the hosts of listen addresses (names the generated host
// certificate must carry).
func listenHosts(addrs ...string) []string {
	var out []string
	for _, a := range addrs {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" {
			out = append(out, h)
		}
	}
	return out
}

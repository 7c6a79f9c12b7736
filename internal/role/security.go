package role

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/auth/krb5auth"
	"github.com/kaon-storage/kaon/internal/auth/x509auth"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster"
	"github.com/kaon-storage/kaon/internal/httpserve"
	"github.com/kaon-storage/kaon/internal/tlsconf"
	"github.com/kaon-storage/kaon/internal/xrdfront"
	"github.com/kaon-storage/kaon/internal/xrootd"
	"github.com/kaon-storage/kaon/internal/xrootd/gsi"
)

// Security is a role's TLS material and what --auth asks of it.
type Security struct {
	tls  *tlsconf.Material  // nil without --tls
	x509 auth.Authenticator // certificate chains, when --auth lists x509 or gsi
	gsi  *gsi.Server        // root://'s gsi, when --auth lists it
	// protocols are the root:// security protocols of --auth, in its
	// order ("token": ztn on TLS connections, "gsi", "krb5").
	protocols []string
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
		m = strings.TrimSpace(m)
		if (m == "token" || m == "gsi" || m == "krb5") && !has[m] {
			sec.protocols = append(sec.protocols, m)
		}
		has[m] = true
	}
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
	if has["x509"] && sec.tls == nil {
		return nil, fmt.Errorf("--auth x509 needs --tls (client certificates come with the TLS handshake)")
	}
	if has["gsi"] && sec.tls == nil {
		return nil, fmt.Errorf("--auth gsi needs --tls (the host certificate and the CA directory; root:// stays open beside roots://)")
	}
	if has["x509"] || has["gsi"] {
		x, err := x509auth.New(sec.tls.CADir, s.GridMap)
		if err != nil {
			return nil, err
		}
		x.VOMSDir, x.VOMSMap = s.VOMSDir, s.VOMSMap
		sec.x509 = x
	}
	if has["gsi"] {
		chain, key, err := sec.tls.GSI()
		if err != nil {
			return nil, err
		}
		g, err := gsi.NewServer(gsi.Config{Cert: chain[0], Key: key, Authenticate: xrdfront.AuthenticateCerts(sec.x509)})
		if err != nil {
			return nil, err
		}
		sec.gsi = g
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

// xrootd sets a listener's TLS and, on a namespace listener, the
// security protocols of --auth in its order: ztn (TLS logins; the token
// goes through chain), gsi (the chain whose key the client proved goes
// through the x509 method), krb5 (the AP-REQ goes to chain's krb5
// method). Data listeners need no identity: the capability authorizes.
func (s *Security) xrootd(cfg *xrootd.Config, chain auth.Chain) {
	if s == nil {
		return
	}
	if s.tls != nil {
		cfg.TLS, cfg.RequireTLS = s.tls.Server, s.tls.Require
	}
	if cfg.Namespace == nil {
		return
	}
	for _, p := range s.protocols {
		switch p {
		case "token":
			cfg.Security = append(cfg.Security, xrootd.Ztn(xrdfront.AuthenticateToken(chain)))
		case "gsi":
			cfg.Security = append(cfg.Security, s.gsi)
		case "krb5":
			for _, a := range chain {
				if m, ok := a.(*krb5auth.Method); ok {
					cfg.Security = append(cfg.Security, xrootd.Krb5(m.Service, xrdfront.AuthenticateKerberos(m)))
				}
			}
		}
	}
}

// tpcAuth is how a storage server's third-party copies log in to root://
// sources that ask for gsi: with the host certificate (as a user
// certificate; the source site maps the host's DN in its grid-mapfile),
// trusting the CA directory for the source's host certificate. Without
// TLS, or without an RSA host certificate, sources are logged in to as
// unix only.
func (s *Security) tpcAuth(log *slog.Logger) []xrootd.ClientAuth {
	if s == nil || s.tls == nil {
		return nil
	}
	chain, key, err := s.tls.GSI()
	if err != nil {
		log.Warn("third-party copies from root:// sources that require gsi are not possible", "err", err)
		return nil
	}
	return []xrootd.ClientAuth{&gsi.Client{Cred: &gsi.Credential{Chain: chain, Key: key}, Roots: s.tls.CAs}}
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

// certs is the x509 method (nil: none).
func (s *Security) certs() auth.Authenticator {
	if s == nil {
		return nil
	}
	return s.x509
}

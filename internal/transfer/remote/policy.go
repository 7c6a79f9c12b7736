// Package remote holds the far ends of a third-party copy: an HTTP(S)
// server (any WebDAV server, another Kaon) and an XRootD server, plus the
// Policy deciding which remote URLs a copy may reach at all.
package remote

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// internalPaths are URL path prefixes of Kaon's internal endpoints (stripe
// transfers between storage servers, the namespace ↔ storage protocol):
// a copy never targets them, on any host.
var internalPaths = []string{"/kaon/v1/stripe/", "/internal/v1/", "/kaon/v1/stripe", "/internal/v1"}

// Policy decides which remote endpoints a copy may reach. Its checks run
// twice: on the URL a client names (scheme, path) and on every address a
// connection is about to be made to (after name resolution and after
// every redirect), so a name resolving to a forbidden address is caught.
//
// Loopback and link-local targets are refused unless AllowLoopback: a
// loopback client is authenticated by who owns its socket, so a copy to a
// loopback service would act as the Kaon process itself, and link-local
// addresses hold cloud metadata services. This instance's own endpoints
// (AddSelf) are refused always.
type Policy struct {
	AllowLoopback bool

	mu sync.RWMutex
	// self are the host:port of this instance's own listeners (HTTP and
	// root://, namespace and storage); an unspecified host (0.0.0.0, ::)
	// stands for every local address.
	self []string
}

// AddSelf records listeners of this instance (host:port).
func (p *Policy) AddSelf(addrs ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range addrs {
		if a != "" {
			p.self = append(p.self, a)
		}
	}
}

// CheckURL validates a remote URL a client named: http or https (davs and
// dav are accepted as their HTTP forms), a host, no user info, not an
// internal endpoint. It returns the URL to use.
func (p *Policy) CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, kerr.New(kerr.Invalid, "copy", "", "remote URL does not parse")
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "dav":
		u.Scheme = "http"
	case "https", "davs":
		u.Scheme = "https"
	case "":
		return nil, kerr.New(kerr.Invalid, "copy", "", "remote URL must be absolute (http:// or https://)")
	default:
		return nil, kerr.New(kerr.Permission, "copy", "", fmt.Sprintf("remote URL scheme %q is not allowed (only http and https)", u.Scheme))
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, kerr.New(kerr.Invalid, "copy", "", "remote URL has no host")
	}
	if u.User != nil {
		return nil, kerr.New(kerr.Invalid, "copy", "", "remote URL must not carry user information (use TransferHeaderAuthorization)")
	}
	if err := p.checkPath(u.Path); err != nil {
		return nil, err
	}
	return u, nil
}

func (p *Policy) checkPath(path string) error {
	clean := "/" + strings.TrimLeft(path, "/")
	for _, pre := range internalPaths {
		if clean == pre || strings.HasPrefix(clean, pre) {
			return kerr.New(kerr.Permission, "copy", "", "remote URL names an internal Kaon endpoint")
		}
	}
	return nil
}

// CheckAddr validates one address a connection is about to be made to.
func (p *Policy) CheckAddr(hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return kerr.New(kerr.Invalid, "copy", "", "bad remote address")
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return kerr.New(kerr.Invalid, "copy", "", "remote address is not an IP address")
	}
	if p.isSelf(ip, port) {
		return kerr.New(kerr.Permission, "copy", "", "remote endpoint is this Kaon instance itself")
	}
	if !p.AllowLoopback && (ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast()) {
		return kerr.New(kerr.Permission, "copy", "", "remote endpoint is a loopback or link-local address (refused unless --tpc-allow-loopback)")
	}
	return nil
}

func (p *Policy) isSelf(ip net.IP, port string) bool {
	p.mu.RLock()
	self := p.self
	p.mu.RUnlock()
	for _, s := range self {
		h, sp, err := net.SplitHostPort(s)
		if err != nil || sp != port {
			continue
		}
		sip := net.ParseIP(h)
		switch {
		case sip == nil:
			if addrs, err := net.LookupIP(h); err == nil {
				for _, a := range addrs {
					if a.Equal(ip) {
						return true
					}
				}
			}
		case sip.IsUnspecified():
			if isLocal(ip) {
				return true
			}
		case sip.Equal(ip), sip.IsLoopback() && ip.IsLoopback():
			return true
		}
	}
	return false
}

// isLocal reports whether ip is one of this host's addresses.
func isLocal(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// Dialer returns a dialer whose every connection is checked by CheckAddr
// after resolution, just before connecting.
func (p *Policy) Dialer() *net.Dialer {
	return &net.Dialer{Control: func(network, address string, _ syscall.RawConn) error {
		return p.CheckAddr(address)
	}}
}

// Resolve resolves host:port to one allowed address (for clients that dial
// by themselves, such as the XRootD one): the first that passes CheckAddr.
func (p *Policy) Resolve(ctx context.Context, hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", kerr.New(kerr.Invalid, "copy", hostport, "bad remote address (want host:port)")
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", kerr.New(kerr.Invalid, "copy", hostport, "bad remote port")
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return "", kerr.New(kerr.Unavailable, "copy", hostport, "cannot resolve remote host")
	}
	var first error
	for _, ip := range ips {
		a := net.JoinHostPort(ip.IP.String(), port)
		if err := p.CheckAddr(a); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		return a, nil
	}
	return "", first
}

// Redact is u without its query and fragment (which may carry tokens or
// pre-signed credentials), for logs and messages.
func Redact(u *url.URL) string {
	c := *u
	c.User = nil
	q := c.RawQuery != ""
	c.RawQuery, c.Fragment, c.RawFragment = "", "", ""
	s := c.String()
	if q {
		s += "?…"
	}
	return s
}

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	krbclient "github.com/jcmturner/gokrb5/v8/client"
	"github.com/jcmturner/gokrb5/v8/spnego"

	"github.com/kaon-storage/kaon/internal/auth/krb5auth"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/role/endpoints"
	"github.com/kaon-storage/kaon/internal/tlsconf"
	"github.com/spf13/cobra"
)

// server is the namespace server a client verb talks to and how: --url,
// --ca and --x509 of the verb.
type server struct {
	URL  string // --url ("": $KAON_URL, endpoints.json, the default)
	CA   string // --ca: a CA certificate file or a CA directory
	X509 bool   // --x509: present the grid proxy, send no bearer token
}

// serverURL finds the namespace server: --url, $KAON_URL, then the local
// all-in-one's endpoints.json (its https URL when it has one: tokens go
// over TLS only), then the default port.
func serverURL(flagURL string) string {
	if flagURL != "" {
		return strings.TrimRight(flagURL, "/")
	}
	if u := os.Getenv("KAON_URL"); u != "" {
		return strings.TrimRight(u, "/")
	}
	if ep, err := endpoints.Read(defaultDataDir()); err == nil {
		if ep.HTTPS != "" {
			return ep.HTTPS
		}
		if ep.HTTP != "" {
			return ep.HTTP
		}
	}
	return "http://127.0.0.1:8000"
}

// newAPI is a client of the namespace server the command talks to. Over
// https it trusts the system's CAs and the instance's (clientTLS); it
// sends the bearer token of the environment, if any, or with --x509
// presents the grid proxy as its TLS client certificate instead; with
// neither, over https, it authenticates with the user's Kerberos tickets
// (SPNEGO) when there are any (kinit's credential cache).
func newAPI(s server) *client.Client {
	c := client.New(serverURL(s.URL))
	if !s.X509 {
		c.Token = envBearer()
	}
	if !strings.HasPrefix(c.Base, "https://") {
		if s.X509 {
			c.HTTP = &http.Client{Transport: failing{fmt.Errorf("--x509 needs an https server (%s is not)", c.Base)}}
		}
		return c
	}
	cfg, warn := clientTLS(s)
	if warn != nil {
		fmt.Fprintf(os.Stderr, "kaon: %v\n", warn)
	}
	c.HTTP = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: cfg}}
	if s.X509 {
		if err := loadProxy(cfg); err != nil {
			c.HTTP = &http.Client{Transport: failing{err}}
		}
		return c
	}
	if c.Token == "" {
		krb, ok, err := krb5auth.ClientFromEnv()
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "kaon: not using Kerberos: %v\n", err)
		case ok:
			c.HTTP.Transport = negotiate{c.HTTP.Transport, krb, new(sync.Once)}
		}
	}
	return c
}

// negotiate sends every request with an SPNEGO (Kerberos) Authorization
// header for the server's HTTP/host principal, as curl --negotiate does.
// A server the user's KDC has no ticket for (an instance without
// Kerberos) gets the request without one, and the user a warning.
type negotiate struct {
	next   http.RoundTripper
	krb    *krbclient.Client
	warned *sync.Once
}

func (n negotiate) RoundTrip(r *http.Request) (*http.Response, error) {
	withKrb := r.Clone(r.Context())
	spn := "HTTP/" + r.URL.Hostname()
	if err := spnego.SetSPNEGOHeader(n.krb, withKrb, spn); err != nil {
		n.warned.Do(func() { fmt.Fprintf(os.Stderr, "kaon: not using Kerberos: no ticket for %s: %v\n", spn, err) })
		return n.next.RoundTrip(r)
	}
	return n.next.RoundTrip(withKrb)
}

// failing is the transport of a client that cannot send what it was
// told to: every request fails with why.
type failing struct{ err error }

func (f failing) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

// loadProxy makes cfg present the grid proxy as the client certificate.
func loadProxy(cfg *tls.Config) error {
	p := proxyFile()
	b, err := os.ReadFile(p)
	if err == nil {
		var c tls.Certificate
		if c, err = tls.X509KeyPair(b, b); err == nil {
			cfg.Certificates = []tls.Certificate{c}
			return nil
		}
	}
	return fmt.Errorf("--x509: grid proxy %s: %w", p, err)
}

// clientTLS trusts the system's CAs and the instance's: --ca (a file or a
// CA directory), $X509_CERT_DIR, and the CA the local all-in-one's
// endpoints.json names. An error says what could not be read; the
// configuration is usable all the same.
func clientTLS(s server) (*tls.Config, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	var errs []string
	trust := func(what, p string) {
		if p == "" {
			return
		}
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", what, err))
			return
		}
		if st.IsDir() {
			certs, err := tlsconf.ReadCADir(p)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s %s: %v", what, p, err))
			}
			for _, c := range certs {
				pool.AddCert(c)
			}
			return
		}
		b, err := os.ReadFile(p)
		if err == nil && !pool.AppendCertsFromPEM(b) {
			err = fmt.Errorf("no PEM certificate in it")
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s %s: %v", what, p, err))
		}
	}
	trust("--ca", s.CA)
	trust("X509_CERT_DIR", os.Getenv("X509_CERT_DIR"))
	if ep, err := endpoints.Read(defaultDataDir()); err == nil {
		if ep.CA != "" {
			trust("endpoints.json's CA", ep.CA)
		} else {
			trust("endpoints.json's CA directory", ep.CADir)
		}
	}
	if len(errs) > 0 {
		return cfg, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return cfg, nil
}

// proxyFile is the grid proxy of the environment: $X509_USER_PROXY, else
// /tmp/x509up_u$UID (where grid-proxy-init and xrdgsiproxy write it).
func proxyFile() string {
	if p := os.Getenv("X509_USER_PROXY"); p != "" {
		return p
	}
	return filepath.Join(os.TempDir(), "x509up_u"+strconv.Itoa(os.Getuid()))
}

// btTmp is where Bearer Token Discovery looks last (tests change it).
var btTmp = "/tmp"

// envBearer is the bearer token of the environment as WLCG Bearer Token
// Discovery finds it: $BEARER_TOKEN, else the content of
// $BEARER_TOKEN_FILE, else of $XDG_RUNTIME_DIR/bt_u$UID, else of
// /tmp/bt_u$UID; a place that is unset, absent or empty passes to the
// next ("" if none has one). The two well-known files are taken only
// when this user owns them: anyone can write to /tmp.
func envBearer() string {
	if t := strings.TrimSpace(os.Getenv("BEARER_TOKEN")); t != "" {
		return t
	}
	read := func(f string, own bool) string {
		st, err := os.Stat(f)
		if err != nil || st.IsDir() {
			return ""
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); own && (!ok || int(sys.Uid) != os.Getuid()) {
			return ""
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	if f := os.Getenv("BEARER_TOKEN_FILE"); f != "" {
		if t := read(f, false); t != "" {
			return t
		}
	}
	name := "bt_u" + strconv.Itoa(os.Getuid())
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		if t := read(filepath.Join(d, name), true); t != "" {
			return t
		}
	}
	return read(filepath.Join(btTmp, name), true)
}

// withURL adds --url (the namespace server a client verb talks to), --ca
// and --x509 to c.
func withURL(c *cobra.Command) *cobra.Command {
	c.Flags().String("url", "", "namespace server URL (default $KAON_URL or the local all-in-one)")
	c.Flags().String("ca", "", "CA certificate file or directory to trust for https (besides the system's, $X509_CERT_DIR and the local all-in-one's)")
	c.Flags().Bool("x509", false, "authenticate with the grid proxy ($X509_USER_PROXY or /tmp/x509up_u$UID) instead of a bearer token")
	return c
}

// urlOf is the namespace server of a client verb (--url, --ca, --x509).
func urlOf(c *cobra.Command) server {
	u, _ := c.Flags().GetString("url")
	ca, _ := c.Flags().GetString("ca")
	x, _ := c.Flags().GetBool("x509")
	return server{URL: u, CA: ca, X509: x}
}

// ctx is the context of a CLI request: it ends with the command.
func ctx() context.Context { return context.Background() }

// fail prints err for a CLI command and returns the exit code.
func fail(cmd string, err error) int {
	fmt.Fprintf(os.Stderr, "kaon %s: %v\n", cmd, err)
	return 1
}

// Package tlsconf is Kaon's TLS setup, shared by every listener and every
// internal client: a local CA and a host certificate generated on first
// start (or a site's own certificate), the trusted CAs read from a
// directory in OpenSSL's hashed layout (as /etc/grid-security/certificates),
// the server and client configurations (never below TLS 1.2), and a
// listener that serves TLS and, unless TLS is required, plaintext on the
// same port.
//
// Client certificates are requested but not verified here: grid clients
// send RFC 3820 proxy chains, which crypto/x509 cannot verify; the x509
// authentication method (auth/x509auth) verifies them. The TLS handshake
// itself proves the client holds the key of the certificate it sent.
package tlsconf

import (
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// DefaultCADir is where grid hosts keep their trusted CAs.
const DefaultCADir = "/etc/grid-security/certificates"

// Options says where a process's TLS material comes from.
type Options struct {
	Require bool   // refuse plaintext clients
	Cert    string // a site's host certificate (PEM); "" = generated under Dir
	Key     string // its private key
	CADir   string // trusted CAs; "" = Dir/certificates (local CA), DefaultCADir with a site certificate
	Dir     string // where the local CA and the generated host certificate live
	// Hosts are the names and addresses the generated host certificate
	// covers besides 127.0.0.1, ::1, localhost and the hostname.
	Hosts []string
}

// Material is a process's TLS setup.
type Material struct {
	Server  *tls.Config // for listeners: TLS >= 1.2, client certificates requested
	Client  *tls.Config // for internal clients: trusts CADir
	CAFile  string      // the certificate of the CA that signed the host's (the local CA, or a file of CADir; "" if none did)
	CADir   string      // the trusted CAs (hashed layout)
	CAs     *x509.CertPool
	Require bool

	opts     Options
	hostCert tls.Certificate
	gsiOnce  sync.Once
	gsi      tls.Certificate
	gsiErr   error
}

// Setup loads or generates the TLS material o describes.
func Setup(o Options) (*Material, error) {
	m := &Material{Require: o.Require, CADir: o.CADir}
	certFile, keyFile := o.Cert, o.Key
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("tls: --tls-cert and --tls-key go together")
	}
	if certFile == "" {
		if o.Dir == "" {
			return nil, errors.New("tls: no certificate given and no directory to generate one in")
		}
		lc, err := LocalCA(o.Dir)
		if err != nil {
			return nil, err
		}
		if certFile, keyFile, err = lc.HostCert(o.Hosts); err != nil {
			return nil, err
		}
		m.CAFile = lc.CertFile
		if m.CADir == "" {
			m.CADir = lc.HashDir
		}
	} else if m.CADir == "" {
		m.CADir = DefaultCADir
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: host certificate %s: %w", certFile, err)
	}
	m.opts, m.hostCert = o, cert
	pool, n, err := LoadCADir(m.CADir)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("tls: no CA certificate in %s", m.CADir)
	}
	m.CAs = pool
	if m.CAFile == "" {
		m.CAFile = issuerFile(m.CADir, cert)
	}
	m.Server = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequestClientCert,
		NextProtos:   []string{"http/1.1", "h2"}, // h2 only for clients that offer nothing else (sessions)
	}
	m.Client = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	return m, nil
}

// GSI is the host certificate (with the chain its file holds, leaf
// first) and key for root://'s gsi, which signs with RSA: the host
// certificate when its key is RSA, else (a generated one) an RSA
// certificate the local CA issues for the same names (gsicert.pem); a
// site's certificate of another key type has none.
func (m *Material) GSI() ([]*x509.Certificate, *rsa.PrivateKey, error) {
	m.gsiOnce.Do(func() {
		m.gsi = m.hostCert
		if _, ok := m.gsi.PrivateKey.(*rsa.PrivateKey); ok {
			return
		}
		if m.opts.Cert != "" {
			m.gsiErr = fmt.Errorf("tls: gsi needs an RSA host certificate; %s has another key type", m.opts.Cert)
			return
		}
		lc, err := LocalCA(m.opts.Dir)
		if err != nil {
			m.gsiErr = err
			return
		}
		cf, kf, err := lc.GSICert(m.opts.Hosts)
		if err != nil {
			m.gsiErr = err
			return
		}
		if m.gsi, err = tls.LoadX509KeyPair(cf, kf); err != nil {
			m.gsiErr = fmt.Errorf("tls: gsi host certificate %s: %w", cf, err)
		}
	})
	if m.gsiErr != nil {
		return nil, nil, m.gsiErr
	}
	var chain []*x509.Certificate
	for _, der := range m.gsi.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, nil, err
		}
		chain = append(chain, c)
	}
	return chain, m.gsi.PrivateKey.(*rsa.PrivateKey), nil
}

// issuerFile is the file of dir holding the CA that signed the last
// certificate of cert's chain (the host certificate, or the top of the
// intermediates its file holds), so that clients told of one file trust
// the right CA; "" when none did.
func issuerFile(dir string, cert tls.Certificate) string {
	if len(cert.Certificate) == 0 {
		return ""
	}
	top, err := x509.ParseCertificate(cert.Certificate[len(cert.Certificate)-1])
	if err != nil {
		return ""
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		name := e.Name()
		if !hashedName.MatchString(name) && !strings.HasSuffix(name, ".pem") && !strings.HasSuffix(name, ".crt") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		certs, _ := ParsePEMCerts(b)
		for _, c := range certs {
			if c.IsCA && top.CheckSignatureFrom(c) == nil {
				return filepath.Join(dir, name)
			}
		}
	}
	return ""
}

// hashedName is a CA file in OpenSSL's hashed layout (<hash>.<n>).
var hashedName = regexp.MustCompile(`^[0-9a-f]{8}\.[0-9]+$`)

// LoadCADir reads the CA certificates of dir: files named <hash>.<n> or
// *.pem / *.crt, each holding one or more PEM certificates. It returns
// the pool and the number of certificates in it.
func LoadCADir(dir string) (*x509.CertPool, int, error) {
	certs, err := ReadCADir(dir)
	if err != nil {
		return nil, 0, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, len(certs), nil
}

// ReadCADir returns the CA certificates of dir (see LoadCADir).
func ReadCADir(dir string) ([]*x509.Certificate, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("tls: CA directory: %w", err)
	}
	var out []*x509.Certificate
	for _, e := range ents {
		name := e.Name()
		if !hashedName.MatchString(name) && !strings.HasSuffix(name, ".pem") && !strings.HasSuffix(name, ".crt") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue // a dangling link or unreadable file is not a CA
		}
		certs, err := ParsePEMCerts(b)
		if err != nil {
			return nil, fmt.Errorf("tls: CA file %s: %w", filepath.Join(dir, name), err)
		}
		for _, c := range certs {
			if c.IsCA {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// ParsePEMCerts reads the PEM certificates of b, skipping other blocks
// (such as a private key a client should not have sent).
func ParsePEMCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out, nil
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}

// Outbound is a client configuration for connections to other sites
// (third-party copies, token issuers' keys): the system's trusted roots
// and the CA directory's, so a peer with a certificate of the local CA
// (another Kaon of this site) is trusted as well as a public server.
func (m *Material) Outbound() *tls.Config {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if certs, err := ReadCADir(m.CADir); err == nil {
		for _, c := range certs {
			pool.AddCert(c)
		}
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
}

package tlsconf

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// The local CA's layout under its directory:
//
//	ca.pem, ca.key         the CA (key mode 0600); clients use ca.pem (curl --cacert)
//	certificates/<hash>.0  the same certificate in the hashed layout (X509_CERT_DIR, --capath)
//	hostcert.pem, hostkey.pem  the host certificate it issued (ECDSA P-256)
//	gsicert.pem, gsikey.pem    the same names with an RSA key, for root://'s gsi (which signs with RSA)
const (
	caCertName   = "ca.pem"
	caKeyName    = "ca.key"
	hashDirName  = "certificates"
	hostCertName = "hostcert.pem"
	hostKeyName  = "hostkey.pem"
	gsiCertName  = "gsicert.pem"
	gsiKeyName   = "gsikey.pem"
)

// Validity of what the local CA issues; a host certificate closer than
// renewBefore to its end is issued again at start.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	hostValidity = 365 * 24 * time.Hour
	renewBefore  = 30 * 24 * time.Hour
)

// Local is a CA kept in a directory.
type Local struct {
	Dir      string
	CertFile string // ca.pem
	HashDir  string // certificates/
	Cert     *x509.Certificate
	Key      crypto.Signer
}

// LocalCA loads the CA kept in dir, creating it on first use.
func LocalCA(dir string) (*Local, error) {
	l := &Local{Dir: dir, CertFile: filepath.Join(dir, caCertName), HashDir: filepath.Join(dir, hashDirName)}
	if err := os.MkdirAll(l.HashDir, 0o755); err != nil {
		return nil, fmt.Errorf("tls: local CA: %w", err)
	}
	cert, key, err := loadPair(l.CertFile, filepath.Join(dir, caKeyName))
	switch {
	case err == nil:
		l.Cert, l.Key = cert, key
	case errors.Is(err, os.ErrNotExist):
		if err := l.create(); err != nil {
			return nil, fmt.Errorf("tls: creating the local CA in %s: %w", dir, err)
		}
	default:
		return nil, fmt.Errorf("tls: local CA in %s: %w", dir, err)
	}
	// The hashed copy is (re)written every start: it is derived.
	h, err := SubjectHash(l.Cert)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(l.HashDir, h+".0"), pemCert(l.Cert.Raw), 0o644); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Local) create() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"Kaon"}, CommonName: "Kaon local CA " + host},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return err
	}
	if l.Cert, err = x509.ParseCertificate(der); err != nil {
		return err
	}
	l.Key = key
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(l.Dir, caKeyName), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return writeFileAtomic(l.CertFile, pemCert(der), 0o644)
}

// HostCert returns the host certificate and key files the CA issued for
// this host, issuing them again when missing, near their end, issued by
// another CA or not covering hosts (plus 127.0.0.1, ::1, localhost and
// the hostname: the XRootD client checks the name it was redirected to).
func (l *Local) HostCert(hosts []string) (certFile, keyFile string, err error) {
	return l.hostCert(hosts, hostCertName, hostKeyName, false)
}

// GSICert is HostCert with an RSA key (gsicert.pem, gsikey.pem): the
// gsi security protocol signs with RSA, TLS is faster with ECDSA.
func (l *Local) GSICert(hosts []string) (certFile, keyFile string, err error) {
	return l.hostCert(hosts, gsiCertName, gsiKeyName, true)
}

func (l *Local) hostCert(hosts []string, certName, keyName string, useRSA bool) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(l.Dir, certName), filepath.Join(l.Dir, keyName)
	names := hostNames(hosts)
	if c, k, err := loadPair(certFile, keyFile); err == nil && l.covers(c, names) && isRSA(k) == useRSA {
		return certFile, keyFile, nil
	}
	var key crypto.Signer
	if useRSA {
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"Kaon"}, CommonName: names[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(hostValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, l.Cert, key.Public(), l.Key)
	if err != nil {
		return "", "", fmt.Errorf("tls: issuing the host certificate: %w", err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	if err := writeFileAtomic(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return "", "", err
	}
	if err := writeFileAtomic(certFile, pemCert(der), 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// covers reports whether c was issued by l, is not near its end and
// names every host.
func (l *Local) covers(c *x509.Certificate, names []string) bool {
	if c.CheckSignatureFrom(l.Cert) != nil || time.Until(c.NotAfter) < renewBefore {
		return false
	}
	for _, n := range names {
		if c.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

func isRSA(k crypto.Signer) bool {
	_, ok := k.(*rsa.PrivateKey)
	return ok
}

// hostNames is the hostname first (the certificate's CN), then the
// loopback names and hosts, without duplicates or empty/wildcard hosts.
func hostNames(hosts []string) []string {
	h, _ := os.Hostname()
	var out []string
	for _, n := range append([]string{h, "localhost", "127.0.0.1", "::1"}, hosts...) {
		if n == "" || n == "0.0.0.0" || n == "::" || slices.Contains(out, n) {
			continue
		}
		out = append(out, n)
	}
	return out
}

func loadPair(certFile, keyFile string) (*x509.Certificate, crypto.Signer, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, err
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, nil, fmt.Errorf("%s or %s is not PEM", certFile, keyFile)
	}
	c, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not a signing key", keyFile)
	}
	return c, s, nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

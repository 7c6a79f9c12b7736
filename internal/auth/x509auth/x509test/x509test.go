// Package x509test makes grid credentials for tests: a CA in a CA
// directory of OpenSSL's hashed layout, user certificates and RFC 3820
// proxies (and deliberately broken ones), written as the files grid
// clients read (X509_USER_PROXY: the proxy, its key, then the chain).
package x509test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/kaon-storage/kaon/internal/tlsconf"
)

// Cred is a certificate with its key and the chain above it (leaf first,
// the CA excluded).
type Cred struct {
	Cert  *x509.Certificate
	Key   *ecdsa.PrivateKey
	Chain []*x509.Certificate // Cert first
}

var oidDC = asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}

// Name is /DC=org/DC=kaon-test/O=<org>/CN=<cn>.
func Name(org, cn string) pkix.Name {
	return pkix.Name{ExtraNames: []pkix.AttributeTypeAndValue{
		{Type: oidDC, Value: "org"}, {Type: oidDC, Value: "kaon-test"},
		{Type: asn1.ObjectIdentifier{2, 5, 4, 10}, Value: org},
		{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: cn}}}
}

func key() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func sign(tmpl, parent *x509.Certificate, pub any, signer *ecdsa.PrivateKey) *x509.Certificate {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		panic(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	return c
}

// NewCA is a self-signed CA named /DC=org/DC=kaon-test/O=<org>/CN=<org> CA.
func NewCA(org string) *Cred {
	k := key()
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: Name(org, org+" CA"),
		NotBefore: now.Add(-24 * time.Hour), NotAfter: now.Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	c := sign(tmpl, tmpl, k.Public(), k)
	return &Cred{Cert: c, Key: k}
}

// User is an end-entity certificate for cn issued by ca, valid from
// 24 h ago for 30 days.
func (ca *Cred) User(cn string) *Cred {
	k := key()
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: Name("Users", cn),
		NotBefore: now.Add(-24 * time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	c := sign(tmpl, ca.Cert, k.Public(), ca.Key)
	return &Cred{Cert: c, Key: k, Chain: []*x509.Certificate{c}}
}

// ProxyOpts varies a proxy, to make broken ones.
type ProxyOpts struct {
	NotBefore, NotAfter time.Time // zero: from 1 h ago to 12 h from now
	SignWith            *ecdsa.PrivateKey
	CN                  string                // default: a serial number
	Language            asn1.ObjectIdentifier // default id-ppl-inheritAll
	PathLen             int                   // pCPathLenConstraint, with HasPathLen
	HasPathLen          bool
	CA                  bool // marks the proxy a CA
	Legacy              bool // Globus legacy proxy: CN=proxy, no extension
	OtherSubject        bool // subject not derived from the issuer's
}

// Proxy is an RFC 3820 proxy of c.
func (c *Cred) Proxy(o ProxyOpts) *Cred {
	k := key()
	now := time.Now()
	if o.NotBefore.IsZero() {
		o.NotBefore = now.Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = now.Add(12 * time.Hour)
	}
	if o.SignWith == nil {
		o.SignWith = c.Key
	}
	if o.Language == nil {
		o.Language = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 21, 1}
	}
	sn := serial()
	cn := o.CN
	if cn == "" {
		cn = sn.String()
	}
	if o.Legacy {
		cn = "proxy"
	}
	var rdns pkix.RDNSequence
	if _, err := asn1.Unmarshal(c.Cert.RawSubject, &rdns); err != nil {
		panic(err)
	}
	if o.OtherSubject {
		rdns = Name("Elsewhere", "Mallory").ToRDNSequence()
	}
	rdns = append(rdns, pkix.RelativeDistinguishedNameSET{{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: cn}})
	raw, _ := asn1.Marshal(rdns)
	tmpl := &x509.Certificate{SerialNumber: sn, RawSubject: raw, NotBefore: o.NotBefore, NotAfter: o.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment}
	if o.CA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	}
	if !o.Legacy {
		type policy struct{ Language asn1.ObjectIdentifier }
		var val []byte
		if o.HasPathLen {
			val, _ = asn1.Marshal(struct {
				PathLen int
				Policy  policy
			}{o.PathLen, policy{o.Language}})
		} else {
			val, _ = asn1.Marshal(struct{ Policy policy }{policy{o.Language}})
		}
		tmpl.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 14}, Critical: true, Value: val}}
	}
	parent := c.Cert
	if o.SignWith != c.Key { // a forgery: the issuer's name, another key
		fake := *c.Cert
		fake.PublicKey = o.SignWith.Public()
		parent = &fake
	}
	p := sign(tmpl, parent, k.Public(), o.SignWith)
	return &Cred{Cert: p, Key: k, Chain: append([]*x509.Certificate{p}, c.Chain...)}
}

// WriteCADir writes the CAs into dir in the hashed layout (<hash>.0).
func WriteCADir(dir string, cas ...*Cred) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, ca := range cas {
		h, err := tlsconf.SubjectHash(ca.Cert)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, h+".0"), pemCert(ca.Cert), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// WriteProxyFile writes c as grid clients read X509_USER_PROXY: the
// certificate, its key, then the rest of the chain (mode 0600).
func (c *Cred) WriteProxyFile(path string) error {
	kb, err := x509.MarshalECPrivateKey(c.Key)
	if err != nil {
		return err
	}
	out := pemCert(c.Cert)
	out = append(out, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})...)
	for _, x := range c.Chain[1:] {
		out = append(out, pemCert(x)...)
	}
	return os.WriteFile(path, out, 0o600)
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

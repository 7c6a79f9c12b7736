// Package x509test makes grid credentials for tests: a CA in a CA
// directory of OpenSSL's hashed layout, user certificates and RFC 3820
// proxies (and deliberately broken ones), written as the files grid
// clients read (X509_USER_PROXY: the proxy, its key, then the chain).
// Keys are ECDSA P-256, or RSA 2048 below a CA made by NewRSACA (what the
// gsi protocol and grid tools need).
package x509test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/kaon-storage/kaon/internal/tlsconf"
)

// Cred is a certificate with its key and the chain above it (leaf first,
// the CA excluded).
type Cred struct {
	Cert  *x509.Certificate
	Key   crypto.Signer       // *ecdsa.PrivateKey or *rsa.PrivateKey
	Chain []*x509.Certificate // Cert first
	rsa   bool                // what it issues has RSA keys
}

var oidDC = asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}

// Name is /DC=org/DC=kaon-test/O=<org>/CN=<cn>.
func Name(org, cn string) pkix.Name {
	return pkix.Name{ExtraNames: []pkix.AttributeTypeAndValue{
		{Type: oidDC, Value: "org"}, {Type: oidDC, Value: "kaon-test"},
		{Type: asn1.ObjectIdentifier{2, 5, 4, 10}, Value: org},
		{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: cn}}}
}

func key(useRSA bool) crypto.Signer {
	if useRSA {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		return k
	}
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

func sign(tmpl, parent *x509.Certificate, pub any, signer crypto.Signer) *x509.Certificate {
	if der, err := x509.MarshalPKIXPublicKey(pub); err == nil && tmpl.SubjectKeyId == nil {
		sum := sha1.Sum(der) // a key identifier, as CAs set them (voms-proxy-fake needs the issuer's)
		tmpl.SubjectKeyId = sum[:]
	}
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
func NewCA(org string) *Cred { return newCA(org, false) }

// NewRSACA is NewCA with RSA keys for it and everything it issues.
func NewRSACA(org string) *Cred { return newCA(org, true) }

func newCA(org string, useRSA bool) *Cred {
	k := key(useRSA)
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: Name(org, org+" CA"),
		NotBefore: now.Add(-24 * time.Hour), NotAfter: now.Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	c := sign(tmpl, tmpl, k.Public(), k)
	return &Cred{Cert: c, Key: k, rsa: useRSA}
}

// User is an end-entity certificate for cn issued by ca, valid from
// 24 h ago for 30 days.
func (ca *Cred) User(cn string) *Cred {
	k := key(ca.rsa)
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: Name("Users", cn),
		NotBefore: now.Add(-24 * time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	c := sign(tmpl, ca.Cert, k.Public(), ca.Key)
	return &Cred{Cert: c, Key: k, Chain: []*x509.Certificate{c}, rsa: ca.rsa}
}

// Host is a host certificate for the names (DNS names or IP addresses)
// issued by ca: CN the first name, server and client authentication.
func (ca *Cred) Host(names ...string) *Cred {
	k := key(ca.rsa)
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: Name("Hosts", names[0]),
		NotBefore: now.Add(-24 * time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	c := sign(tmpl, ca.Cert, k.Public(), ca.Key)
	return &Cred{Cert: c, Key: k, Chain: []*x509.Certificate{c}, rsa: ca.rsa}
}

// ProxyOpts varies a proxy, to make broken ones.
type ProxyOpts struct {
	NotBefore, NotAfter time.Time // zero: from 1 h ago to 12 h from now, within the issuer's
	SignWith            crypto.Signer
	CN                  string                // default: a serial number
	Language            asn1.ObjectIdentifier // default id-ppl-inheritAll
	PathLen             int                   // pCPathLenConstraint, with HasPathLen
	HasPathLen          bool
	CA                  bool  // marks the proxy a CA
	Legacy              bool  // Globus legacy proxy: CN=proxy, no extension
	OtherSubject        bool  // subject not derived from the issuer's
	VOMS                *VOMS // VOMS attributes to carry
}

// VOMS is an attribute certificate a VOMS server signs for a proxy.
type VOMS struct {
	Server              *Cred  // the VOMS server's credential (a Host)
	VO                  string // "vo" of "vo://host:port"
	FQANs               []string
	NotBefore, NotAfter time.Time         // zero: the proxy's validity
	Holder              *x509.Certificate // zero: the proxy chain's end-entity certificate
	SignWith            crypto.Signer     // zero: Server.Key
}

// Proxy is an RFC 3820 proxy of c.
func (c *Cred) Proxy(o ProxyOpts) *Cred {
	k := key(c.rsa)
	now := time.Now()
	if o.NotBefore.IsZero() { // within the issuer's validity, as proxy tools make them
		o.NotBefore = now.Add(-time.Hour)
		if o.NotBefore.Before(c.Cert.NotBefore) {
			o.NotBefore = c.Cert.NotBefore
		}
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = now.Add(12 * time.Hour)
		if o.NotAfter.After(c.Cert.NotAfter) {
			o.NotAfter = c.Cert.NotAfter
		}
	}
	forged := o.SignWith != nil
	if !forged {
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
	if o.VOMS != nil {
		tmpl.ExtraExtensions = append(tmpl.ExtraExtensions, vomsExtension(o.VOMS, c.Chain[len(c.Chain)-1], o.NotBefore, o.NotAfter))
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
		tmpl.ExtraExtensions = append(tmpl.ExtraExtensions, pkix.Extension{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 14}, Critical: true, Value: val})
	}
	parent := c.Cert
	if forged { // a forgery: the issuer's name, another key
		fake := *c.Cert
		fake.PublicKey = o.SignWith.Public()
		parent = &fake
	}
	p := sign(tmpl, parent, k.Public(), o.SignWith)
	return &Cred{Cert: p, Key: k, Chain: append([]*x509.Certificate{p}, c.Chain...), rsa: c.rsa}
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
	kb, err := c.KeyPEM()
	if err != nil {
		return err
	}
	out := pemCert(c.Cert)
	out = append(out, kb...)
	for _, x := range c.Chain[1:] {
		out = append(out, pemCert(x)...)
	}
	return os.WriteFile(path, out, 0o600)
}

// WriteCertKey writes c's certificate (with its chain) and key to two
// files (curl --cert/--key).
func (c *Cred) WriteCertKey(certPath, keyPath string) error {
	kb, err := c.KeyPEM()
	if err != nil {
		return err
	}
	var out []byte
	for _, x := range c.Chain {
		out = append(out, pemCert(x)...)
	}
	if err := os.WriteFile(certPath, out, 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyPath, kb, 0o600)
}

// KeyPEM is c's key as grid tools write it: "RSA PRIVATE KEY" (PKCS #1)
// or "EC PRIVATE KEY".
func (c *Cred) KeyPEM() ([]byte, error) {
	switch k := c.Key.(type) {
	case *rsa.PrivateKey:
		return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), nil
	case *ecdsa.PrivateKey:
		kb, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
	}
	return nil, fmt.Errorf("x509test: unknown key type %T", c.Key)
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// vomsExtension is the proxy extension carrying one attribute certificate
// (RFC 5755) for ee, as voms-proxy-init writes it.
func vomsExtension(v *VOMS, ee *x509.Certificate, nb, na time.Time) pkix.Extension {
	must := func(b []byte, err error) []byte {
		if err != nil {
			panic(err)
		}
		return b
	}
	ctx := func(tag int, b []byte) asn1.RawValue {
		return asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: tag, IsCompound: true, Bytes: b}
	}
	names := func(rawName []byte) []byte { // GeneralNames with one directoryName
		return must(asn1.Marshal([]asn1.RawValue{ctx(4, rawName)}))
	}
	if v.Holder == nil {
		v.Holder = ee
	}
	if v.NotBefore.IsZero() {
		v.NotBefore = nb
	}
	if v.NotAfter.IsZero() {
		v.NotAfter = na
	}
	signer := v.SignWith
	if signer == nil {
		signer = v.Server.Key
	}
	issuerSerial := append(append([]byte{}, names(v.Holder.RawIssuer)...), must(asn1.Marshal(v.Holder.SerialNumber))...)
	holder := must(asn1.Marshal(struct{ Base asn1.RawValue }{ctx(0, issuerSerial)}))
	var values []asn1.RawValue
	for _, f := range v.FQANs {
		values = append(values, asn1.RawValue{Tag: asn1.TagOctetString, Bytes: []byte(f)})
	}
	uri := must(asn1.Marshal(asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(v.VO + "://" + v.Server.Cert.DNSNames[0] + ":15000")}))
	ietf := must(asn1.Marshal(struct {
		Authority asn1.RawValue
		Values    []asn1.RawValue
	}{ctx(0, uri), values}))
	attr := struct {
		Type   asn1.ObjectIdentifier
		Values []asn1.RawValue `asn1:"set"`
	}{asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 8005, 100, 100, 4}, []asn1.RawValue{{FullBytes: ietf}}}
	certseq := must(asn1.Marshal(struct{ Certs []asn1.RawValue }{[]asn1.RawValue{{FullBytes: v.Server.Cert.Raw}}}))
	sigAlg := pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 11}, Parameters: asn1.NullRawValue}
	if _, ok := signer.(*ecdsa.PrivateKey); ok {
		sigAlg = pkix.AlgorithmIdentifier{Algorithm: asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}}
	}
	info := must(asn1.Marshal(struct {
		Version  int
		Holder   asn1.RawValue
		Issuer   asn1.RawValue
		Alg      pkix.AlgorithmIdentifier
		Serial   *big.Int
		Validity struct {
			NotBefore, NotAfter time.Time `asn1:"generalized"`
		}
		Attributes []any
		Extensions []pkix.Extension
	}{1, asn1.RawValue{FullBytes: holder}, ctx(0, names(v.Server.Cert.RawSubject)), sigAlg, serial(),
		struct {
			NotBefore, NotAfter time.Time `asn1:"generalized"`
		}{v.NotBefore.UTC(), v.NotAfter.UTC()},
		[]any{attr}, []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 8005, 100, 100, 10}, Value: certseq}}}))
	sum := sha256.Sum256(info)
	sig, err := signer.Sign(rand.Reader, sum[:], crypto.SHA256)
	if err != nil {
		panic(err)
	}
	ac := must(asn1.Marshal(struct {
		Info asn1.RawValue
		Alg  pkix.AlgorithmIdentifier
		Sig  asn1.BitString
	}{asn1.RawValue{FullBytes: info}, sigAlg, asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}}))
	acseq := must(asn1.Marshal([]asn1.RawValue{{FullBytes: must(asn1.Marshal([]asn1.RawValue{{FullBytes: ac}}))}}))
	return pkix.Extension{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 8005, 100, 100, 5}, Value: acseq}
}

// WriteLSC writes dir/<vo>/<host>.lsc vouching for server (a Host) in
// the VOMS directory dir.
func WriteLSC(dir, vo string, server *Cred) error {
	if err := os.MkdirAll(filepath.Join(dir, vo), 0o755); err != nil {
		return err
	}
	dn := func(raw []byte) string {
		var rdns pkix.RDNSequence
		asn1.Unmarshal(raw, &rdns)
		var b []byte
		for _, rdn := range rdns {
			for _, atv := range rdn {
				name := map[string]string{"2.5.4.3": "CN", "2.5.4.10": "O", "0.9.2342.19200300.100.1.25": "DC"}[atv.Type.String()]
				b = fmt.Appendf(b, "/%s=%v", name, atv.Value)
			}
		}
		return string(b)
	}
	return os.WriteFile(filepath.Join(dir, vo, server.Cert.DNSNames[0]+".lsc"),
		[]byte(dn(server.Cert.RawSubject)+"\n"+dn(server.Cert.RawIssuer)+"\n"), 0o644)
}

// WriteCRL writes ca's CRL revoking the certificates given into the CA
// directory dir, as fetch-crl does (<hash>.r0, PEM).
func (ca *Cred) WriteCRL(dir string, revoked ...*Cred) error {
	now := time.Now()
	tmpl := &x509.RevocationList{Number: serial(), ThisUpdate: now.Add(-time.Hour), NextUpdate: now.Add(24 * time.Hour)}
	for _, r := range revoked {
		tmpl.RevokedCertificateEntries = append(tmpl.RevokedCertificateEntries,
			x509.RevocationListEntry{SerialNumber: r.Cert.SerialNumber, RevocationTime: now.Add(-time.Minute)})
	}
	der, err := x509.CreateRevocationList(rand.Reader, tmpl, ca.Cert, ca.Key)
	if err != nil {
		return err
	}
	h, err := tlsconf.SubjectHash(ca.Cert)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, h+".r0"), pem.EncodeToMemory(&pem.Block{Type: "X509 CRL", Bytes: der}), 0o644)
}

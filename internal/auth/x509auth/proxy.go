package x509auth

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Object identifiers of proxy certificates.
var (
	oidProxyCertInfo      = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 1, 14}         // RFC 3820
	oidProxyCertInfoDraft = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 3536, 1, 222}     // pre-RFC (GT3) proxies
	oidInheritAll         = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 21, 1}         // id-ppl-inheritAll
	oidLimitedProxy       = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 3536, 1, 1, 1, 9} // Globus limited proxy
	oidCN                 = asn1.ObjectIdentifier{2, 5, 4, 3}
)

// proxyCertInfo is RFC 3820's ProxyCertInfo extension (the draft OID
// carries the same fields): SEQUENCE { pCPathLenConstraint INTEGER
// OPTIONAL, proxyPolicy SEQUENCE { policyLanguage OID, policy OCTET
// STRING OPTIONAL } }.
type proxyCertInfo struct {
	PathLen  int // -1: no constraint
	Language asn1.ObjectIdentifier
}

// proxyKind says whether c is a proxy, and how.
type proxyKind int

const (
	notProxy    proxyKind = iota
	rfcProxy              // ProxyCertInfo extension
	legacyProxy           // Globus GT2: last CN "proxy" or "limited proxy", no extension
)

func kindOf(c *x509.Certificate) proxyKind {
	for _, e := range c.Extensions {
		if e.Id.Equal(oidProxyCertInfo) || e.Id.Equal(oidProxyCertInfoDraft) {
			return rfcProxy
		}
	}
	if cn := lastCN(c); (cn == "proxy" || cn == "limited proxy") && !c.IsCA {
		return legacyProxy
	}
	return notProxy
}

// lastCN is the value of c's subject's last RDN when it is a single CN.
func lastCN(c *x509.Certificate) string {
	var rdns pkix.RDNSequence
	if _, err := asn1.Unmarshal(c.RawSubject, &rdns); err != nil || len(rdns) == 0 {
		return ""
	}
	last := rdns[len(rdns)-1]
	if len(last) != 1 || !last[0].Type.Equal(oidCN) {
		return ""
	}
	s, _ := last[0].Value.(string)
	return s
}

// VerifyChain verifies a client's chain (leaf first) at time now: the
// end-entity certificate against roots (with the chain's other non-proxy
// certificates as intermediates), then every proxy below it. It returns
// the end-entity's DN in the grid-mapfile form (/DC=org/CN=Alice).
func VerifyChain(chain []*x509.Certificate, roots *x509.CertPool, now time.Time) (string, error) {
	dn, _, err := verifyChain(chain, roots, now)
	return dn, err
}

// verifyChain is VerifyChain, also returning the end-entity's index.
func verifyChain(chain []*x509.Certificate, roots *x509.CertPool, now time.Time) (string, int, error) {
	if len(chain) == 0 {
		return "", 0, errors.New("no certificate")
	}
	// The proxies come first; the first certificate that is not one is
	// the end-entity certificate.
	eec := -1
	for i, c := range chain {
		if kindOf(c) == notProxy {
			eec = i
			break
		}
	}
	if eec < 0 {
		return "", 0, errors.New("proxy chain without an end-entity certificate")
	}
	ee := chain[eec]
	inter := x509.NewCertPool()
	for _, c := range chain[eec+1:] {
		inter.AddCert(c)
	}
	if _, err := ee.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return "", 0, fmt.Errorf("%s: %v", DN(ee), err)
	}
	// Proxies, from the one the end-entity signed down to the leaf.
	maxBelow := -1 // proxies still allowed below (path length constraints); -1 = unlimited
	for i := eec - 1; i >= 0; i-- {
		p, issuer := chain[i], chain[i+1]
		if err := checkProxy(p, issuer, now); err != nil {
			return "", 0, fmt.Errorf("proxy %s: %v", DN(p), err)
		}
		if maxBelow == 0 {
			return "", 0, fmt.Errorf("proxy %s: beyond its issuer's path length constraint", DN(p))
		}
		if maxBelow > 0 {
			maxBelow--
		}
		if pl := pathLen(p); pl >= 0 && (maxBelow < 0 || pl < maxBelow) {
			maxBelow = pl
		}
	}
	return DN(ee), eec, nil
}

// checkProxy checks one proxy certificate against its issuer.
func checkProxy(p, issuer *x509.Certificate, now time.Time) error {
	if !bytes.Equal(p.RawIssuer, issuer.RawSubject) {
		return errors.New("its issuer is not the certificate before it in the chain")
	}
	// CheckSignatureFrom insists on a CA issuer; a proxy's issuer is not.
	if err := issuer.CheckSignature(p.SignatureAlgorithm, p.RawTBSCertificate, p.Signature); err != nil {
		return fmt.Errorf("not signed by its issuer: %v", err)
	}
	if now.Before(p.NotBefore) || now.After(p.NotAfter) {
		return fmt.Errorf("not valid now (valid %s to %s)", p.NotBefore.UTC().Format(time.RFC3339), p.NotAfter.UTC().Format(time.RFC3339))
	}
	if p.NotBefore.Before(issuer.NotBefore) || p.NotAfter.After(issuer.NotAfter) {
		return errors.New("valid outside its issuer's validity")
	}
	if p.IsCA || (p.BasicConstraintsValid && p.MaxPathLen > 0) {
		return errors.New("a proxy may not be a CA")
	}
	if p.KeyUsage&(x509.KeyUsageCertSign|x509.KeyUsageCRLSign) != 0 {
		return errors.New("a proxy may not sign certificates")
	}
	// Subject: the issuer's subject and one more CN.
	var ps, is pkix.RDNSequence
	if _, err := asn1.Unmarshal(p.RawSubject, &ps); err != nil {
		return errors.New("malformed subject")
	}
	if _, err := asn1.Unmarshal(issuer.RawSubject, &is); err != nil {
		return errors.New("malformed issuer subject")
	}
	if len(ps) != len(is)+1 {
		return errors.New("subject is not its issuer's subject plus one CN")
	}
	for i := range is {
		a, _ := asn1.Marshal(pkix.RDNSequence{is[i]})
		b, _ := asn1.Marshal(pkix.RDNSequence{ps[i]})
		if !bytes.Equal(a, b) {
			return errors.New("subject is not its issuer's subject plus one CN")
		}
	}
	if last := ps[len(ps)-1]; len(last) != 1 || !last[0].Type.Equal(oidCN) {
		return errors.New("subject does not end with one CN")
	}
	kind := kindOf(p)
	for _, oid := range p.UnhandledCriticalExtensions {
		if !oid.Equal(oidProxyCertInfo) && !oid.Equal(oidProxyCertInfoDraft) {
			return fmt.Errorf("unhandled critical extension %v", oid)
		}
	}
	if kind == rfcProxy {
		info, err := parseInfo(p)
		if err != nil {
			return err
		}
		lang := info.Language
		if !lang.Equal(oidInheritAll) && !lang.Equal(oidLimitedProxy) {
			// id-ppl-independent and site languages grant something
			// other than the issuer's rights: nothing Kaon can map.
			return fmt.Errorf("proxy policy language %v does not inherit its issuer's rights", lang)
		}
	}
	return nil
}

func parseInfo(p *x509.Certificate) (*proxyCertInfo, error) {
	bad := errors.New("malformed ProxyCertInfo extension")
	for _, e := range p.Extensions {
		if !e.Id.Equal(oidProxyCertInfo) && !e.Id.Equal(oidProxyCertInfoDraft) {
			continue
		}
		var seq asn1.RawValue
		if rest, err := asn1.Unmarshal(e.Value, &seq); err != nil || len(rest) > 0 || seq.Tag != asn1.TagSequence {
			return nil, bad
		}
		info := &proxyCertInfo{PathLen: -1}
		b := seq.Bytes
		var el asn1.RawValue
		var err error
		if b, err = asn1.Unmarshal(b, &el); err != nil {
			return nil, bad
		}
		if el.Class == asn1.ClassUniversal && el.Tag == asn1.TagInteger {
			var n int
			if _, err := asn1.Unmarshal(el.FullBytes, &n); err != nil || n < 0 {
				return nil, bad
			}
			info.PathLen = n
			if b, err = asn1.Unmarshal(b, &el); err != nil {
				return nil, bad
			}
		}
		if len(b) > 0 || el.Tag != asn1.TagSequence {
			return nil, bad
		}
		if _, err := asn1.Unmarshal(el.Bytes, &info.Language); err != nil {
			return nil, bad
		}
		return info, nil
	}
	return nil, errors.New("no ProxyCertInfo extension")
}

// pathLen is a proxy's pCPathLenConstraint (-1: none).
func pathLen(p *x509.Certificate) int {
	info, err := parseInfo(p)
	if err != nil {
		return -1 // legacy proxies carry none
	}
	return info.PathLen
}

// shortNames are the attribute names of OpenSSL's one-line form.
var shortNames = map[string]string{
	"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
	"2.5.4.5": "serialNumber", "2.5.4.4": "SN", "2.5.4.42": "GN", "2.5.4.12": "title",
	"0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
	"1.2.840.113549.1.9.1": "emailAddress",
}

// DN is c's subject in the grid-mapfile form: /DC=org/O=Example/CN=Alice.
func DN(c *x509.Certificate) string {
	var rdns pkix.RDNSequence
	if _, err := asn1.Unmarshal(c.RawSubject, &rdns); err != nil {
		return c.Subject.String()
	}
	var b strings.Builder
	for _, rdn := range rdns {
		for i, atv := range rdn {
			if i == 0 {
				b.WriteByte('/')
			} else {
				b.WriteByte('+')
			}
			name, ok := shortNames[atv.Type.String()]
			if !ok {
				name = atv.Type.String()
			}
			fmt.Fprintf(&b, "%s=%v", name, atv.Value)
		}
	}
	return b.String()
}

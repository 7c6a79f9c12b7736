package x509auth

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// VOMS attributes. A proxy made with voms-proxy-init carries, in an
// extension, attribute certificates (RFC 5755) a VOMS server of the user's
// virtual organisation signed: the FQANs (/atlas/Role=production/...)
// the user holds, for a time. An attribute certificate counts only when
//   - its holder is the chain's end-entity certificate (serial, and issuer
//     or subject name),
//   - it is valid now,
//   - it is signed by the VOMS server certificate it carries, which chains
//     to a CA of the CA directory, and
//   - the VOMS directory vouches for that server for the VO: the file
//     <voms dir>/<vo>/<server host>.lsc lists the server certificate's
//     subject and issuer DNs, one per line (as /etc/grid-security/vomsdir
//     holds them).
// Attribute certificates that do not count are ignored (the proxy is
// still its DN). The FQANs of the ones that do are the principal's, the
// primary first.

var (
	oidVOMSACs     = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 8005, 100, 100, 5}  // the ACs in a proxy
	oidVOMSAttr    = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 8005, 100, 100, 4}  // FQANs (IetfAttrSyntax)
	oidVOMSCertSeq = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 8005, 100, 100, 10} // the server's certificates
)

// DefaultVOMSDir is where grid hosts keep the VOMS servers they trust.
const DefaultVOMSDir = "/etc/grid-security/vomsdir"

type attributeCertificate struct {
	Info acInfo
	Alg  pkix.AlgorithmIdentifier
	Sig  asn1.BitString
}

type acInfo struct {
	Raw        asn1.RawContent
	Version    int
	Holder     asn1.RawValue
	Issuer     asn1.RawValue
	Alg        pkix.AlgorithmIdentifier
	Serial     *big.Int
	Validity   acValidity
	Attributes []acAttribute
	IssuerUID  asn1.BitString   `asn1:"optional"`
	Extensions []pkix.Extension `asn1:"optional"`
}

type acValidity struct {
	NotBefore, NotAfter time.Time `asn1:"generalized"`
}

type acAttribute struct {
	Type   asn1.ObjectIdentifier
	Values []asn1.RawValue `asn1:"set"`
}

type ietfAttrSyntax struct {
	Authority asn1.RawValue   `asn1:"optional,tag:0"`
	Values    []asn1.RawValue // OCTET STRING values: the FQANs
}

// issuerSerial is the holder's baseCertificateID.
type issuerSerial struct {
	Issuer asn1.RawValue // GeneralNames
	Serial *big.Int
}

var acSigAlgs = map[string]x509.SignatureAlgorithm{
	"1.2.840.113549.1.1.5":  x509.SHA1WithRSA,
	"1.2.840.113549.1.1.11": x509.SHA256WithRSA,
	"1.2.840.113549.1.1.12": x509.SHA384WithRSA,
	"1.2.840.113549.1.1.13": x509.SHA512WithRSA,
	"1.2.840.10045.4.3.2":   x509.ECDSAWithSHA256,
	"1.2.840.10045.4.3.3":   x509.ECDSAWithSHA384,
}

// VOMSAttributes returns the FQANs of chain's valid attribute certificates
// (leaf first; ee is the end-entity certificate's index) that the VOMS
// directory vouches for, and why each other one was ignored.
func VOMSAttributes(chain []*x509.Certificate, ee int, roots *x509.CertPool, vomsDir string, now time.Time) (fqans []string, ignored []error) {
	for _, c := range chain[:ee] { // only proxies carry them
		for _, e := range c.Extensions {
			if !e.Id.Equal(oidVOMSACs) {
				continue
			}
			acs, err := parseACs(e.Value)
			if err != nil {
				ignored = append(ignored, err)
				continue
			}
			for _, ac := range acs {
				f, err := checkAC(ac, chain[ee], roots, vomsDir, now)
				if err != nil {
					ignored = append(ignored, err)
					continue
				}
				fqans = append(fqans, f...)
			}
		}
	}
	return fqans, ignored
}

// parseACs reads the extension: SEQUENCE OF (SEQUENCE OF AttributeCertificate).
func parseACs(b []byte) ([]*attributeCertificate, error) {
	bad := errors.New("VOMS: malformed attribute certificates")
	var outer []asn1.RawValue
	if rest, err := asn1.Unmarshal(b, &outer); err != nil || len(rest) > 0 {
		return nil, bad
	}
	var out []*attributeCertificate
	for _, seq := range outer {
		var acs []asn1.RawValue
		if _, err := asn1.Unmarshal(seq.FullBytes, &acs); err != nil {
			return nil, bad
		}
		for _, raw := range acs {
			ac := new(attributeCertificate)
			if rest, err := asn1.Unmarshal(raw.FullBytes, ac); err != nil || len(rest) > 0 {
				return nil, bad
			}
			out = append(out, ac)
		}
	}
	return out, nil
}

func checkAC(ac *attributeCertificate, ee *x509.Certificate, roots *x509.CertPool, vomsDir string, now time.Time) ([]string, error) {
	info := &ac.Info
	// Holder: [0] IssuerSerial of the end-entity certificate.
	var hs issuerSerial
	if _, err := asn1.UnmarshalWithParams(info.Holder.Bytes, &hs, "tag:0"); err != nil || hs.Serial == nil {
		return nil, errors.New("VOMS: attribute certificate without a holder")
	}
	// One directoryName, naming the certificate's issuer or (as VOMS
	// servers write it) its subject.
	var names []asn1.RawValue
	if _, err := asn1.Unmarshal(hs.Issuer.FullBytes, &names); err != nil || len(names) != 1 || names[0].Tag != 4 ||
		hs.Serial.Cmp(ee.SerialNumber) != 0 || !bytes.Equal(names[0].Bytes, ee.RawIssuer) && !bytes.Equal(names[0].Bytes, ee.RawSubject) {
		return nil, errors.New("VOMS: the attribute certificate is another certificate's")
	}
	if now.Before(info.Validity.NotBefore) || now.After(info.Validity.NotAfter) {
		return nil, fmt.Errorf("VOMS: attribute certificate not valid now (valid %s to %s)",
			info.Validity.NotBefore.UTC().Format(time.RFC3339), info.Validity.NotAfter.UTC().Format(time.RFC3339))
	}
	// The FQANs and the VO they belong to ("vo://host:port").
	var fqans []string
	vo := ""
	for _, a := range info.Attributes {
		if !a.Type.Equal(oidVOMSAttr) {
			continue
		}
		for _, v := range a.Values {
			var ias ietfAttrSyntax
			if _, err := asn1.Unmarshal(v.FullBytes, &ias); err != nil {
				return nil, errors.New("VOMS: malformed attributes")
			}
			if len(ias.Authority.Bytes) > 0 {
				var uri asn1.RawValue // GeneralName uniformResourceIdentifier [6]
				if _, err := asn1.Unmarshal(ias.Authority.Bytes, &uri); err == nil {
					vo, _, _ = strings.Cut(string(uri.Bytes), "://")
				}
			}
			for _, f := range ias.Values {
				fqans = append(fqans, string(f.Bytes))
			}
		}
	}
	if vo == "" || strings.ContainsAny(vo, "/\\") || vo == "." || vo == ".." {
		return nil, errors.New("VOMS: attribute certificate without its VO")
	}
	// The server's certificate, carried in the AC.
	var server *x509.Certificate
	for _, e := range info.Extensions {
		if !e.Id.Equal(oidVOMSCertSeq) {
			continue
		}
		var outer asn1.RawValue
		if _, err := asn1.Unmarshal(e.Value, &outer); err != nil {
			break
		}
		var certs []asn1.RawValue
		if _, err := asn1.Unmarshal(outer.Bytes, &certs); err != nil {
			// a flat SEQUENCE OF Certificate
			certs = []asn1.RawValue{{FullBytes: outer.Bytes}}
		}
		for _, c := range certs {
			if cert, err := x509.ParseCertificate(c.FullBytes); err == nil {
				server = cert
				break
			}
		}
	}
	if server == nil {
		return nil, fmt.Errorf("VOMS %s: the attribute certificate carries no server certificate", vo)
	}
	if _, err := server.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("VOMS %s: server certificate %s: %v", vo, DN(server), err)
	}
	alg, ok := acSigAlgs[ac.Alg.Algorithm.String()]
	if !ok {
		return nil, fmt.Errorf("VOMS %s: signature algorithm %v not supported", vo, ac.Alg.Algorithm)
	}
	if err := server.CheckSignature(alg, info.Raw, ac.Sig.RightAlign()); err != nil {
		return nil, fmt.Errorf("VOMS %s: attribute certificate not signed by %s", vo, DN(server))
	}
	if err := vouched(vomsDir, vo, server); err != nil {
		return nil, err
	}
	return fqans, nil
}

// vouched checks that the VOMS directory lists server for vo: an .lsc
// file of the VO naming its subject then its issuer.
func vouched(dir, vo string, server *x509.Certificate) error {
	files, _ := filepath.Glob(filepath.Join(dir, vo, "*.lsc"))
	for _, f := range files {
		lines, err := readLSC(f)
		if err == nil && len(lines) >= 2 && lines[0] == DN(server) && lines[1] == issuerDN(server) {
			return nil
		}
	}
	return fmt.Errorf("VOMS %s: %s vouches for no server %s", vo, filepath.Join(dir, vo), DN(server))
}

func readLSC(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && l[0] != '#' {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}

// issuerDN is c's issuer in the grid-mapfile form.
func issuerDN(c *x509.Certificate) string {
	return DN(&x509.Certificate{RawSubject: c.RawIssuer})
}

// matchFQAN reports whether a voms-mapfile pattern names fqan: the same
// group and role (a "/Role=NULL" or "/Capability=NULL" part counts as
// absent), or, for a pattern ending in "/*", any FQAN below its group.
func matchFQAN(pattern, fqan string) bool {
	norm := func(s string) string {
		s = strings.TrimSuffix(s, "/Capability=NULL")
		return strings.TrimSuffix(s, "/Role=NULL")
	}
	if g, ok := strings.CutSuffix(pattern, "/*"); ok {
		return norm(fqan) == g || strings.HasPrefix(fqan, g+"/")
	}
	return norm(pattern) == norm(fqan)
}

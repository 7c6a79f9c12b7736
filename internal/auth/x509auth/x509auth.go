// Package x509auth authenticates clients by the certificate chain they sent
// in the TLS handshake, as grid clients do: an end-entity certificate
// issued by a CA of a CA directory (OpenSSL's hashed layout), optionally
// followed by RFC 3820 proxy certificates (X509_USER_PROXY), the subject
// DN mapped to a local user by a grid-mapfile.
//
// crypto/x509 verifies the end-entity chain; proxies are checked here, one
// by one from the end-entity down (proxy.go): signed by their predecessor,
// subject = issuer's subject + one CN, validity inside the issuer's, not a
// CA, no certificate signing, a policy language that inherits the issuer's
// rights, path length constraints. A chain that fails any check refuses
// the request (a client that sent a bad certificate is not quietly
// anonymous), and so does a valid chain whose DN the grid-mapfile does
// not name: a DN removed from it is how a site revokes a user.
//
// Certificates a CRL of the CA directory revokes (<hash>.r0, as fetch-crl
// writes them, signed by their CA) are refused.
//
// The same method authenticates HTTPS client certificates (the TLS
// handshake proved the key) and root://'s gsi logins (the gsi handshake
// did, xrootd/gsi).
package x509auth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/tlsconf"
)

// DefaultGridMapfile is where grid hosts keep the DN → user map.
const DefaultGridMapfile = "/etc/grid-security/grid-mapfile"

// reloadEvery is how often the CA directory (CAs and their CRLs) is read
// again (both change while a server runs; fetch-crl updates CRLs). The grid-mapfile is looked at on every
// authentication (one stat): a DN removed from it is refused at once.
const reloadEvery = time.Minute

// X509 is the x509 authentication method.
type X509 struct {
	CADir   string
	GridMap string
	// VOMSDir holds the VOMS servers trusted per VO (voms.go; "": none,
	// VOMS attributes are not read). VOMSMap, when set, is a voms-mapfile:
	// lines `"FQAN" user` (a pattern "/vo/group/*" names every FQAN below
	// the group); the first line naming one of a proxy's FQANs, the
	// primary first, maps it, before the grid-mapfile is asked.
	VOMSDir string
	VOMSMap string
	Now     func() time.Time // tests

	mu       sync.Mutex
	loaded   time.Time
	roots    *x509.CertPool
	gridmap  map[string]string
	mapStamp time.Time
	mapSize  int64
	revoked  map[string]bool // issuer DER + serial of certificates CRLs revoke
	vomsmap  [][2]string
	vStamp   time.Time
	vSize    int64
}

var _ auth.Authenticator = (*X509)(nil)

// New returns the method with its CA directory and grid-mapfile loaded
// (an unreadable CA directory or grid-mapfile is an error at start).
func New(caDir, gridmap string) (*X509, error) {
	x := &X509{CADir: caDir, GridMap: gridmap}
	if _, _, err := x.state(); err != nil {
		return nil, err
	}
	return x, nil
}

func (x *X509) now() time.Time {
	if x.Now != nil {
		return x.Now()
	}
	return time.Now()
}

// state returns the CA pool and grid-mapfile, reloading them when due. A
// CA directory or grid-mapfile that cannot be read keeps the last good
// one.
func (x *X509) state() (*x509.CertPool, map[string]string, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.roots == nil || time.Since(x.loaded) >= reloadEvery {
		cas, err := tlsconf.ReadCADir(x.CADir)
		if err == nil && len(cas) == 0 {
			err = fmt.Errorf("no CA certificate in %s", x.CADir)
		}
		switch {
		case err == nil:
			pool := x509.NewCertPool()
			for _, c := range cas {
				pool.AddCert(c)
			}
			x.roots, x.revoked, x.loaded = pool, readCRLs(x.CADir, cas), time.Now()
		case x.roots == nil:
			return nil, nil, fmt.Errorf("x509: %w", err)
		}
	}
	st, err := os.Stat(x.GridMap)
	if err != nil {
		if x.gridmap != nil {
			return x.roots, x.gridmap, nil
		}
		return nil, nil, fmt.Errorf("x509: grid-mapfile: %w", err)
	}
	if x.gridmap == nil || !st.ModTime().Equal(x.mapStamp) || st.Size() != x.mapSize {
		m, err := ReadGridMapfile(x.GridMap)
		if err != nil {
			if x.gridmap != nil {
				return x.roots, x.gridmap, nil
			}
			return nil, nil, err
		}
		x.gridmap, x.mapStamp, x.mapSize = m, st.ModTime(), st.Size()
	}
	return x.roots, x.gridmap, nil
}

// vomsRules returns the voms-mapfile's lines, read again when it changed
// (nil without one; the last good ones when it cannot be read).
func (x *X509) vomsRules() [][2]string {
	if x.VOMSMap == "" {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	st, err := os.Stat(x.VOMSMap)
	if err != nil || (x.vomsmap != nil && st.ModTime().Equal(x.vStamp) && st.Size() == x.vSize) {
		return x.vomsmap
	}
	if rules, err := readMapLines(x.VOMSMap); err == nil {
		x.vomsmap, x.vStamp, x.vSize = rules, st.ModTime(), st.Size()
	}
	return x.vomsmap
}

// readCRLs reads the CRLs of a CA directory (<hash>.r<n>, PEM or DER, as
// fetch-crl writes them): the certificates they revoke, from each CRL
// whose signature its CA's key verifies (others are ignored). A CRL past
// its next update still counts: what it revokes stays revoked.
func readCRLs(dir string, cas []*x509.Certificate) map[string]bool {
	files, _ := filepath.Glob(filepath.Join(dir, "*.r[0-9]*"))
	revoked := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if blk, _ := pem.Decode(b); blk != nil {
			b = blk.Bytes
		}
		crl, err := x509.ParseRevocationList(b)
		if err != nil {
			continue
		}
		for _, ca := range cas {
			if bytes.Equal(ca.RawSubject, crl.RawIssuer) && crl.CheckSignatureFrom(ca) == nil {
				for _, e := range crl.RevokedCertificateEntries {
					revoked[string(crl.RawIssuer)+"#"+e.SerialNumber.String()] = true
				}
				break
			}
		}
	}
	return revoked
}

// checkRevoked refuses a chain (from the end-entity up) with a
// certificate a CRL revokes.
func (x *X509) checkRevoked(chain []*x509.Certificate) error {
	x.mu.Lock()
	revoked := x.revoked
	x.mu.Unlock()
	for _, c := range chain {
		if revoked[string(c.RawIssuer)+"#"+c.SerialNumber.String()] {
			return fmt.Errorf("%s (serial %s) is revoked by its CA's CRL", DN(c), c.SerialNumber)
		}
	}
	return nil
}

// Authenticate implements auth.Authenticator: it applies to requests
// carrying a client certificate chain.
func (x *X509) Authenticate(_ context.Context, r *auth.Request) (auth.Principal, bool, error) {
	if len(r.Certs) == 0 {
		return auth.Nobody, false, nil
	}
	roots, gridmap, err := x.state()
	if err != nil {
		return auth.Nobody, true, kerr.Wrap(kerr.Internal, "authenticate", "", err)
	}
	now := x.now()
	dn, ee, err := verifyChain(r.Certs, roots, now)
	if err == nil {
		err = x.checkRevoked(r.Certs[ee:])
	}
	if err != nil {
		return auth.Nobody, true, kerr.New(kerr.Permission, "authenticate", "", "client certificate refused: "+err.Error())
	}
	var fqans []string
	var ignored []error
	if x.VOMSDir != "" {
		fqans, ignored = VOMSAttributes(r.Certs, ee, roots, x.VOMSDir, now)
	}
	name, by := "", "grid-mapfile"
	for _, f := range fqans {
		for _, rule := range x.vomsRules() {
			if name == "" && matchFQAN(rule[0], f) {
				name, by = rule[1], "voms-mapfile ("+f+")"
			}
		}
	}
	if name == "" {
		var ok bool
		if name, ok = gridmap[dn]; !ok {
			msg := "client certificate refused: " + dn + " is not in the grid-mapfile"
			if x.VOMSMap != "" {
				msg += " and the voms-mapfile names none of its VOMS attributes " + fmt.Sprint(fqans)
			}
			if len(ignored) > 0 {
				msg += " (VOMS attributes ignored: " + errors.Join(ignored...).Error() + ")"
			}
			return auth.Nobody, true, kerr.New(kerr.Permission, "authenticate", "", msg)
		}
	}
	p, err := localUser(name)
	if err != nil {
		return auth.Nobody, true, kerr.New(kerr.Permission, "authenticate", "", fmt.Sprintf("%s maps %q to %q: %v", by, dn, name, err))
	}
	p.FQANs = fqans
	if by == "grid-mapfile" {
		p.DN = dn
	}
	return p, true, nil
}

// CheckDN says why the grid-mapfile, as it is now, no longer maps dn to
// user (nil: it still does): a macaroon minted by dn dies with its line
// (macaroon.Service.CheckDN).
func (x *X509) CheckDN(dn, user string) error {
	_, gridmap, err := x.state()
	if err != nil {
		return err
	}
	switch name, ok := gridmap[dn]; {
	case !ok:
		return fmt.Errorf("its minter %s is no longer in the grid-mapfile", dn)
	case name != user:
		return fmt.Errorf("the grid-mapfile now maps its minter %s to %q, not %q", dn, name, user)
	}
	return nil
}

// localUser is the principal of a local account; the superuser is never
// reached through a certificate (administration stays with local root).
func localUser(name string) (auth.Principal, error) {
	return auth.LocalAccount(name, "x509", "a certificate")
}

// ReadGridMapfile reads a grid-mapfile: lines `"DN" user[,user...]`
// (the first user counts), # comments, blank lines.
func ReadGridMapfile(path string) (map[string]string, error) {
	lines, err := readMapLines(path)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, l := range lines {
		if _, dup := m[l[0]]; !dup {
			m[l[0]] = l[1]
		}
	}
	return m, nil
}

// readMapLines reads a grid-mapfile or voms-mapfile, in order: lines
// `"KEY" user[,user...]` or `KEY user` (the first user counts).
func readMapLines(path string) ([][2]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("x509: %w", err)
	}
	defer f.Close()
	var out [][2]string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		var key, rest string
		if line[0] == '"' {
			end := strings.IndexByte(line[1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("x509: %s line %d: unterminated quote", path, n)
			}
			key, rest = line[1:1+end], line[2+end:]
		} else {
			i := strings.IndexAny(line, " \t")
			if i < 0 {
				return nil, fmt.Errorf("x509: %s line %d: no user", path, n)
			}
			key, rest = line[:i], line[i:]
		}
		users := strings.Split(strings.TrimSpace(rest), ",")
		if users[0] == "" {
			return nil, fmt.Errorf("x509: %s line %d: no user for %q", path, n, key)
		}
		out = append(out, [2]string{key, strings.TrimSpace(users[0])})
	}
	return out, sc.Err()
}

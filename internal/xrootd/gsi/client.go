package gsi

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kaon-storage/kaon/internal/tlsconf"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// Credential is what a client authenticates with: a certificate chain
// (leaf first: a proxy and the certificates above it, or a certificate
// alone) and the leaf's key.
type Credential struct {
	Chain []*x509.Certificate
	Key   *rsa.PrivateKey
}

// LoadCredential reads a credential from PEM files: a proxy file
// (X509_USER_PROXY: certificate, key, chain) gives the same name twice; a
// certificate and its key give two.
func LoadCredential(certFile, keyFile string) (*Credential, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("gsi: %w", err)
	}
	kb := cb
	if keyFile != certFile {
		if kb, err = os.ReadFile(keyFile); err != nil {
			return nil, fmt.Errorf("gsi: %w", err)
		}
	}
	chain, err := parseCerts(cb)
	if err != nil || len(chain) == 0 {
		return nil, fmt.Errorf("gsi: %s: no certificate", certFile)
	}
	var key *rsa.PrivateKey
	for rest := kb; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		switch blk.Type {
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
		case "PRIVATE KEY":
			var k any
			if k, err = x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
				var ok bool
				if key, ok = k.(*rsa.PrivateKey); !ok {
					err = errors.New("not an RSA key (gsi signs with RSA)")
				}
			}
		default:
			continue
		}
		break
	}
	if key == nil || err != nil {
		return nil, fmt.Errorf("gsi: %s: no usable private key (%v)", keyFile, err)
	}
	if pub, ok := chain[0].PublicKey.(*rsa.PublicKey); !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("gsi: %s: the key is not the certificate's", keyFile)
	}
	return &Credential{Chain: chain, Key: key}, nil
}

// Client authenticates to gsi servers with a credential.
type Client struct {
	Cred  *Credential
	Roots *x509.CertPool   // the CAs a server's host certificate must chain to
	Now   func() time.Time // tests
}

// ClientExchange is one login's handshake from the client's side.
type ClientExchange struct {
	c      *Client
	host   string
	vers   int
	padded bool
	step   int
	tag    []byte
	sc     *sessionCipher
}

// Start begins the handshake with a server offering gsi with params
// (from the login response) at host (its certificate must name it); it
// returns the first credentials (kXGC_certreq) to send.
func (c *Client) Start(params, host string) (*ClientExchange, []byte, error) {
	x := &ClientExchange{c: c, host: host, vers: Version}
	mods := ""
	for _, p := range strings.Split(params, ",") {
		k, v, _ := strings.Cut(p, ":")
		switch k {
		case "v":
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, nil, fmt.Errorf("gsi: server version %q", v)
			}
			x.vers = n
		case "c":
			mods = v
		}
	}
	if x.vers < versionDHSigned {
		return nil, nil, fmt.Errorf("gsi: server version %d is older than %d", x.vers, versionDHSigned)
	}
	for _, m := range strings.Split(mods, "|") {
		if m == "ssl" || m == "sslnopad" {
			x.padded = m == "ssl"
			mods = "ssl"
			if !x.padded {
				mods = "sslnopad"
			}
			break
		}
	}
	if mods != "ssl" && mods != "sslnopad" {
		return nil, nil, fmt.Errorf("gsi: server crypto modules %q: ssl wanted", mods)
	}
	var err error
	if x.tag, err = randomTag(); err != nil {
		return nil, nil, err
	}
	chain := c.Cred.Chain
	top := chain[len(chain)-1]
	ih, err := tlsconf.NameHash(top.RawIssuer)
	if err != nil {
		return nil, nil, err
	}
	opts := int32(0)
	if len(chain) > 1 {
		opts = optCreatePxy
	}
	inner := &buffer{proto: "gsi", step: stepCertReq}
	inner.add(bkRandomTag, x.tag)
	out := &buffer{proto: "gsi", step: stepCertReq}
	out.add(bkCryptoMod, []byte(mods))
	out.setInt32(bkVersion, Version)
	out.add(bkIssuerHash, []byte(ih))
	out.setInt32(bkClientOpts, opts)
	out.add(bkMain, inner.marshal())
	return x, out.marshal(), nil
}

// Next takes a kXR_authmore answer and returns the next credentials.
func (x *ClientExchange) Next(more []byte) ([]byte, error) {
	in, err := parseBuffer(more)
	if err != nil || in.proto != "gsi" {
		return nil, errors.New("gsi: malformed server answer")
	}
	switch {
	case in.step == stepSrvCert && x.step == 0:
		x.step = 1
		return x.cert(in)
	case in.step == stepPxyReq && x.step == 1:
		x.step = 2
		return x.refuseDelegation(in)
	}
	return nil, fmt.Errorf("gsi: unexpected server step %d", in.step)
}

// cert checks the server (host certificate, signatures) and sends the
// client's chain (kXGC_cert).
func (x *ClientExchange) cert(in *buffer) ([]byte, error) {
	now := time.Now()
	if x.c.Now != nil {
		now = x.c.Now()
	}
	algs, _ := in.get(bkCipherAlg)
	if !strings.Contains(":"+string(algs)+":", ":"+cipherName+":") {
		return nil, fmt.Errorf("gsi: the server offers no common cipher (%q)", algs)
	}
	certB, err := in.need(bkX509, "server certificate")
	if err != nil {
		return nil, fmt.Errorf("gsi: %w", err)
	}
	certs, err := parseCerts(certB)
	if err != nil || len(certs) != 1 {
		return nil, errors.New("gsi: the server did not send one host certificate")
	}
	hc := certs[0]
	if _, err := hc.Verify(x509.VerifyOptions{Roots: x.c.Roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("gsi: server certificate: %w", err)
	}
	if err := hc.VerifyHostname(x.host); err != nil {
		return nil, fmt.Errorf("gsi: server certificate: %w", err)
	}
	spub, ok := hc.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("gsi: the server's certificate has no RSA key")
	}
	signed, err := in.need(bkCipher, "server DH parameters")
	if err != nil {
		return nil, fmt.Errorf("gsi: %w", err)
	}
	dhPub, err := rsaRecover(spub, signed)
	if err != nil {
		return nil, errors.New("gsi: the server's DH parameters are not signed by its host key")
	}
	params, y, err := parseDHPublic(dhPub)
	if err != nil || params == nil {
		return nil, fmt.Errorf("gsi: server DH parameters: %v", err)
	}
	if err := checkGroup(params); err != nil {
		return nil, err
	}
	mainB, err := in.need(bkMain, "main buffer")
	if err != nil {
		return nil, fmt.Errorf("gsi: %w", err)
	}
	inner, err := parseBuffer(mainB)
	if err != nil {
		return nil, errors.New("gsi: malformed server answer")
	}
	st, _ := inner.get(bkSignedTag)
	if t, err := rsaRecover(spub, st); err != nil || !sameTag(t, x.tag) {
		return nil, errors.New("gsi: the server did not sign the client's challenge with its host key")
	}
	stag, _ := inner.get(bkRandomTag)
	my, err := newDHKey(params.P, params.G)
	if err != nil {
		return nil, err
	}
	secret, err := my.shared(y, x.padded)
	if err != nil {
		return nil, fmt.Errorf("gsi: %w", err)
	}
	if x.sc, err = newSessionCipher(secret); err != nil {
		return nil, err
	}
	key := x.c.Cred.Key
	mySigned, err := rsaSign(key, my.public(encodeParams(params)))
	if err != nil {
		return nil, err
	}
	chain := x.c.Cred.Chain
	if n := len(chain); n > 1 && chain[n-1].IsCA {
		chain = chain[:n-1] // CAs are not sent
	}
	inr := &buffer{proto: "gsi", step: stepCert}
	inr.add(bkX509, certsPEM(chain))
	if len(stag) > 0 {
		sig, err := rsaSign(key, stag)
		if err != nil {
			return nil, err
		}
		inr.add(bkSignedTag, sig)
	}
	if x.tag, err = randomTag(); err != nil {
		return nil, err
	}
	inr.add(bkRandomTag, x.tag)
	enc, err := x.sc.encrypt(inr.marshal())
	if err != nil {
		return nil, err
	}
	// The digest is only named (gsi uses it to sign requests, which
	// Kaon does not ask for): the first of the server's list known.
	md := "sha256"
	if mds, ok := in.get(bkMDAlg); ok {
		for _, m := range strings.Split(string(mds), ":") {
			if m == "sha256" || m == "sha1" || m == "md5" {
				md = m
				break
			}
		}
	}
	mods, _ := in.get(bkCryptoMod)
	out := &buffer{proto: "gsi", step: stepCert}
	out.add(bkCryptoMod, mods)
	out.add(bkCipherAlg, []byte(cipherName+"#"+strconv.Itoa(ivLen)))
	out.add(bkMDAlg, []byte(md))
	out.add(bkCipher, mySigned)
	out.add(bkPublicKey, publicKeyPEM(&key.PublicKey))
	out.add(bkMain, enc)
	return out.marshal(), nil
}

// refuseDelegation answers a server's proxy request (kXGS_pxyreq): this
// client never signs one (kXGC_sigpxy with a message).
func (x *ClientExchange) refuseDelegation(in *buffer) ([]byte, error) {
	mainB, err := in.need(bkMain, "main buffer")
	if err != nil {
		return nil, fmt.Errorf("gsi: %w", err)
	}
	plain, err := x.sc.decrypt(mainB)
	if err != nil {
		return nil, fmt.Errorf("gsi: %w", err)
	}
	inner, err := parseBuffer(plain)
	if err != nil {
		return nil, errors.New("gsi: malformed server answer")
	}
	inr := &buffer{proto: "gsi", step: stepSigPxy}
	inr.add(bkMessage, []byte("Not allowed to sign proxy requests"))
	if t, ok := inner.get(bkRandomTag); ok {
		sig, err := rsaSign(x.c.Cred.Key, t)
		if err != nil {
			return nil, err
		}
		inr.add(bkSignedTag, sig)
	}
	enc, err := x.sc.encrypt(inr.marshal())
	if err != nil {
		return nil, err
	}
	out := &buffer{proto: "gsi", step: stepSigPxy}
	out.add(bkMain, enc)
	return out.marshal(), nil
}

// checkGroup accepts RFC 7919's group or a safe prime of 512 bits or more
// (xrootd 5.5 servers make a 512-bit group at start).
func checkGroup(p *dhParams) error {
	if p.P.Cmp(dhP) == 0 && p.G.Cmp(dhG) == 0 {
		return nil
	}
	q := new(big.Int).Rsh(p.P, 1)
	if p.P.BitLen() < 512 || p.G.Cmp(big.NewInt(1)) <= 0 || p.G.Cmp(p.P) >= 0 ||
		!p.P.ProbablyPrime(20) || !q.ProbablyPrime(20) {
		return errors.New("gsi: the server's DH group is not a safe prime of 512 bits or more")
	}
	return nil
}

var _ xrootd.ClientAuth = (*Client)(nil)

// Name implements xrootd.ClientAuth.
func (c *Client) Name() string { return "gsi" }

// Begin implements xrootd.ClientAuth.
func (c *Client) Begin(params, host string) (xrootd.ClientAuthExchange, []byte, error) {
	return c.Start(params, host)
}

// Package gsi is XRootD's "gsi" security protocol (XrdSecgsi): grid
// clients (xrdcp, xrdfs, the Python bindings, gfal) prove they hold the
// key of an X.509 certificate or RFC 3820 proxy, the way xrootd servers
// have asked them since XRootD 3. The server half is an xrootd.SecProtocol;
// the client half (client.go) is what Kaon's own root:// client
// authenticates with.
//
// The handshake, as the xrootd 5 client runs it (version 10600; the
// format of every message is buffer.go's, the cryptography crypto.go's):
//
//  1. login: the server offers "&P=gsi,v:10600,c:ssl,ca:<hash of the CA
//     of its host certificate>".
//  2. kXGC_certreq (client): its version, crypto module, issuer hash,
//     options and, in the main bucket, a random tag.
//  3. kXGS_cert (server, kXR_authmore): its DH public part signed with the
//     host key, ciphers, digests, the host certificate, and in the main
//     bucket the client's tag signed with the host key and a tag of its
//     own. The client checks the host certificate (CA, host name) and
//     both signatures.
//  4. kXGC_cert (client): the chosen cipher, its RSA public key, its DH
//     public part signed with that key, and in the main bucket, encrypted
//     with the session key, its certificate chain (proxy first) and the
//     server's tag signed with its key.
//  5. the server checks that the key that signed the DH part and the tag
//     is the key of the chain's first certificate, and hands the chain to
//     Config.Authenticate (Kaon: x509auth, the same verification and
//     grid-mapfile as HTTPS client certificates). kXR_ok.
//
// The server never asks for a delegated proxy (kXGS_pxyreq): Kaon acts on
// a client's behalf with capabilities, never with the client's
// credentials. Only clients of version 10400 (2016) and later are
// served: older ones neither sign their DH part nor use an IV.
package gsi

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kaon-storage/kaon/internal/tlsconf"
	"github.com/kaon-storage/kaon/internal/xrootd"
)

// Protocol versions (XrdSecProtocolgsi.hh).
const (
	Version         = 10600 // XrdSecgsiVERSION
	versionDHSigned = 10400 // DH parts signed, IVs in encrypted buckets
)

// Steps.
const (
	stepCertReq = 1000 // kXGC_certreq
	stepCert    = 1001 // kXGC_cert
	stepSigPxy  = 1002 // kXGC_sigpxy
	stepSrvCert = 2001 // kXGS_cert
	stepPxyReq  = 2002 // kXGS_pxyreq
)

// Client options (kOpts*).
const (
	optCreatePxy = 128 // the client authenticates with a proxy, not its certificate alone
)

const (
	cipherName = "aes-128-cbc"
	mdNames    = "sha256:sha1"
	// handshakeTimeout bounds a login's exchange (XrdSecgsi's TimeSkew).
	handshakeTimeout = 5 * time.Minute
	// dhLifetime is how long the server's DH key pair (and its signed
	// public part) serves new logins before a new one is made: docs/DESIGN-NOTES.md.
	dhLifetime = time.Minute
)

// Config is the server side's setup.
type Config struct {
	Cert *x509.Certificate // the host certificate
	Key  *rsa.PrivateKey   // its key (gsi signs with RSA)
	// Authenticate says who a client is, given its certificate chain
	// (leaf first), whose first key the client has proven it holds; an
	// error refuses the client with its message.
	Authenticate func(ctx context.Context, p xrootd.Peer, chain []*x509.Certificate) (xrootd.Identity, error)
	Now          func() time.Time // tests
}

// Server is the gsi protocol of a server.
type Server struct {
	cfg     Config
	params  string
	certPEM []byte

	mu sync.Mutex
	dh *signedDH
}

// signedDH is a DH key pair and its public part signed with the host key.
type signedDH struct {
	key    *dhKey
	signed []byte
	made   time.Time
}

var _ xrootd.SecProtocol = (*Server)(nil)

// NewServer checks cfg and returns the protocol.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Cert == nil || cfg.Key == nil || cfg.Authenticate == nil {
		return nil, errors.New("gsi: a host certificate, its key and an authenticator are needed")
	}
	if pub, ok := cfg.Cert.PublicKey.(*rsa.PublicKey); !ok || !pub.Equal(cfg.Key.Public()) {
		return nil, errors.New("gsi: the host certificate's key is not the RSA key given (gsi signs with RSA: give an RSA host certificate)")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h, err := tlsconf.NameHash(cfg.Cert.RawIssuer)
	if err != nil {
		return nil, fmt.Errorf("gsi: host certificate issuer: %w", err)
	}
	return &Server{cfg: cfg, params: "v:" + strconv.Itoa(Version) + ",c:ssl,ca:" + h + ".0",
		certPEM: certsPEM([]*x509.Certificate{cfg.Cert})}, nil
}

// Name implements xrootd.SecProtocol.
func (s *Server) Name() string { return "gsi" }

// Params implements xrootd.SecProtocol: offered on every connection.
func (s *Server) Params(bool) (string, bool) { return s.params, true }

// Begin implements xrootd.SecProtocol.
func (s *Server) Begin(p xrootd.Peer) xrootd.SecExchange {
	return &exchange{s: s, peer: p, start: s.cfg.Now()}
}

// currentDH returns the DH key pair of this minute, made and signed on
// first use.
func (s *Server) currentDH() (*signedDH, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	if s.dh != nil && now.Sub(s.dh.made) < dhLifetime && !now.Before(s.dh.made) {
		return s.dh, nil
	}
	k, err := newDHKey(dhP, dhG)
	if err != nil {
		return nil, err
	}
	signed, err := rsaSign(s.cfg.Key, k.public(dhParamsPEM))
	if err != nil {
		return nil, err
	}
	s.dh = &signedDH{key: k, signed: signed, made: now}
	return s.dh, nil
}

// exchange is one login's handshake.
type exchange struct {
	s      *Server
	peer   xrootd.Peer
	start  time.Time
	step   int // 0: expecting certreq, 1: expecting cert
	dh     *dhKey
	padded bool
	tag    []byte // the random tag sent, to come back signed
}

var errMalformedCreds = errors.New("malformed credentials")

// Step implements xrootd.SecExchange.
func (e *exchange) Step(ctx context.Context, cred []byte) ([]byte, xrootd.Identity, error) {
	in, err := parseBuffer(cred)
	if err != nil || in.proto != "gsi" {
		return nil, xrootd.Identity{}, errMalformedCreds
	}
	if e.s.cfg.Now().Sub(e.start) > handshakeTimeout {
		return nil, xrootd.Identity{}, fmt.Errorf("handshake not completed within %v", handshakeTimeout)
	}
	switch {
	case in.step == stepCertReq && e.step == 0:
		more, err := e.certReq(in)
		return more, xrootd.Identity{}, err
	case in.step == stepCert && e.step == 1:
		e.step = 2
		return e.cert(ctx, in)
	case in.step == stepSigPxy:
		return nil, xrootd.Identity{}, errors.New("a signed proxy was sent, but none was asked for")
	}
	return nil, xrootd.Identity{}, fmt.Errorf("unexpected step %d", in.step)
}

// certReq answers kXGC_certreq with kXGS_cert.
func (e *exchange) certReq(in *buffer) ([]byte, error) {
	vers, ok := in.int32(bkVersion)
	if !ok {
		vers = Version
	}
	if vers < versionDHSigned {
		return nil, &xrootd.Refusal{Msg: fmt.Sprintf("client gsi version %d is not served (%d or later: xrootd 4.4 and later clients)", vers, versionDHSigned)}
	}
	mods, _ := in.get(bkCryptoMod)
	found := false
	for _, m := range strings.Split(string(mods), "|") {
		if m == "ssl" || m == "sslnopad" {
			found, e.padded = true, m == "ssl"
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("crypto module %q not supported (ssl)", mods)
	}
	mainB, err := in.need(bkMain, "main buffer")
	if err != nil {
		return nil, err
	}
	inner, err := parseBuffer(mainB)
	if err != nil {
		return nil, errMalformedCreds
	}
	dh, err := e.s.currentDH()
	if err != nil {
		return nil, err
	}
	e.dh = dh.key
	if e.tag, err = randomTag(); err != nil {
		return nil, err
	}
	outInner := &buffer{proto: "gsi", step: stepSrvCert}
	if t, ok := inner.get(bkRandomTag); ok {
		sig, err := rsaSign(e.s.cfg.Key, t)
		if err != nil {
			return nil, err
		}
		outInner.add(bkSignedTag, sig)
	}
	outInner.add(bkRandomTag, e.tag)
	out := &buffer{proto: "gsi", step: stepSrvCert}
	out.add(bkCryptoMod, mods)
	out.add(bkCipher, dh.signed)
	out.add(bkCipherAlg, []byte(cipherName))
	out.add(bkMDAlg, []byte(mdNames))
	out.add(bkX509, e.s.certPEM)
	out.add(bkMain, outInner.marshal())
	e.step = 1
	return out.marshal(), nil
}

// cert checks kXGC_cert: the client's key signed its DH part and the
// server's tag, and is the key of the chain's first certificate.
func (e *exchange) cert(ctx context.Context, in *buffer) ([]byte, xrootd.Identity, error) {
	none := xrootd.Identity{}
	alg, _ := in.get(bkCipherAlg)
	name, iv, _ := strings.Cut(string(alg), "#")
	if name != cipherName || (iv != "" && iv != strconv.Itoa(ivLen)) {
		return nil, none, fmt.Errorf("cipher %q not offered (%s#%d)", alg, cipherName, ivLen)
	}
	pubB, err := in.need(bkPublicKey, "client public key")
	if err != nil {
		return nil, none, err
	}
	pub, err := parsePublicKeyPEM(pubB)
	if err != nil {
		return nil, none, err
	}
	signedDH, err := in.need(bkCipher, "client DH parameters")
	if err != nil {
		return nil, none, err
	}
	dhPub, err := rsaRecover(pub, signedDH)
	if err != nil {
		return nil, none, &xrootd.Refusal{Msg: "the client's DH parameters are not signed by the key it sent"}
	}
	_, y, err := parseDHPublic(dhPub)
	if err != nil {
		return nil, none, err
	}
	secret, err := e.dh.shared(y, e.padded)
	if err != nil {
		return nil, none, err
	}
	sc, err := newSessionCipher(secret)
	if err != nil {
		return nil, none, err
	}
	mainB, err := in.need(bkMain, "main buffer")
	if err != nil {
		return nil, none, err
	}
	plain, err := sc.decrypt(mainB)
	if err != nil {
		return nil, none, err
	}
	inner, err := parseBuffer(plain)
	if err != nil {
		return nil, none, errMalformedCreds
	}
	signedTag, err := inner.need(bkSignedTag, "signed random tag")
	if err != nil {
		return nil, none, err
	}
	if t, err := rsaRecover(pub, signedTag); err != nil || !sameTag(t, e.tag) {
		return nil, none, &xrootd.Refusal{Msg: "the client did not sign the server's challenge with the key it sent"}
	}
	certs, err := inner.need(bkX509, "client certificate")
	if err != nil {
		return nil, none, err
	}
	chain, err := parseCerts(certs)
	if err != nil {
		return nil, none, err
	}
	if len(chain) == 0 {
		return nil, none, errors.New("client certificate missing")
	}
	if leaf, ok := chain[0].PublicKey.(*rsa.PublicKey); !ok || !leaf.Equal(pub) {
		return nil, none, &xrootd.Refusal{Msg: "the key that signed the exchange is not the key of the certificate sent"}
	}
	id, err := e.s.cfg.Authenticate(ctx, e.peer, chain)
	if err != nil {
		return nil, none, &xrootd.Refusal{Msg: err.Error()}
	}
	return nil, id, nil
}

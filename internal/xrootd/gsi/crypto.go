package gsi

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/kaon-storage/kaon/internal/tlsconf"
)

// The cryptography of gsi (XrdCryptosslCipher, XrdCryptosslRSA), from the
// wire's point of view:
//
//   - Key agreement: finite-field Diffie-Hellman. Each side sends its
//     "public part": the group as a PEM "DH PARAMETERS" block, then
//     "---BPUB---", its public value in hexadecimal, "---EPUB---"; the
//     client makes its key in the server's group. The shared secret,
//     left-padded to the size of the prime (unless the client's crypto
//     module says "nopad"), gives the session key: its first 16 bytes for
//     aes-128-cbc.
//   - Each side signs its public part with its RSA key ("private
//     encryption": PKCS #1 v1.5 type 1 blocks without a digest, over
//     chunks of k-11 bytes), so the DH exchange is bound to the host
//     certificate and to the client's proxy.
//   - Buckets encrypted with the session key carry a fresh 16-byte IV in
//     front of AES-128-CBC with PKCS #7 padding.
//   - Random tags (8 characters) are challenges the other side returns
//     signed with its RSA key: the client proves it holds the key of the
//     proxy it sent.
//
// xrootd 5.5 makes a 512-bit group at start; Kaon uses RFC 7919's
// ffdhe2048, which OpenSSL recognises by name (its clients check a named
// group's parameters at no cost).

// ffdhe2048 is RFC 7919's 2048-bit group (generator 2).
var dhP, _ = new(big.Int).SetString(
	"FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695A9E13641146433FBCC939DCE249B3EF9"+
		"7D2FE363630C75D8F681B202AEC4617AD3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E7F57C935"+
		"984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797ABC0AB182B324FB61D108A94BB2C8E3FB"+
		"B96ADAB760D7F4681D4F42A3DE394DF4AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F61"+
		"9172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005C58EF1837D1683B2C6F34A26C1B2EFFA"+
		"886B423861285C97FFFFFFFFFFFFFFFF", 16)

var dhG = big.NewInt(2)

// dhExponentBits is the size of private exponents (RFC 7919 asks at
// least 225 for this group).
const dhExponentBits = 256

type dhParams struct{ P, G *big.Int }

// encodeParams is a group as OpenSSL writes it (PEM "DH PARAMETERS").
func encodeParams(p *dhParams) []byte {
	der, err := asn1.Marshal(*p)
	if err != nil {
		panic(err) // two integers always marshal
	}
	return pem.EncodeToMemory(&pem.Block{Type: "DH PARAMETERS", Bytes: der})
}

var dhParamsPEM = encodeParams(&dhParams{dhP, dhG})

// dhKey is one side's key pair in a group.
type dhKey struct {
	p, x, y *big.Int
}

func newDHKey(p, g *big.Int) (*dhKey, error) {
	bits := dhExponentBits
	if p.BitLen()-1 < bits {
		bits = p.BitLen() - 1
	}
	x, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), uint(bits)))
	if err != nil {
		return nil, err
	}
	x.SetBit(x, bits-1, 1) // never small
	return &dhKey{p: p, x: x, y: new(big.Int).Exp(g, x, p)}, nil
}

// public is the key's public part in the wire format.
func (k *dhKey) public(paramsPEM []byte) []byte {
	var b bytes.Buffer
	b.Write(paramsPEM)
	b.WriteString("---BPUB---")
	b.WriteString(strings.ToUpper(k.y.Text(16)))
	b.WriteString("---EPUB---")
	return b.Bytes()
}

// parseDHPublic reads a public part: the group's PEM (nil when absent)
// and the public value.
func parseDHPublic(b []byte) (params *dhParams, y *big.Int, err error) {
	i := bytes.Index(b, []byte("---BPUB---"))
	j := bytes.Index(b, []byte("---EPUB--"))
	if i < 0 || j < i+10 {
		return nil, nil, errors.New("no public value in the DH parameters")
	}
	y, ok := new(big.Int).SetString(string(b[i+10:j]), 16)
	if !ok {
		return nil, nil, errors.New("malformed DH public value")
	}
	if blk, _ := pem.Decode(b[:i]); blk != nil && blk.Type == "DH PARAMETERS" {
		var p dhParams
		if rest, err := asn1.Unmarshal(blk.Bytes, &p); err == nil && len(rest) == 0 && p.P != nil && p.G != nil {
			params = &p
		}
	}
	return params, y, nil
}

// shared is the session key material of k and the peer's public value y:
// the shared secret, left-padded to the prime's size when padded.
func (k *dhKey) shared(y *big.Int, padded bool) ([]byte, error) {
	one := big.NewInt(1)
	pm1 := new(big.Int).Sub(k.p, one)
	if y.Cmp(one) <= 0 || y.Cmp(pm1) >= 0 { // 0, 1, p-1 and beyond: no secret
		return nil, errors.New("DH public value out of range")
	}
	z := new(big.Int).Exp(y, k.x, k.p)
	if padded {
		return z.FillBytes(make([]byte, (k.p.BitLen()+7)/8)), nil
	}
	return z.Bytes(), nil
}

// sessionCipher is the AES-128-CBC session cipher.
type sessionCipher struct{ block cipher.Block }

const ivLen = aes.BlockSize

func newSessionCipher(secret []byte) (*sessionCipher, error) {
	if len(secret) < 16 {
		return nil, errors.New("DH secret too short")
	}
	blk, err := aes.NewCipher(secret[:16])
	if err != nil {
		return nil, err
	}
	return &sessionCipher{blk}, nil
}

// encrypt returns IV || AES-CBC(PKCS#7(b)).
func (c *sessionCipher) encrypt(b []byte) ([]byte, error) {
	pad := aes.BlockSize - len(b)%aes.BlockSize
	out := make([]byte, ivLen+len(b)+pad)
	if _, err := rand.Read(out[:ivLen]); err != nil {
		return nil, err
	}
	copy(out[ivLen:], b)
	for i := ivLen + len(b); i < len(out); i++ {
		out[i] = byte(pad)
	}
	cipher.NewCBCEncrypter(c.block, out[:ivLen]).CryptBlocks(out[ivLen:], out[ivLen:])
	return out, nil
}

var errDecrypt = errors.New("cannot decrypt with the session key")

func (c *sessionCipher) decrypt(b []byte) ([]byte, error) {
	if len(b) < ivLen+aes.BlockSize || (len(b)-ivLen)%aes.BlockSize != 0 {
		return nil, errDecrypt
	}
	out := make([]byte, len(b)-ivLen)
	cipher.NewCBCDecrypter(c.block, b[:ivLen]).CryptBlocks(out, b[ivLen:])
	pad := int(out[len(out)-1])
	if pad == 0 || pad > aes.BlockSize {
		return nil, errDecrypt
	}
	for _, v := range out[len(out)-pad:] {
		if int(v) != pad {
			return nil, errDecrypt
		}
	}
	return out[:len(out)-pad], nil
}

// rsaSign "encrypts" b with the private key as XrdCryptosslRSA does:
// PKCS #1 v1.5 type 1 blocks over chunks of k-11 bytes, no digest.
func rsaSign(key *rsa.PrivateKey, b []byte) ([]byte, error) {
	k := key.Size()
	var out []byte
	for len(b) > 0 {
		n := min(len(b), k-11)
		s, err := rsa.SignPKCS1v15(nil, key, crypto.Hash(0), b[:n])
		if err != nil {
			return nil, err
		}
		out = append(out, s...)
		b = b[n:]
	}
	return out, nil
}

var errSignature = errors.New("signature does not verify")

// rsaRecover undoes rsaSign with the public key (OpenSSL's verify-recover).
func rsaRecover(pub *rsa.PublicKey, b []byte) ([]byte, error) {
	k := pub.Size()
	if len(b) == 0 || len(b)%k != 0 {
		return nil, errSignature
	}
	n, e := pub.N, big.NewInt(int64(pub.E))
	var out []byte
	for ; len(b) > 0; b = b[k:] {
		c := new(big.Int).SetBytes(b[:k])
		if c.Cmp(n) >= 0 {
			return nil, errSignature
		}
		m := new(big.Int).Exp(c, e, n).FillBytes(make([]byte, k))
		// 00 01 FF..FF (at least 8) 00 data
		if m[0] != 0 || m[1] != 1 {
			return nil, errSignature
		}
		i := 2
		for i < k && m[i] == 0xff {
			i++
		}
		if i < 10 || i >= k || m[i] != 0 {
			return nil, errSignature
		}
		out = append(out, m[i+1:]...)
	}
	return out, nil
}

// publicKeyPEM is pub as OpenSSL's PEM_write_bio_PUBKEY writes it.
func publicKeyPEM(pub *rsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err) // an RSA key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// parsePublicKeyPEM reads an RSA public key (PEM "PUBLIC KEY").
func parsePublicKeyPEM(b []byte) (*rsa.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("malformed public key")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("malformed public key: %v", err)
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, errors.New("the public key is not an RSA key (gsi signs with RSA)")
	}
	return rk, nil
}

// parseCerts reads the PEM certificates of b (other blocks, such as a
// private key a client should not have sent, are skipped).
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	certs, err := tlsconf.ParsePEMCerts(b)
	if err != nil {
		return nil, fmt.Errorf("malformed certificate: %v", err)
	}
	return certs, nil
}

// certsPEM writes certificates as PEM, in order.
func certsPEM(certs []*x509.Certificate) []byte {
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return b
}

// tagChars are the characters of random tags (XrdSutRndm, crypt-like).
const tagChars = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func randomTag() ([]byte, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	for i := range b {
		b[i] = tagChars[int(b[i])%len(tagChars)]
	}
	return b, nil
}

// sameTag compares a returned tag with the one sent, in constant time.
func sameTag(got, sent []byte) bool {
	return len(sent) > 0 && subtle.ConstantTimeCompare(got, sent) == 1
}

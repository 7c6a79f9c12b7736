package gsi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The exchange format (XrdSutBuffer): the protocol name and a NUL, the
// step (32 bits, big-endian), then buckets, each a type and a length
// (32 bits each, big-endian) and that many bytes, closed by a type 0.
// Every kXR_auth body and kXR_authmore answer of gsi is one buffer; its
// "main" bucket holds another buffer, encrypted with the session cipher
// once there is one. Integers inside buckets are 32 bits, big-endian.

// Bucket types (XrdSutAux.hh, kXRS_*).
const (
	bkCryptoMod  = 3000 // crypto module(s): "ssl", "ssl:nopad" (the client's DH derivation does not pad)
	bkMain       = 3001 // the inner buffer
	bkPublicKey  = 3004 // the client's RSA public key (PEM)
	bkCipher     = 3005 // DH parameters and public value, signed by its sender
	bkRandomTag  = 3006 // a challenge the other side signs
	bkSignedTag  = 3007 // the other side's challenge, signed
	bkUser       = 3008 // the login name the client wants
	bkMessage    = 3011 // a message for the other side
	bkVersion    = 3014 // protocol version (32 bits)
	bkClientOpts = 3019 // the client's options (32 bits: delegation, proxy)
	bkX509       = 3022 // certificates (PEM)
	bkIssuerHash = 3023 // hashes of the client's issuer CA
	bkX509Req    = 3024 // a proxy certificate request
	bkCipherAlg  = 3025 // cipher(s): the server's list, the client's choice "aes-128-cbc#<iv length>"
	bkMDAlg      = 3026 // message digest(s)
)

// maxBuckets bounds a buffer (a real exchange has fewer than 12).
const maxBuckets = 64

type bucket struct {
	typ  int32
	data []byte
}

// buffer is one XrdSutBuffer.
type buffer struct {
	proto   string
	step    int32
	buckets []bucket
}

var errMalformed = errors.New("malformed buffer")

// parseBuffer reads b; bucket data alias b.
func parseBuffer(b []byte) (*buffer, error) {
	i := 0
	for i < len(b) && i < 8 && b[i] != 0 {
		i++
	}
	if i == 0 || i >= len(b) || b[i] != 0 {
		return nil, errMalformed
	}
	buf := &buffer{proto: string(b[:i])}
	b = b[i+1:]
	if len(b) < 4 {
		return nil, errMalformed
	}
	buf.step = int32(binary.BigEndian.Uint32(b))
	b = b[4:]
	for {
		if len(b) < 4 {
			return nil, errMalformed
		}
		typ := int32(binary.BigEndian.Uint32(b))
		if typ == 0 {
			return buf, nil
		}
		if len(b) < 8 || len(buf.buckets) >= maxBuckets {
			return nil, errMalformed
		}
		n := binary.BigEndian.Uint32(b[4:])
		if uint64(n) > uint64(len(b)-8) {
			return nil, errMalformed
		}
		if typ != 1 { // inactive buckets are skipped
			buf.buckets = append(buf.buckets, bucket{typ, b[8 : 8+n]})
		}
		b = b[8+n:]
	}
}

// get returns the first bucket of type typ.
func (b *buffer) get(typ int32) ([]byte, bool) {
	for _, k := range b.buckets {
		if k.typ == typ {
			return k.data, true
		}
	}
	return nil, false
}

// int32 reads a 32-bit bucket.
func (b *buffer) int32(typ int32) (int32, bool) {
	d, ok := b.get(typ)
	if !ok || len(d) != 4 {
		return 0, false
	}
	return int32(binary.BigEndian.Uint32(d)), true
}

// set replaces the first bucket of type typ, or adds one.
func (b *buffer) set(typ int32, data []byte) {
	for i := range b.buckets {
		if b.buckets[i].typ == typ {
			b.buckets[i].data = data
			return
		}
	}
	b.add(typ, data)
}

func (b *buffer) add(typ int32, data []byte) {
	b.buckets = append(b.buckets, bucket{typ, data})
}

func (b *buffer) setInt32(typ int32, v int32) {
	b.set(typ, binary.BigEndian.AppendUint32(nil, uint32(v)))
}

func (b *buffer) marshal() []byte {
	n := len(b.proto) + 1 + 4 + 4
	for _, k := range b.buckets {
		n += 8 + len(k.data)
	}
	out := make([]byte, 0, n)
	out = append(out, b.proto...)
	out = append(out, 0)
	out = binary.BigEndian.AppendUint32(out, uint32(b.step))
	for _, k := range b.buckets {
		out = binary.BigEndian.AppendUint32(out, uint32(k.typ))
		out = binary.BigEndian.AppendUint32(out, uint32(len(k.data)))
		out = append(out, k.data...)
	}
	return binary.BigEndian.AppendUint32(out, 0)
}

// need returns the bucket of type typ or an error naming what is missing.
func (b *buffer) need(typ int32, what string) ([]byte, error) {
	d, ok := b.get(typ)
	if !ok || len(d) == 0 {
		return nil, fmt.Errorf("%s missing", what)
	}
	return d, nil
}

package tlsconf

import (
	"crypto/sha1"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf16"
)

// SubjectHash is OpenSSL's subject name hash of c (openssl x509 -hash), the
// file name (<hash>.0) under which a CA directory keeps c: the first four
// bytes, little-endian, of the SHA-1 of the name's canonical encoding.
func SubjectHash(c *x509.Certificate) (string, error) {
	h, err := NameHash(c.RawSubject)
	if err != nil {
		return "", fmt.Errorf("tls: subject hash of %s: %w", c.Subject, err)
	}
	return h, nil
}

// NameHash is OpenSSL's hash of a DER Name (SubjectHash of c.RawIssuer
// names the file of c's issuer in a CA directory).
func NameHash(raw []byte) (string, error) {
	canon, err := canonicalName(raw)
	if err != nil {
		return "", err
	}
	sum := sha1.Sum(canon)
	return fmt.Sprintf("%08x", binary.LittleEndian.Uint32(sum[:4])), nil
}

// canonicalName is OpenSSL's canonical encoding of a DER Name: the RDN
// SETs one after the other (no outer SEQUENCE), every string value
// re-encoded as a UTF8String with leading and trailing white space
// removed, inner runs of white space made one space and ASCII lowercased;
// other values as they are.
func canonicalName(raw []byte) ([]byte, error) {
	var rdns []asn1.RawValue
	if rest, err := asn1.Unmarshal(raw, &rdns); err != nil || len(rest) > 0 {
		return nil, fmt.Errorf("malformed name")
	}
	var out []byte
	for _, set := range rdns {
		var atvs []byte
		for b := set.Bytes; len(b) > 0; {
			var atv struct {
				Type  asn1.ObjectIdentifier
				Value asn1.RawValue
			}
			var err error
			if b, err = asn1.Unmarshal(b, &atv); err != nil {
				return nil, fmt.Errorf("malformed name attribute")
			}
			val := atv.Value.FullBytes
			if s, ok := nameString(atv.Value); ok {
				v, err := asn1.Marshal(asn1.RawValue{Tag: asn1.TagUTF8String, Bytes: []byte(canonString(s))})
				if err != nil {
					return nil, err
				}
				val = v
			}
			oid, err := asn1.Marshal(atv.Type)
			if err != nil {
				return nil, err
			}
			seq, err := asn1.Marshal(asn1.RawValue{Tag: asn1.TagSequence, IsCompound: true, Bytes: append(oid, val...)})
			if err != nil {
				return nil, err
			}
			atvs = append(atvs, seq...)
		}
		s, err := asn1.Marshal(asn1.RawValue{Tag: asn1.TagSet, IsCompound: true, Bytes: atvs})
		if err != nil {
			return nil, err
		}
		out = append(out, s...)
	}
	return out, nil
}

// nameString decodes a string-typed name value to UTF-8.
func nameString(v asn1.RawValue) (string, bool) {
	if v.Class != asn1.ClassUniversal {
		return "", false
	}
	switch v.Tag {
	case asn1.TagUTF8String, asn1.TagPrintableString, asn1.TagIA5String, 26 /* VisibleString */ :
		return string(v.Bytes), true
	case asn1.TagT61String: // read as Latin-1, as OpenSSL does
		r := make([]rune, len(v.Bytes))
		for i, c := range v.Bytes {
			r[i] = rune(c)
		}
		return string(r), true
	case asn1.TagBMPString:
		if len(v.Bytes)%2 != 0 {
			return "", false
		}
		u := make([]uint16, len(v.Bytes)/2)
		for i := range u {
			u[i] = binary.BigEndian.Uint16(v.Bytes[2*i:])
		}
		return string(utf16.Decode(u)), true
	case 28: // UniversalString
		if len(v.Bytes)%4 != 0 {
			return "", false
		}
		r := make([]rune, len(v.Bytes)/4)
		for i := range r {
			r[i] = rune(binary.BigEndian.Uint32(v.Bytes[4*i:]))
		}
		return string(r), true
	}
	return "", false
}

func canonString(s string) string {
	isSpace := func(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }
	var b strings.Builder
	space := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isSpace(c) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

package checksum

import (
	"encoding/base64"
	"encoding/hex"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// HTTP digest headers.
//
// RFC 3230 (Want-Digest / Digest) is what XRootD's HTTP server, davix,
// gfal and dCache speak today. Per the IANA digest-algorithm registry,
// ADLER32 and CRC32c values are hex; MD5 and SHA-256 are base64 of the raw
// digest. Algorithm names are case-insensitive. RFC 9530 (Repr-Digest)
// carries every value as a structured-field byte sequence ":base64:";
// ParseDigestHeader reads that form too (remote servers answer in it).

// digestAlg maps an HTTP algorithm token (lowercased) to our type name.
func digestAlg(token string) (string, bool) {
	switch strings.ToLower(strings.TrimSpace(token)) {
	case "adler32", "adler":
		return Adler32, true
	case "crc32c":
		return CRC32C, true
	case "md5":
		return MD5, true
	case "sha-256", "sha256":
		return SHA256, true
	}
	return "", false
}

// httpName is the token we answer with for a type.
var httpName = map[string]string{Adler32: "adler32", CRC32C: "crc32c", MD5: "md5", SHA256: "sha-256"}

// WantedTypes parses a Want-Digest value, a comma list of "alg[;q=x]"
// entries, into our type names, most wanted first; ties keep the header's order, weight 0 means "not wanted"
// and unknown algorithms are skipped.
func WantedTypes(want string) []string {
	type entry struct {
		typ string
		q   float64
	}
	var es []entry
	for _, item := range strings.Split(want, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, q := item, 1.0
		if i := strings.IndexByte(item, ';'); i >= 0 {
			name = item[:i]
			for _, param := range strings.Split(item[i+1:], ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(param), "=")
				if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
					f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
					if err != nil || f < 0 || f > 1 {
						f = 0
					}
					q = f
				}
			}
		}
		if typ, ok := digestAlg(name); ok && q > 0 {
			es = append(es, entry{typ, q})
		}
	}
	sort.SliceStable(es, func(a, b int) bool { return es[a].q > es[b].q })
	out := make([]string, 0, len(es))
	for _, e := range es {
		if !slices.Contains(out, e.typ) {
			out = append(out, e.typ)
		}
	}
	return out
}

// pickWanted returns the most wanted type in want that sums holds.
func pickWanted(want string, sums map[string]string) (string, bool) {
	for _, t := range WantedTypes(want) {
		if _, have := sums[t]; have {
			return t, true
		}
	}
	return "", false
}

// rawSum decodes a hex sum to raw bytes.
func rawSum(hexval string) ([]byte, bool) {
	b, err := hex.DecodeString(hexval)
	return b, err == nil && len(b) > 0
}

// DigestHeaderValue answers an RFC 3230 Want-Digest header: it returns the
// Digest header value for the most wanted supported algorithm among sums
// (our type name -> hex), e.g. "adler32=0a1b2c3d" or "md5=<base64>". It
// returns false when nothing wanted is available.
func DigestHeaderValue(want string, sums map[string]string) (string, bool) {
	typ, ok := pickWanted(want, sums)
	if !ok {
		return "", false
	}
	raw, ok := rawSum(sums[typ])
	if !ok {
		return "", false
	}
	switch typ {
	case Adler32, CRC32C:
		return httpName[typ] + "=" + hex.EncodeToString(raw), true
	default:
		return httpName[typ] + "=" + base64.StdEncoding.EncodeToString(raw), true
	}
}

// ParseDigestHeader parses a Digest (RFC 3230) or Repr-Digest /
// Content-Digest (RFC 9530) header value into lowercase hex keyed by our
// type names. Unknown algorithms and undecodable values are skipped.
// Besides the registered encodings it tolerates hex MD5/SHA-256 values,
// which some servers send.
func ParseDigestHeader(value string) map[string]string {
	out := map[string]string{}
	for _, item := range strings.Split(value, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			continue
		}
		typ, ok := digestAlg(name)
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		var raw []byte
		var err error
		size := map[string]int{Adler32: 4, CRC32C: 4, MD5: 16, SHA256: 32}[typ]
		switch {
		case len(val) >= 2 && val[0] == ':' && val[len(val)-1] == ':':
			raw, err = base64.StdEncoding.DecodeString(val[1 : len(val)-1])
		case typ == Adler32 || typ == CRC32C:
			if len(val) < 8 && len(val) > 0 { // tolerate dropped leading zeros
				val = strings.Repeat("0", 8-len(val)) + val
			}
			raw, err = hex.DecodeString(val)
		case len(val) == 2*size:
			raw, err = hex.DecodeString(val)
		default:
			raw, err = base64.StdEncoding.DecodeString(val)
		}
		if err != nil || len(raw) != size {
			continue
		}
		out[typ] = hex.EncodeToString(raw)
	}
	return out
}

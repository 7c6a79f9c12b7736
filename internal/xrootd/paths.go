package xrootd

import (
	"net/url"
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
)

const (
	maxPathLen = 4096
	maxNameLen = 255
)

// splitPath turns a request path argument ("/a/b?k=v&x=y", possibly NUL
// terminated) into a clean absolute path and its opaque data. Opaque data is
// never part of the name. Any component that is, or decodes to, "." or ".."
// (e.g. "%2e%2e"), or that holds NUL or an encoded '/', is refused, so a path
// can never leave the namespace however a later layer decodes it.
func splitPath(op string, raw []byte) (string, url.Values, error) {
	// Clients send C strings; a trailing NUL (or several) is framing.
	for len(raw) > 0 && raw[len(raw)-1] == 0 {
		raw = raw[:len(raw)-1]
	}
	s := string(raw)
	var opaque string
	if i := strings.IndexByte(s, '?'); i >= 0 {
		s, opaque = s[:i], s[i+1:]
	}
	vals := parseOpaque(opaque)
	if s == "" {
		return "", vals, kerr.New(kerr.Invalid, op, "", "missing path")
	}
	if len(s) > maxPathLen {
		return "", vals, kerr.New(kerr.NameTooLong, op, s[:64]+"...", "path longer than 4096 bytes")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", vals, kerr.New(kerr.Invalid, op, strings.ReplaceAll(s, "\x00", "\\0"), "path contains NUL")
	}
	if s[0] != '/' {
		return "", vals, kerr.New(kerr.Invalid, op, s, "path must be absolute")
	}
	parts := strings.Split(s, "/")
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		if p == "" || p == "." {
			continue
		}
		if len(p) > maxNameLen {
			return "", vals, kerr.New(kerr.NameTooLong, op, s, "path component longer than 255 bytes")
		}
		if p == ".." {
			return "", vals, kerr.New(kerr.Invalid, op, s, "'..' is not allowed in a path")
		}
		if strings.IndexByte(p, '%') >= 0 {
			d := fullyUnescape(p)
			if d == "." || d == ".." || strings.ContainsAny(d, "/\x00") {
				return "", vals, kerr.New(kerr.Invalid, op, s, "encoded '.', '..', '/' or NUL is not allowed in a path")
			}
		}
		for i := 0; i < len(p); i++ {
			if p[i] < 0x20 || p[i] == 0x7f {
				return "", vals, kerr.New(kerr.Invalid, op, s, "control character in path")
			}
		}
		out = append(out, p)
	}
	return "/" + strings.Join(out, "/"), vals, nil
}

// fullyUnescape decodes percent escapes repeatedly (bounded), so double
// encodings such as %252e%252e are seen for what they become.
func fullyUnescape(p string) string {
	for i := 0; i < 4 && strings.IndexByte(p, '%') >= 0; i++ {
		d, err := url.PathUnescape(p)
		if err != nil || d == p {
			break
		}
		p = d
	}
	return p
}

// parseOpaque parses CGI-style opaque data leniently: '&'-separated k=v
// pairs; extra '?' separators are treated like '&'; bad escapes kept raw;
// '+' is not decoded to a space.
func parseOpaque(s string) url.Values {
	v := url.Values{}
	if s == "" {
		return v
	}
	s = strings.ReplaceAll(s, "?", "&")
	for _, kv := range strings.Split(s, "&") {
		if kv == "" {
			continue
		}
		k, val, _ := strings.Cut(kv, "=")
		// PathUnescape keeps '+' (base64 capabilities) intact.
		if uk, err := url.PathUnescape(k); err == nil {
			k = uk
		}
		if uv, err := url.PathUnescape(val); err == nil {
			val = uv
		}
		v.Add(k, val)
	}
	return v
}

// cstring returns b up to its first NUL.
func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

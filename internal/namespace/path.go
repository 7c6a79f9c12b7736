package namespace

import (
	"strings"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// Limits enforced on every path before anything else touches it.
const (
	MaxName = 255
	MaxPath = 4096
)

// CleanPath validates an absolute namespace path and returns its canonical
// form ("/" or "/a/b", no trailing slash). It rejects rather than repairs:
// NUL bytes, relative paths, empty components ("//"), "." and "..", and
// over-long names or paths, so a client can never address something other
// than what it wrote.
func CleanPath(p string) (string, error) {
	if len(p) > MaxPath {
		return "", kerr.New(kerr.NameTooLong, "", p[:64]+"...", "path longer than 4096 bytes")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", kerr.New(kerr.Invalid, "", strings.ReplaceAll(p, "\x00", `\0`), "path contains a NUL byte")
	}
	if !strings.HasPrefix(p, "/") {
		return "", kerr.New(kerr.Invalid, "", p, "path is not absolute")
	}
	if p == "/" {
		return p, nil
	}
	body := strings.TrimSuffix(p[1:], "/")
	if body == "" {
		return "", kerr.New(kerr.Invalid, "", p, "empty path component")
	}
	for _, c := range strings.Split(body, "/") {
		switch {
		case c == "":
			return "", kerr.New(kerr.Invalid, "", p, "empty path component (//)")
		case c == "." || c == "..":
			return "", kerr.New(kerr.Invalid, "", p, "path component "+c+" not allowed")
		case len(c) > MaxName:
			return "", kerr.New(kerr.NameTooLong, "", p, "name longer than 255 bytes")
		}
	}
	return "/" + body, nil
}

// components returns the names of a clean path ("/" has none).
func components(p string) []string {
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}

// IsAncestor reports whether clean path a is b or a parent of b.
func IsAncestor(a, b string) bool {
	return a == b || a == "/" || strings.HasPrefix(b, a+"/")
}

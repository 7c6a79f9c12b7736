package nsapi

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
// form ("/" or "/a/b", no trailing slash). Empty and "." components are
// dropped ("//a/./b" is "/a/b"), as XRootD and POSIX treat them; what could
// address something other than what the client wrote is rejected, not
// repaired: NUL bytes, relative paths, "..", over-long names or paths.
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
	clean := true // fast path: no empty or "." component
	for _, c := range strings.Split(p[1:], "/") {
		switch {
		case c == "" || c == ".":
			clean = false
		case c == "..":
			return "", kerr.New(kerr.Invalid, "", p, "path component .. not allowed")
		case len(c) > MaxName:
			return "", kerr.New(kerr.NameTooLong, "", p, "name longer than 255 bytes")
		}
	}
	if clean {
		return p, nil
	}
	var b strings.Builder
	for _, c := range strings.Split(p[1:], "/") {
		if c != "" && c != "." {
			b.WriteByte('/')
			b.WriteString(c)
		}
	}
	if b.Len() == 0 {
		return "/", nil
	}
	return b.String(), nil
}

// IsAncestor reports whether clean path a is b or a parent of b.
func IsAncestor(a, b string) bool {
	return a == b || a == "/" || strings.HasPrefix(b, a+"/")
}

package nsapi

import (
	"testing"

	"github.com/kaon-storage/kaon/internal/kerr"
)

func mustKind(t *testing.T, err error, k kerr.Kind) {
	t.Helper()
	if kerr.KindOf(err) != k {
		t.Fatalf("got %v (kind %v), want kind %v", err, kerr.KindOf(err), k)
	}
}

func TestCleanPath(t *testing.T) {
	long := make([]byte, 256)
	for i := range long {
		long[i] = 'a'
	}
	cases := map[string]kerr.Kind{
		"/a/../b": kerr.Invalid, "/..": kerr.Invalid, "//a/..//b": kerr.Invalid, "a/b": kerr.Invalid, "": kerr.Invalid,
		"/a\x00b": kerr.Invalid, "/" + string(long): kerr.NameTooLong,
	}
	for p, k := range cases {
		_, err := CleanPath(p)
		mustKind(t, err, k)
	}
	deep := ""
	for len(deep) <= MaxPath {
		deep += "/abcdefgh"
	}
	_, err := CleanPath(deep)
	mustKind(t, err, kerr.NameTooLong)
	// Empty and "." components are dropped, as root:// and POSIX do.
	for in, want := range map[string]string{"/": "/", "/a/b/": "/a/b", "/x": "/x", "//a//b": "/a/b",
		"/a/./b/.": "/a/b", "//": "/", "/./": "/", "/a/...": "/a/..."} {
		if got, err := CleanPath(in); err != nil || got != want {
			t.Fatalf("CleanPath(%q) = %q, %v", in, got, err)
		}
	}
}

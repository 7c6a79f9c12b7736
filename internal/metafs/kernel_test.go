package metafs

import "testing"

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/sw`:                 "/sw",
		`/a\040b\011c`:        "/a b\tc",
		`/back\134slash`:      `/back\slash`,
		`/trailing\04`:        `/trailing\04`,
		`kaon-metafs:/x\040y`: "kaon-metafs:/x y",
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
	if _, ok := KernelMountPid("/"); ok {
		t.Error("a non-metafs mount taken for a kernel-mode metafs")
	}
}

package fusecore

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
	if m, ok := TopMount("/"); !ok || m.FsType == "" {
		t.Errorf("TopMount(/) = %+v, %v: the root is a mountpoint", m, ok)
	}
	if m, ok := TopMount("/proc/self"); ok {
		t.Errorf("TopMount(/proc/self) = %+v: not a mountpoint", m)
	}
}

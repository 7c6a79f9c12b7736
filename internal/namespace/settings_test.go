package namespace

import (
	"testing"

	"github.com/kaon-storage/kaon/internal/kerr"
)

// TestSavedConfigVersions: each save of a name is its next version; a
// name that is a prefix of another keeps its own versions; load takes the
// latest or the version asked for; settings read back what was saved.
func TestSavedConfigVersions(t *testing.T) {
	ns := newNS(t)
	for _, c := range []struct {
		name, v string
		want    uint64
	}{{"a", "a1", 1}, {"ab", "ab1", 1}, {"a", "a2", 2}, {"a", "a3", 3}} {
		v, err := ns.SaveConfig(c.name, []byte(c.v))
		if err != nil || v != c.want {
			t.Fatalf("save %s %s: version %d, %v (want %d)", c.name, c.v, v, err, c.want)
		}
	}
	if c, err := ns.SavedConfig("a", 0); err != nil || c.Version != 3 || string(c.Value) != "a3" {
		t.Errorf("latest of a: %+v %v", c, err)
	}
	if c, err := ns.SavedConfig("a", 2); err != nil || string(c.Value) != "a2" {
		t.Errorf("a version 2: %+v %v", c, err)
	}
	if c, err := ns.SavedConfig("ab", 0); err != nil || c.Version != 1 || string(c.Value) != "ab1" {
		t.Errorf("latest of ab: %+v %v", c, err)
	}
	if _, err := ns.SavedConfig("a", 9); !kerr.Is(err, kerr.NotFound) {
		t.Errorf("a version 9: %v", err)
	}
	all, err := ns.SavedConfigs(false)
	if err != nil || len(all) != 4 || all[0].Name != "a" || all[3].Name != "ab" {
		t.Errorf("all saved: %+v %v", all, err)
	}
	if v, err := ns.Setting("access"); v != nil || err != nil {
		t.Errorf("a setting never saved: %q %v", v, err)
	}
	if err := ns.SaveSetting("access", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if v, err := ns.Setting("access"); string(v) != `{"x":1}` || err != nil {
		t.Errorf("setting: %q %v", v, err)
	}
}

package nsserver

import (
	"context"
	"testing"
)

// TestFsConfigKeys: `fs config` keys come from the subsystems that own
// them (registry, drain, fsck); what it answers to each is what operators
// have always read.
func TestFsConfigKeys(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	register(t, s, 1, 1)
	for _, c := range []struct{ key, value, err string }{
		{"bogus", "1", `fs config fs 1: unknown key "bogus" (configstatus, group, space, io, object-size, drain.rate, drain.parallel, scan_disk_interval, scan_ns_rate, scaninterval, scanrate)`},
		{"configstatus", "up", "fs config fs 1: configstatus must be rw, ro, drain or off"},
		{"group", "a b.0", `fs config fs 1: bad group "a b.0": bad space name "a b": want 1-64 letters, digits, '_' or '-'`},
		{"io", "fast", "fs config fs 1: io must be auto, direct or buffered"},
		{"object-size", "x", `fs config fs 1: bad size "x" (e.g. 4M, 16M, 64M)`},
		{"drain.rate", "1K", `fs config fs 1: rate "1K" is below 1M (bytes per second; 0 = no cap)`},
		{"drain.parallel", "0", `fs config fs 1: bad parallel "0" (1 to 64 moves at once)`},
		{"scanrate", "-3", `fs config fs 1: scanrate: want a number (0 or off: unthrottled), got "-3"`},
		{"configstatus", "ro", ""},
		{"drain.rate", "100M", ""},
		{"scan_disk_interval", "2d", ""},
	} {
		err := s.ConfigFilesystem(ctx, root, 1, c.key, c.value)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.err {
			t.Errorf("fs config 1 %s=%s: %q, want %q", c.key, c.value, got, c.err)
		}
	}
	if err := s.ConfigFilesystem(ctx, root, 9, "io", "direct"); err == nil || err.Error() != "fs config fs 9: no such filesystem" {
		t.Errorf("unknown filesystem: %v", err)
	}
	fss, _ := s.Filesystems(ctx, root)
	if f := fss[0]; f.ConfigStatus != "ro" || f.DrainRate != 100<<20 || f.Fsck.DiskInterval.Hours() != 48 {
		t.Errorf("settings not kept: %+v", f.Filesystem)
	}
}

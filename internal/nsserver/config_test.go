package nsserver

import (
	"context"
	"strings"
	"testing"

	"github.com/kaon-storage/kaon/internal/namespace"
)

// TestFsConfigKeys: `fs config` keys come from the subsystems that own
// them (registry, drain, fsck); what it answers to each is what operators
// have always read.
func TestFsConfigKeys(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	register(t, s, 1, 1)
	for _, c := range []struct{ key, value, err string }{
		{"bogus", "1", `fs config fs 1: unknown key "bogus" (configstatus, location, group, space, io, blocksums, object-size, drain.rate, drain.parallel, rebuild.rate, rebuild.parallel, scan_disk_interval, scan_ns_rate, scaninterval, scanrate)`},
		{"configstatus", "up", "fs config fs 1: configstatus must be rw, ro, drain, off or lost"},
		{"location", "site:rack", `fs config fs 1: bad location "site:rack": want names of letters, digits, '-', '_', '.' joined by '::' (site::rack1)`},
		{"rebuild.rate", "1K", `fs config fs 1: rate "1K" is below 1M (bytes per second; 0 = no cap); default gives way to client streams`},
		{"rebuild.parallel", "65", `fs config fs 1: bad parallel "65" (1 to 64 moves at once)`},
		{"location", "cern::b513", ""},
		{"rebuild.rate", "0", ""},
		{"group", "a b.0", `fs config fs 1: bad group "a b.0": bad space name "a b": want 1-64 letters, digits, '_' or '-'`},
		{"io", "fast", "fs config fs 1: io must be auto, direct or buffered"},
		{"blocksums", "no", "fs config fs 1: blocksums must be on or off"},
		{"blocksums", "off", ""},
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
	fss := s.reg.List()
	if f := fss[0]; f.ConfigStatus != "ro" || f.DrainRate != 100<<20 || f.Fsck.DiskInterval.Hours() != 48 || f.Location != "cern::b513" || f.RebuildRate != -1 {
		t.Errorf("settings not kept: %+v", f.Filesystem)
	}
}

// TestGroupSetKeys: `group set` keys are the balancer's, registered with
// the registry; what it answers is unchanged.
func TestGroupSetKeys(t *testing.T) {
	ctx := context.Background()
	s := newServer(t)
	for _, c := range []struct{ group, key, value, err string }{
		{"default", "balancer", "on", `group set default: bad group "default": want SPACE.N`},
		{"default.0", "bogus", "1", `group set default.0: unknown key "bogus" (balancer, threshold, balancer.rate, balancer.parallel)`},
		{"default.0", "balancer", "yes", "group set default.0: balancer must be on or off"},
		{"default.0", "threshold", "100", `group set default.0: bad threshold "100" (percentage points of fill, 0 < N < 100)`},
		{"default.0", "balancer.rate", "x", `group set default.0: bad rate "x" (bytes per second, e.g. 100M; 0 = no cap)`},
		{"default.0", "balancer.parallel", "65", `group set default.0: bad parallel "65" (1 to 64 moves at once)`},
		{"default.0", "threshold", "7%", ""},
		{"default.0", "balancer.parallel", "3", ""},
	} {
		err := s.SetGroup(ctx, root, c.group, c.key, c.value)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.err {
			t.Errorf("group set %s %s=%s: %q, want %q", c.group, c.key, c.value, got, c.err)
		}
	}
	gs, _ := s.Groups(ctx, root)
	if len(gs) != 1 || gs[0].Threshold != 7 || gs[0].Parallel != 3 || gs[0].Balancer {
		t.Errorf("settings not kept: %+v", gs)
	}
}

// TestEveryEventKindIsPushed: every kind of the model's change events has
// its name in the vocabulary (a new kind would otherwise reach sessions
// as an empty one).
func TestEveryEventKindIsPushed(t *testing.T) {
	for k := namespace.EventKind(1); !strings.HasPrefix(k.String(), "event("); k++ {
		if eventKinds[k] == "" {
			t.Errorf("change event kind %s has no name in nsapi", k)
		}
	}
}

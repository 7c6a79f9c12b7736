package fusecore

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// MountEntry is one line of /proc/self/mountinfo, as far as Kaon reads it.
type MountEntry struct {
	FsType string // "tmpfs", "fuse.kaon-cfsd", ...
	Source string // what mount(2) was given as the source
	Dev    string // the device, major:minor (a FUSE mount's minor names its connection)
}

// TopMount reports the topmost mount on p (the one path lookups reach),
// if p is a mountpoint, from /proc/self/mountinfo: the mount itself is
// never touched, so a dead FUSE mount cannot hang the caller.
func TopMount(p string) (MountEntry, bool) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return MountEntry{}, false
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return MountEntry{}, false
	}
	var top MountEntry
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 || unescapeMountinfo(f[4]) != abs {
			continue
		}
		// Later lines are on top.
		top, found = MountEntry{FsType: g[0], Source: unescapeMountinfo(g[1]), Dev: f[2]}, true
	}
	return top, found
}

// unescapeMountinfo undoes the octal escapes (\040 for a space...) of
// /proc/self/mountinfo fields.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out = append(out, byte(n))
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}

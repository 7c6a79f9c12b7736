package mount_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestLinkAndTimes: a hard link is refused with EPERM (the namespace
// names each inode once); explicit modification times are stored in the
// namespace (what `kaon stat` shows), also when set on a descriptor
// with written data before its close (cp -p), whose commit must not
// stamp the file with the time of the close.
func TestLinkAndTimes(t *testing.T) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/lt")
	m := newMount(t, up.EP.HTTP, "/lt", "")
	f := filepath.Join(m.mp, "f")
	if err := os.WriteFile(f, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(f, filepath.Join(m.mp, "f2")); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("link: %v, want EPERM", err)
	}
	stored := func(name string) string {
		out := up.MustKaon("stat", "/lt/"+name)
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, " Mtime: ") {
				return strings.TrimPrefix(l, " Mtime: ")
			}
		}
		t.Fatalf("kaon stat /lt/%s: no Mtime:\n%s", name, out)
		return ""
	}
	want := time.Date(2003, 4, 5, 6, 7, 8, 9000, time.UTC)
	if err := os.Chtimes(f, want, want); err != nil {
		t.Fatalf("utimens: %v", err)
	}
	if got, w := stored("f"), want.Local().Format(time.RFC3339Nano); got != w {
		t.Fatalf("stored mtime after utimens: %s, want %s", got, w)
	}
	if st, err := os.Stat(f); err != nil || !st.ModTime().Equal(want) {
		t.Fatalf("mount's mtime after utimens: %v %v, want %v", st.ModTime(), err, want)
	}

	// cp -p: write, futimens, close.
	g := filepath.Join(m.mp, "g")
	fd, err := unix.Open(g, unix.O_CREAT|unix.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(fd, []byte("copied")); err != nil {
		t.Fatal(err)
	}
	ts := []unix.Timespec{unix.NsecToTimespec(want.UnixNano()), unix.NsecToTimespec(want.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, g, ts, 0); err != nil {
		t.Fatalf("utimens on a file open with written data: %v", err)
	}
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got, w := stored("g"), want.Local().Format(time.RFC3339Nano); got != w {
		t.Fatalf("stored mtime of g after write, utimens, close: %s, want %s", got, w)
	}
	if b, err := os.ReadFile(g); err != nil || string(b) != "copied" {
		t.Fatalf("content of g: %q %v", b, err)
	}
}

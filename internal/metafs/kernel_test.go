package metafs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestViewOwnerAlive: a view's daemon is alive only while its pid runs
// with the start time the view names, so neither an exited daemon (a
// zombie included) nor a pid reused by another process passes for it.
func TestViewOwnerAlive(t *testing.T) {
	start, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !(viewOwner{os.Getpid(), start}).alive() || !(viewOwner{os.Getpid(), 0}).alive() {
		t.Error("this process not alive")
	}
	if (viewOwner{os.Getpid(), start + 1}).alive() {
		t.Error("another start time taken for this process (a reused pid)")
	}
	c := exec.Command("true")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pid := c.Process.Pid
	var si unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if (viewOwner{pid, 0}).alive() {
		t.Error("an exited process (zombie) taken for alive")
	}
	c.Wait()
	if (viewOwner{pid, 0}).alive() {
		t.Error("a reaped process taken for alive")
	}
}

// TestScrub: scrub removes the names of regular files holding data (all
// of them, or those keep does not keep) at any depth, and nothing else.
func TestScrub(t *testing.T) {
	for _, keepBig := range []bool{false, true} {
		d := t.TempDir()
		for _, p := range []string{"a/b/c", "e"} {
			if err := os.MkdirAll(filepath.Join(d, p), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for p, n := range map[string]int64{"top": 1, "empty": 0, "a/b/c/deep": 10, "a/big": 100, "e/also": 3} {
			if err := os.WriteFile(filepath.Join(d, p), make([]byte, n), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("top", filepath.Join(d, "link")); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(d, "e/also"), filepath.Join(d, "a/hard")); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(d, "e"), 0); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		var keep func(*unix.Stat_t) bool
		want, wantN := []string{".", "a", "a/b", "a/b/c", "e", "empty", "link"}, 5
		if keepBig {
			keep = func(st *unix.Stat_t) bool { return st.Size >= 100 }
			want, wantN = []string{".", "a", "a/b", "a/b/c", "a/big", "e", "empty", "link"}, 4
		}
		n, err := scrub(fd, keep)
		unix.Close(fd)
		os.Chmod(filepath.Join(d, "e"), 0o755)
		var left []string
		filepath.WalkDir(d, func(p string, _ os.DirEntry, _ error) error {
			r, _ := filepath.Rel(d, p)
			left = append(left, r)
			return nil
		})
		slices.Sort(left)
		if err != nil || n != wantN || !slices.Equal(left, want) {
			t.Errorf("scrub (keep >= 100 bytes: %v): removed %d, %v; left %q, want %q", keepBig, n, err, left, want)
		}
	}
}

package mount

import (
	"context"
	"errors"
	"io"
	"testing"
)

// remoteOf serves reads of content, as the storage server would.
func remoteOf(content []byte) func(context.Context, []byte, int64) (int, error) {
	return func(_ context.Context, p []byte, off int64) (int, error) {
		if off >= int64(len(content)) {
			return 0, io.EOF
		}
		return copy(p, content[off:]), nil
	}
}

func read(t *testing.T, j *journal, remote func(context.Context, []byte, int64) (int, error), off int64, n int) string {
	t.Helper()
	p := make([]byte, n)
	got, err := j.ReadAt(context.Background(), p, off, remote)
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return string(p[:got])
}

// TestJournalOverlay: reads see journaled writes over the remote
// content, a truncation cuts the remote content for good (extending
// again reads zeros, not the old bytes), and writes past the end leave
// zeros between.
func TestJournalOverlay(t *testing.T) {
	remote := remoteOf([]byte("0123456789"))
	j, err := newJournal(t.TempDir(), 10)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	j.WriteAt([]byte("ab"), 2)
	if got := read(t, j, remote, 0, 100); got != "01ab456789" {
		t.Fatalf("write over remote: %q", got)
	}
	j.Truncate(5)
	j.Truncate(8)
	if got := read(t, j, remote, 0, 100); got != "01ab4\x00\x00\x00" {
		t.Fatalf("cut to 5, extended to 8: %q", got)
	}
	j.WriteAt([]byte("z"), 12)
	if got := read(t, j, remote, 6, 100); got != "\x00\x00\x00\x00\x00\x00z" {
		t.Fatalf("write past the end: %q", got)
	}
	if j.Size() != 13 || !j.Dirty() {
		t.Fatalf("size %d dirty %v", j.Size(), j.Dirty())
	}
	if want := []extent{{2, 4}, {12, 13}}; len(j.dirty) != 2 || j.dirty[0] != want[0] || j.dirty[1] != want[1] || j.cut != 5 {
		t.Fatalf("what a flush replays: dirty %v cut %d", j.dirty, j.cut)
	}
}

// TestJournalMerge: overlapping and adjacent writes merge into one range.
func TestJournalMerge(t *testing.T) {
	j, _ := newJournal(t.TempDir(), 0)
	defer j.close()
	j.WriteAt([]byte("aaaa"), 10)
	j.WriteAt([]byte("bb"), 0)
	j.WriteAt([]byte("cccccccc"), 2)
	if len(j.dirty) != 1 || j.dirty[0] != (extent{0, 14}) {
		t.Fatalf("merged ranges: %v", j.dirty)
	}
	if got := read(t, j, remoteOf(nil), 0, 100); got != "bbccccccccaaaa" {
		t.Fatalf("content: %q", got)
	}
}

// TestJournalRemoteError: a failing remote read fails the read.
func TestJournalRemoteError(t *testing.T) {
	j, _ := newJournal(t.TempDir(), 10)
	defer j.close()
	boom := errors.New("storage server down")
	_, err := j.ReadAt(context.Background(), make([]byte, 4), 0, func(context.Context, []byte, int64) (int, error) { return 0, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("read with the remote down: %v", err)
	}
}

// TestDiscoverToken: WLCG Bearer Token Discovery's order.
func TestDiscoverToken(t *testing.T) {
	files := map[string]string{"/f": " from-file\n", "/run/user/7/bt_u7": "from-xdg", "/tmp/bt_u7": "from-tmp",
		"/run/user/9/bt_u9": "planted", "/tmp/bt_u9": "planted"}
	owner := map[string]uint32{"/f": 0, "/run/user/7/bt_u7": 7, "/tmp/bt_u7": 7, "/run/user/9/bt_u9": 1000, "/tmp/bt_u9": 1000}
	read := func(p string) ([]byte, uint32, error) {
		if s, ok := files[p]; ok {
			return []byte(s), owner[p], nil
		}
		return nil, 0, errors.New("no such file")
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BEARER_TOKEN": "env", "BEARER_TOKEN_FILE": "/f"}, "env"},
		{map[string]string{"BEARER_TOKEN_FILE": "/f", "XDG_RUNTIME_DIR": "/run/user/7"}, "from-file"},
		{map[string]string{"BEARER_TOKEN_FILE": "/missing", "XDG_RUNTIME_DIR": "/run/user/7"}, "from-xdg"},
		{map[string]string{"XDG_RUNTIME_DIR": "/run/user/8"}, "from-tmp"},
	} {
		if got := discoverToken(c.env, 7, read); got != c.want {
			t.Errorf("env %v: %q, want %q", c.env, got, c.want)
		}
	}
	if got := discoverToken(nil, 8, read); got != "" {
		t.Errorf("nothing anywhere: %q", got)
	}
	// A well-known file someone else owns (planted in /tmp) is not taken.
	if got := discoverToken(map[string]string{"XDG_RUNTIME_DIR": "/run/user/9"}, 9, read); got != "" {
		t.Errorf("files of another owner: %q", got)
	}
	if env := parseEnviron([]byte("A=1\x00B=x=y\x00\x00")); env["A"] != "1" || env["B"] != "x=y" {
		t.Errorf("parseEnviron: %v", env)
	}
}

// TestJournalRebase: a change made elsewhere while the file is open for
// writing here shows to its readers under what this mount wrote; the
// writers' size follows the remote one unless they set one.
func TestJournalRebase(t *testing.T) {
	j, err := newJournal(t.TempDir(), 10)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	j.WriteAt([]byte("AA"), 0)
	grown := remoteOf([]byte("0123456789BBBBB"))
	j.rebase(15)
	if got := read(t, j, grown, 0, 32); got != "AA23456789BBBBB" {
		t.Fatalf("after a remote growth: %q", got)
	}
	shrunk := remoteOf([]byte("0123"))
	j.rebase(4)
	if got := read(t, j, shrunk, 0, 32); got != "AA23" {
		t.Fatalf("after a remote shrink: %q", got)
	}
	// Written beyond the remote end here: the writers' size stands.
	j.WriteAt([]byte("CC"), 8)
	j.rebase(6)
	if j.Size() != 10 {
		t.Fatalf("size after a remote change below this mount's writes: %d, want 10", j.Size())
	}
}

package mount_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"hash/adler32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/integration/fusetest"
	"github.com/kaon-storage/kaon/integration/harness"
)

// counter is one of the mount's counters (kaon.stats of its root).
func counter(t *testing.T, m *kmount, name string) int64 {
	t.Helper()
	var st struct {
		Counters map[string]int64 `json:"counters"`
	}
	if err := json.Unmarshal([]byte(xattr(t, m.mp, "kaon.stats")), &st); err != nil {
		t.Fatalf("kaon.stats: %v", err)
	}
	return st.Counters[name]
}

// treeBytes is the size of the regular files under dir.
func treeBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// writeAll writes p at fd's offset in 1 MiB writes, then pushes what
// the kernel's write-back cache holds to the daemon (sync_file_range
// without fsync: the daemon gets the bytes, nothing is made durable).
func writeAll(t *testing.T, fd int, p []byte) {
	t.Helper()
	for len(p) > 0 {
		n, err := unix.Write(fd, p[:min(len(p), 1<<20)])
		if err != nil {
			t.Fatalf("write: %v", err)
		}
		p = p[n:]
	}
	if err := unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER); err != nil {
		t.Fatalf("sync_file_range: %v", err)
	}
}

// TestStreamedWrite: a file written sequentially from its start is on
// its way to the storage server while it is written — its bytes reach
// the data directory before the close, not copied from a journal after
// it — and what the close acknowledged is the file: content, size, the
// mode it was created with (0600: the upload that replaces the created
// file keeps it), an adler32 the namespace recorded equal to the
// bytes'. An fsync in the middle commits what was written so far
// (curl reads it before the close) and the rest follows; a write below
// what was streamed (a rewrite) falls back to the journal, and the
// close still stores every byte as written. With and without the
// kernel's write-back cache (its writes reach the daemon differently).
func TestStreamedWrite(t *testing.T) {
	for _, o := range []string{"nowriteback", "writeback"} {
		t.Run(o, func(t *testing.T) { streamedWrite(t, o) })
	}
}

func streamedWrite(t *testing.T, opt string) {
	up := harness.Up(t)
	up.MustKaon("mkdir", "/s")
	m := newMount(t, up.EP.HTTP, "/s", "", "-o", opt)
	want := make([]byte, 40<<20+4321)
	rand.Read(want)

	// Streamed whole.
	p := filepath.Join(m.mp, "whole")
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	before := treeBytes(up.Dir)
	writeAll(t, fd, want[:32<<20])
	waitFor(t, 30*time.Second, "the written bytes reach the storage server's data directory before the close", func() bool {
		return treeBytes(up.Dir)-before >= 16<<20
	})
	writeAll(t, fd, want[32<<20:])
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got := curlGet(t, up, "/s/whole"); !bytes.Equal(got, want) {
		t.Fatalf("curl after close: %d bytes, want the %d written (first difference at %d)", len(got), len(want), firstDiff(string(got), string(want)))
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Size() != int64(len(want)) || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stat after close: %v %v, want %d bytes, mode 600", fi, err, len(want))
	}
	sum := fmt.Sprintf("adler32:%08x", adler32.Checksum(want))
	if got := xattr(t, p, "kaon.checksum"); !strings.Contains(got, sum) {
		t.Fatalf("kaon.checksum %q, want %s (the bytes written)", got, sum)
	}
	if n := counter(t, m, "stream_committed"); n != 1 {
		t.Fatalf("stream_committed %d after one streamed file\n%s", n, m.log)
	}

	// fsync in the middle: what was written is stored, then the rest.
	p = filepath.Join(m.mp, "synced")
	fd, err = unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, fd, want[:8<<20])
	if err := unix.Fsync(fd); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	if got := curlGet(t, up, "/s/synced"); !bytes.Equal(got, want[:8<<20]) {
		t.Fatalf("curl after fsync: %d bytes, want the %d written before it", len(got), 8<<20)
	}
	writeAll(t, fd, want[8<<20:12<<20])
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close after fsync: %v", err)
	}
	if got := curlGet(t, up, "/s/synced"); !bytes.Equal(got, want[:12<<20]) {
		t.Fatalf("curl after close: %d bytes, want %d", len(got), 12<<20)
	}

	// A rewrite of streamed bytes: the journal carries the file.
	p = filepath.Join(m.mp, "rewritten")
	fd, err = unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	aborted := counter(t, m, "stream_aborted")
	before = treeBytes(up.Dir)
	writeAll(t, fd, want[:16<<20])
	// The rewrite must fall below what the stream already sent (on a
	// loaded machine the stream may not have sent byte 100 yet, and then
	// it just carries the rewritten bytes: nothing to abort).
	waitFor(t, 30*time.Second, "the stream of /s/rewritten sending its first MiB before the rewrite", func() bool {
		return treeBytes(up.Dir)-before >= 1<<20
	})
	if _, err := unix.Pwrite(fd, []byte("rewritten"), 100); err != nil {
		t.Fatal(err)
	}
	writeAll(t, fd, want[16<<20:20<<20])
	if err := unix.Close(fd); err != nil {
		t.Fatalf("close after a rewrite: %v", err)
	}
	w := append([]byte(nil), want[:20<<20]...)
	copy(w[100:], "rewritten")
	if got := curlGet(t, up, "/s/rewritten"); !bytes.Equal(got, w) {
		t.Fatalf("curl after a rewrite: %d bytes, want %d (first difference at %d)", len(got), len(w), firstDiff(string(got), string(w)))
	}
	if counter(t, m, "stream_aborted") == aborted {
		t.Errorf("the rewrite did not abort the stream\n%s", m.log)
	}
}

// TestStreamServerKilled: the servers are killed (SIGKILL) while a file
// is being streamed. The close then either succeeds — and the file as
// stored is every byte written — or fails with EIO; never a success
// over a short or partial file. With the servers back within the
// grace, the journal carries the file and the close succeeds; with no
// server within it, the close fails.
func TestStreamServerKilled(t *testing.T) {
	want := make([]byte, 24<<20+17)
	rand.Read(want)
	for _, back := range []bool{true, false} {
		t.Run(fmt.Sprintf("back=%v", back), func(t *testing.T) {
			dir := t.TempDir()
			ports := harness.FreePorts(t, 2)
			up := harness.Start(t, dir, "up", "--data", dir, "--http", fmt.Sprintf("127.0.0.1:%d", ports[0]),
				"--xrootd", fmt.Sprintf("127.0.0.1:%d", ports[1]))
			up.MustKaon("mkdir", "/k")
			grace := "5m"
			if !back {
				grace = "3s"
			}
			m := newMount(t, up.EP.HTTP, "/k", "", "--grace", grace)
			fd, err := unix.Open(filepath.Join(m.mp, "f"), unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			before := treeBytes(dir)
			writeAll(t, fd, want[:16<<20])
			waitFor(t, 30*time.Second, "the stream reaches the storage server before the kill", func() bool {
				return treeBytes(dir)-before >= 4<<20
			})
			up.Kill9()
			writeAll(t, fd, want[16<<20:])
			closed := make(chan error, 1)
			go func() { closed <- unix.Close(fd) }()
			if back {
				// The restart forks this process: not before the close
				// has taken fd out of the table (its flush waits in the
				// mount). A child forked earlier held a copy: the server
				// kept the file open (the unmount refused busy), or with
				// O_CLOEXEC its exec closed it and waited for that flush,
				// which waited for the server — until the grace (5 min).
				waitFor(t, 30*time.Second, "the close's flush waits for the servers in the mount", func() bool {
					return counter(t, m, "replay_waits") > 0
				})
				up.Restart()
			}
			var cerr error
			if err := fusetest.Within("the close", 2*time.Minute, func() error { cerr = <-closed; return nil }); err != nil {
				t.Fatal(err)
			}
			if !back {
				up.Restart()
			}
			got := curlGet(t, up, "/k/f")
			switch {
			case cerr == nil && !bytes.Equal(got, want):
				t.Fatalf("close succeeded, the file stored is %d bytes, want the %d written (first difference at %d)", len(got), len(want), firstDiff(string(got), string(want)))
			case cerr != nil && cerr != unix.EIO:
				t.Fatalf("close: %v, want success or EIO", cerr)
			case back && cerr != nil:
				t.Fatalf("close with the servers back within the grace: %v\n%s", cerr, m.log)
			case !back && cerr == nil:
				t.Fatalf("close succeeded with no server reachable\n%s", m.log)
			}
			if n := counter(t, m, "stream_failed") + counter(t, m, "stream_aborted"); n == 0 {
				t.Errorf("the stream did not fail when the servers were killed\n%s", m.log)
			}
		})
	}
}

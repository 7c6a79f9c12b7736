package core

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/backend/posix"
)

// TestRestartedStorageServerDropsUnknownUnfinishedStripes: a storage
// server killed while it wrote stripes leaves them without metadata; when
// it comes back it removes at once those the namespace server does not
// know (not after fsck's orphan grace of a day), and keeps an unfinished
// stripe of an upload still pending at the namespace and a committed
// file's stripe whose metadata is gone.
func TestRestartedStorageServerDropsUnknownUnfinishedStripes(t *testing.T) {
	mdir := t.TempDir()
	m := harness.Start(t, mdir, "mgm", "--data", mdir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0")
	fdir := t.TempDir()
	fs := filepath.Join(fdir, "fs0")
	f := harness.Start(t, fdir, "fst", "--mgm", m.EP.HTTP, "--key", filepath.Join(mdir, "keys", "capability.key"),
		"--http", "127.0.0.1:0", "--node", "n0", "--data", fdir, "--fs", fs)
	harness.WaitFor(t, 30*time.Second, "the filesystem to boot", func() bool {
		return strings.Contains(m.MustKaon("fs", "ls"), "booted")
	})
	// A committed file, and an upload the namespace has pending (sent to
	// the storage server, not started there yet).
	local, _ := randomFile(t, 1000)
	mustPut(t, m, local, "/committed")
	committed := fidOf(t, m, "/committed")
	loc, err := url.Parse(curl(t, "-T", local, "-o", "/dev/null", m.EP.HTTP+"/pending").header("Location"))
	if err != nil || loc.Path == "" {
		t.Fatalf("PUT /pending: redirect %v %v", loc, err)
	}
	pending, err := strconv.ParseUint(loc.Path[strings.LastIndexByte(loc.Path, '/')+1:], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	f.Kill9()
	// What the killed server left: stripes without metadata, of an id the
	// namespace never handed out, of the pending upload, and the committed
	// file's stripe with its metadata gone.
	unknown := pending + 1000
	for _, fid := range []uint64{unknown, pending} {
		p := posix.PhysPath(fs, fid)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("partial stripe"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Removexattr(posix.PhysPath(fs, committed), "user.kaon.fid"); err != nil {
		t.Fatal(err)
	}
	f.Restart()
	harness.WaitFor(t, 30*time.Second, "the restarted storage server to remove the unfinished stripe the namespace does not know", func() bool {
		_, err := os.Stat(posix.PhysPath(fs, unknown))
		return errors.Is(err, os.ErrNotExist)
	})
	if !strings.Contains(f.Logs(), "removed stripes a previous run left unfinished") {
		t.Fatal("the removal is not logged")
	}
	for what, fid := range map[string]uint64{"the pending upload's": pending, "the committed file's": committed} {
		if _, err := os.Stat(posix.PhysPath(fs, fid)); err != nil {
			t.Fatalf("%s unfinished stripe (fid %d) was removed: %v", what, fid, err)
		}
	}
}

// fidOf is the file id of path (kaon file info).
func fidOf(t *testing.T, k *harness.Process, path string) uint64 {
	t.Helper()
	line := fidLine(k.MustKaon("file", "info", path))
	var fid uint64
	if _, err := fmt.Sscanf(strings.TrimSpace(line[strings.Index(line, "fid:")+4:]), "%d", &fid); err != nil {
		t.Fatalf("fid of %s in %q: %v", path, line, err)
	}
	return fid
}

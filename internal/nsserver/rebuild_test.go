package nsserver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/kaontest"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// logBuffer is a log destination safe for concurrent writers.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// loseFs makes filesystem id unreadable the way a disk that is gone is:
// its directory is no longer there (the storage server reports it
// offline: no identity marker).
func loseFs(t *testing.T, st *kaontest.Stack, id uint32) {
	t.Helper()
	root := fsRow(t, st, id).Path
	if err := os.Rename(root, root+".gone"); err != nil {
		t.Fatal(err)
	}
}

// checkRedundancy checks that every file has its layout's number of
// stripes, on distinct filesystems, none on the ones in lost, each
// there on its disk.
func checkRedundancy(t *testing.T, st *kaontest.Stack, files []file, lost ...uint32) {
	t.Helper()
	ctx := context.Background()
	for _, f := range files {
		n, err := st.NS.Stat(ctx, auth.Root, f.path)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := layout.Parse(n.Layout)
		locs := slices.Clone(n.Locations)
		slices.Sort(locs)
		if len(locs) != l.Stripes() || len(slices.Compact(locs)) != l.Stripes() {
			t.Fatalf("%s (%s) has stripes on %v", f.path, n.Layout, n.Locations)
		}
		for _, id := range n.Locations {
			if slices.Contains(lost, id) {
				t.Fatalf("%s still has a stripe on lost fs %d: %v", f.path, id, n.Locations)
			}
			if _, err := os.Stat(posix.PhysPath(fsRow(t, st, id).Path, n.ID)); err != nil {
				t.Fatalf("%s: no stripe on fs %d: %v", f.path, id, err)
			}
		}
	}
}

// TestRebuildLostFilesystem: a filesystem unreadable for longer than the
// grace is declared lost and everything it held is rebuilt on the
// others (replicas copied from the surviving ones, EC stripes decoded
// from the others), without waiting for its storage server to delete
// anything; it ends empty and out of placement, the log says when and
// why, and every file is whole again: another filesystem lost after
// that leaves every file readable.
func TestRebuildLostFilesystem(t *testing.T) {
	var logs logBuffer
	st := kaontest.New(t, kaontest.Options{Filesystems: 8, CapabilityTTL: time.Second, RebuildAfter: 2 * time.Second,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	files := fill(t, st, []string{"replica:2", "replica:3", "ec:4+2:65536"}, 8, 900<<10)
	sums := map[string]map[string]string{}
	on1 := 0
	for _, f := range files {
		n, _ := st.NS.Stat(ctx, auth.Root, f.path)
		sums[f.path] = n.Checksums
		if slices.Contains(n.Locations, 1) {
			on1++
		}
	}
	if on1 == 0 {
		t.Fatal("no file has a stripe on fs 1: the test proves nothing")
	}
	loseFs(t, st, 1)
	waitFor(t, 60*time.Second, "fs 1 to be declared lost and rebuilt (empty)", func() bool {
		f := fsRow(t, st, 1)
		return f.ConfigStatus == "lost" && f.Drain == "empty"
	})
	checkRedundancy(t, st, files, 1)
	checkFiles(t, st, files)
	for _, f := range files {
		n, _ := st.NS.Stat(ctx, auth.Root, f.path)
		if !maps.Equal(n.Checksums, sums[f.path]) {
			t.Fatalf("%s: checksums %v, were %v", f.path, n.Checksums, sums[f.path])
		}
	}
	s, err := st.Client.FsStatus(ctx, 1)
	if err != nil || s.FilesMoved != int64(on1) || len(s.Failures) != 0 {
		t.Fatalf("fs status after the rebuild: %+v %v (want %d rebuilt, no failure)", s, err, on1)
	}
	log := logs.String()
	for _, want := range []string{`msg="filesystem lost" fsid=1`, "unreadable for", `msg="rebuild started`, `msg="rebuild ended`} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
	// Nothing new lands on the lost filesystem.
	more := fill(t, st, []string{"replica:6"}, 3, 10<<10)
	checkRedundancy(t, st, more, 1)
	// A second loss: every file is still readable.
	loseFs(t, st, 2)
	checkFiles(t, st, files)
}

// TestRebuildStuckFiles: a filesystem declared lost by hand whose plain
// files have no other copy: their stripes are reported as failures with
// the reason, counted unreadable in fs status, fsck stat and /metrics,
// and the rebuild does not end; once the filesystem can be read again
// the rebuild copies them from it and ends empty.
func TestRebuildStuckFiles(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{Filesystems: 6, CapabilityTTL: time.Second})
	ctx := context.Background()
	files := fill(t, st, []string{"plain", "replica:2"}, 6, 300<<10)
	first, _ := st.NS.Stat(ctx, auth.Root, files[0].path)
	id := first.Locations[0]
	plains, onIt := 0, 0
	for _, f := range files {
		n, _ := st.NS.Stat(ctx, auth.Root, f.path)
		if slices.Contains(n.Locations, id) {
			onIt++
			if n.Layout == "plain" {
				plains++
			}
		}
	}
	root := fsRow(t, st, id).Path
	if err := os.Rename(root, root+".gone"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "fs ls to show the filesystem unreadable", func() bool { return !fsRow(t, st, id).DownSince.IsZero() })
	if err := st.Client.ConfigFilesystem(ctx, id, "configstatus", "lost"); err != nil {
		t.Fatal(err)
	}
	var s nsapi.FsStatus
	waitFor(t, 30*time.Second, "the rebuild to move the replicas and report the plain files", func() bool {
		var err error
		s, err = st.Client.FsStatus(ctx, id)
		return err == nil && s.FilesMoved == int64(onIt-plains) && len(s.Failures) == plains
	})
	if s.Drain != "rebuilding" || s.Kind != "rebuild" || s.Risk == nil || s.Risk.Unreadable.Files != int64(plains) ||
		!strings.Contains(s.Failures[0].Reason, "its only copy is on this filesystem") || !strings.Contains(s.LostWhy, "operator") {
		t.Fatalf("fs status of the stuck rebuild: %+v (risk %+v)", s, s.Risk)
	}
	waitFor(t, 30*time.Second, "fsck stat to count the unreadable files", func() bool {
		fs, err := st.Client.FsckStat(ctx)
		return err == nil && fs.Risk != nil && fs.Risk.Unreadable.Files == int64(plains) && fs.Risk.Critical.Files == 0 &&
			slices.Equal(fs.Risk.Unavailable, []uint32{id})
	})
	resp, err := http.Get(st.HTTP.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`kaon_files_at_risk{class="unreadable"} %d`, plains); !strings.Contains(string(body), want) ||
		!strings.Contains(string(body), fmt.Sprintf(`kaon_fs_lost{fsid="%d"} 1`, id)) {
		t.Fatalf("/metrics lacks %q or kaon_fs_lost:\n%s", want, grepLines(string(body), "at_risk", "kaon_fs_lost", "rebuild"))
	}
	// The disk is back: the rebuild copies the rest off it and ends.
	if err := os.Rename(root+".gone", root); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "the rebuild to end once the filesystem is readable again", func() bool { return fsRow(t, st, id).Drain == "empty" })
	checkRedundancy(t, st, files, id)
	checkFiles(t, st, files)
}

func grepLines(s string, words ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

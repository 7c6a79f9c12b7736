package nsserver_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/auth"
	"github.com/kaon-storage/kaon/internal/client"
	"github.com/kaon-storage/kaon/internal/kaontest"
	"github.com/kaon-storage/kaon/internal/nsapi"
)

// Service-level tests of data movement: the whole stack in one process
// (the namespace service orders, the storage server copies over its
// internal HTTP endpoint).

type file struct {
	path string
	data []byte
}

// fill writes n files of each layout with random sizes up to max.
func fill(t *testing.T, st *kaontest.Stack, layouts []string, n int, maxSize int) []file {
	t.Helper()
	ctx := context.Background()
	var out []file
	for _, l := range layouts {
		dir := "/" + strings.NewReplacer(":", "", "+", "p").Replace(l)
		if err := st.Client.Mkdir(ctx, dir, 0, false); err != nil {
			t.Fatal(err)
		}
		if err := st.Client.SetAttr(ctx, dir, nsapi.AttrLayout, l); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			b := make([]byte, 1+(i*7919+len(l)*104729)%maxSize)
			rand.Read(b)
			p := fmt.Sprintf("%s/f%d", dir, i)
			if code := st.Put(t, p, b); code != 201 {
				t.Fatalf("PUT %s: %d", p, code)
			}
			out = append(out, file{p, b})
		}
	}
	return out
}

func checkFiles(t *testing.T, st *kaontest.Stack, files []file) {
	t.Helper()
	for _, f := range files {
		if code, got := st.Get(t, f.path); code != 200 || !bytes.Equal(got, f.data) {
			t.Fatalf("GET %s: %d, %d bytes, equal %v", f.path, code, len(got), bytes.Equal(got, f.data))
		}
	}
}

// waitFor polls cond until it holds or the deadline passes, naming the
// step in the failure.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within %v", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func fsRow(t *testing.T, st *kaontest.Stack, id uint32) nsapi.Filesystem {
	t.Helper()
	fss, err := st.Client.Filesystems(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fss {
		if f.ID == id {
			return f
		}
	}
	t.Fatalf("no fs %d", id)
	return nsapi.Filesystem{}
}

// stripesIn lists the stripe files under a filesystem root.
func stripesIn(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	buckets, _ := os.ReadDir(root)
	for _, b := range buckets {
		if !b.IsDir() {
			continue
		}
		ents, _ := os.ReadDir(filepath.Join(root, b.Name()))
		for _, e := range ents {
			out = append(out, e.Name())
		}
	}
	return out
}

// recorder is a MoveReporter keeping what it was told.
type recorder struct {
	mu       sync.Mutex
	moved    map[string]int // kind/fsid/ok
	bytes    int64
	progress map[string][3]int64 // kind/fsid -> files left, bytes left, running
}

func (r *recorder) Progress(kind, fsid string, files, bytes int64, running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run := int64(0)
	if running {
		run = 1
	}
	r.progress[kind+"/"+fsid] = [3]int64{files, bytes, run}
}

func (r *recorder) Moved(kind, fsid string, bytes int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.moved[fmt.Sprintf("%s/%s/%v", kind, fsid, ok)]++
	r.bytes += bytes
}

// TestDrain: a drained filesystem's stripes of every layout move to the
// others of its group (a replica copied, an EC stripe copied with its
// frames checked), the files read back whole, and fs ls ends in drained
// only once nothing of any file is left on the filesystem: the old
// stripes, deleted after the grace, are gone from its disk.
func TestDrain(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{Filesystems: 7, CapabilityTTL: time.Second})
	ctx := context.Background()
	files := fill(t, st, []string{"plain", "replica:2", "ec:4+2:65536"}, 6, 700<<10)
	var on1 int
	for _, f := range files {
		n, _ := st.NS.Stat(ctx, auth.Root, f.path)
		if slices.Contains(n.Locations, 1) {
			on1++
		}
	}
	if on1 == 0 {
		t.Fatal("no file has a stripe on fs 1: the test proves nothing")
	}
	rec := &recorder{moved: map[string]int{}, progress: map[string][3]int64{}}
	st.NS.ReportMovement(rec)
	if err := st.Client.ConfigFilesystem(ctx, 1, "configstatus", "drain"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "fs 1 to show drained", func() bool { return fsRow(t, st, 1).Drain == "drained" })
	root := fsRow(t, st, 1).Path
	if left := stripesIn(t, root); len(left) != 0 {
		t.Fatalf("fs 1 is drained but its disk still holds stripes %v", left)
	}
	checkFiles(t, st, files)
	for _, f := range files {
		n, _ := st.NS.Stat(ctx, auth.Root, f.path)
		if slices.Contains(n.Locations, 1) {
			t.Fatalf("%s still has a stripe on fs 1: %v", f.path, n.Locations)
		}
	}
	s, err := st.Client.FsStatus(ctx, 1)
	if err != nil || s.FilesMoved < int64(on1) || s.DrainFilesLeft != 0 || len(s.Failures) != 0 {
		t.Fatalf("fs status after the drain: %+v %v (want >= %d moved, none left)", s, err, on1)
	}
	waitFor(t, 5*time.Second, "the metrics hook to hear that the drain ended", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.progress["drain/1"] == [3]int64{0, 0, 0}
	})
	rec.mu.Lock()
	if rec.moved["drain/1/true"] != int(s.FilesMoved) || rec.bytes != s.BytesMoved {
		t.Fatalf("metrics hook: %v, %d bytes; fs status: %d stripes, %d bytes", rec.moved, rec.bytes, s.FilesMoved, s.BytesMoved)
	}
	rec.mu.Unlock()
	// Back to rw: the drain state is gone.
	if err := st.Client.ConfigFilesystem(ctx, 1, "configstatus", "rw"); err != nil {
		t.Fatal(err)
	}
	if f := fsRow(t, st, 1); f.Drain != "" {
		t.Fatalf("fs 1 back in rw still shows drain %q", f.Drain)
	}
}

// TestDrainWaitsForUploads: an upload placed on a filesystem before its
// drain started may still commit a stripe there, so the drain does not
// end drained while it is pending; once it is aborted (or committed and
// moved) and its stripe deleted, it does.
func TestDrainWaitsForUploads(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{Filesystems: 7, CapabilityTTL: time.Second})
	ctx := context.Background()
	var g *nsapi.Grant
	for i := 0; g == nil || !slices.Contains(g.File.Locations, 1); i++ {
		if i == 50 {
			t.Fatal("50 uploads placed none on fs 1")
		}
		var err error
		if g, err = st.NS.Open(ctx, auth.Root, fmt.Sprintf("/up%d", i), nsapi.OpenRequest{Write: true, Create: true, Truncate: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Client.ConfigFilesystem(ctx, 1, "configstatus", "drain"); err != nil {
		t.Fatal(err)
	}
	var s nsapi.FsStatus
	waitFor(t, 30*time.Second, "fs 1's drain to end or to wait for the upload", func() bool {
		var err error
		s, err = st.Client.FsStatus(ctx, 1)
		return err == nil && (s.Drain == "drained" || strings.Contains(s.DrainPhase, "upload"))
	})
	if s.Drain == "drained" {
		t.Fatalf("fs 1 drained while upload fid %d placed on it is pending: %+v", g.File.ID, s)
	}
	if err := st.NS.Abort(ctx, g.File.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "fs 1 to show drained after the upload was aborted", func() bool { return fsRow(t, st, 1).Drain == "drained" })
}

// TestDrainGroupCannotHold: an ec:4+2 file over all 6 filesystems of the
// group cannot leave one of them; the drain says so in its failures
// and keeps the file readable, and does not end drained.
func TestDrainGroupCannotHold(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{Filesystems: 6})
	ctx := context.Background()
	files := fill(t, st, []string{"ec:4+2:65536"}, 1, 300<<10)
	if err := st.Client.ConfigFilesystem(ctx, 2, "configstatus", "drain"); err != nil {
		t.Fatal(err)
	}
	var s nsapi.FsStatus
	waitFor(t, 30*time.Second, "fs 2's drain to report a failure", func() bool {
		var err error
		s, err = st.Client.FsStatus(ctx, 2)
		return err == nil && len(s.Failures) > 0
	})
	if r := s.Failures[0].Reason; !strings.Contains(r, "group default.0 cannot hold it") || !strings.Contains(r, "holds stripe") {
		t.Fatalf("failure reason: %q", r)
	}
	if s.Drain != "draining" || s.DrainFilesLeft != 1 || s.Failures[0].Path != files[0].path {
		t.Fatalf("fs status: %+v", s)
	}
	checkFiles(t, st, files)
}

// TestConvert: file convert rewrites a file into another layout and into
// another space with the same bytes and checksums; the old stripes are
// deleted after the grace.
func TestConvert(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{Filesystems: 7, CapabilityTTL: time.Second})
	ctx := context.Background()
	files := fill(t, st, []string{"replica:2"}, 2, 2<<20)
	before, _ := st.NS.Stat(ctx, auth.Root, files[0].path)
	e, err := st.Client.ConvertFile(ctx, files[0].path, "", "ec:4+2:65536")
	if err != nil {
		t.Fatal(err)
	}
	if e.Layout != "ec:4+2:65536" || len(e.Locations) != 6 || e.Checksums["adler32"] != before.Checksums["adler32"] || e.Size != before.Size {
		t.Fatalf("converted: %+v (before %+v)", e, before)
	}
	checkFiles(t, st, files)
	// Another space: fs 5-7 become space "fast".
	for _, id := range []uint32{5, 6, 7} {
		if err := st.Client.ConfigFilesystem(ctx, id, "space", "fast"); err != nil {
			t.Fatal(err)
		}
	}
	e, err = st.Client.ConvertFile(ctx, files[1].path, "fast", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range e.Locations {
		if l < 5 {
			t.Fatalf("converted to space fast but on fs %d: %v", l, e.Locations)
		}
	}
	if e.Layout != "replica:2" {
		t.Fatalf("layout changed: %s", e.Layout)
	}
	checkFiles(t, st, files)
	if _, err := st.Client.ConvertFile(ctx, files[1].path, "nosuch", ""); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("convert to a missing space: %v", err)
	}
	// The old replicas go away after the grace.
	waitFor(t, 30*time.Second, "old stripes of converted files to be deleted", func() bool {
		n := 0
		for id := uint32(1); id <= 7; id++ {
			n += len(stripesIn(t, fsRow(t, st, id).Path))
		}
		return n == 6+2 // ec:4+2 and replica:2
	})
}

// TestConvertPolicy: sys.convert.layout on a directory converts the
// files below, and the policy's progress is reported.
func TestConvertPolicy(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{Filesystems: 6})
	ctx := context.Background()
	files := fill(t, st, []string{"replica:3"}, 3, 1<<20)
	if err := st.Client.SetAttr(ctx, "/replica3", nsapi.AttrConvertLayout, "ec:2+1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the policy to convert the files", func() bool {
		for _, f := range files {
			if n, err := st.NS.Stat(ctx, auth.Root, f.path); err != nil || !strings.HasPrefix(n.Layout, "ec:2+1") {
				return false
			}
		}
		return true
	})
	checkFiles(t, st, files)
	cs, err := st.Client.ConvertStatus(ctx)
	if err != nil || cs.Converted != 3 || len(cs.Failures) != 0 {
		t.Fatalf("convert status: %+v %v", cs, err)
	}
	if err := st.Client.SetAttr(ctx, "/replica3", nsapi.AttrConvertLayout, "ec:bad"); err == nil {
		t.Fatal("a bad policy layout was accepted")
	}
}

// TestGroups: a file's stripes are placed in one group, and a drained
// filesystem's stripes go to the others of its group only.
func TestGroups(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{Filesystems: 7, CapabilityTTL: time.Second})
	ctx := context.Background()
	for _, id := range []uint32{4, 5, 6, 7} {
		if err := st.Client.ConfigFilesystem(ctx, id, "group", "default.1"); err != nil {
			t.Fatal(err)
		}
	}
	group := func(id uint32) int {
		if id >= 4 {
			return 1
		}
		return 0
	}
	files := fill(t, st, []string{"replica:2", "ec:2+1"}, 12, 200<<10)
	on4 := 0
	for _, f := range files {
		n, _ := st.NS.Stat(ctx, auth.Root, f.path)
		for _, l := range n.Locations {
			if group(l) != group(n.Locations[0]) {
				t.Fatalf("%s placed across groups: %v", f.path, n.Locations)
			}
		}
		if slices.Contains(n.Locations, 4) {
			on4++
		}
	}
	if on4 == 0 {
		t.Fatal("nothing on fs 4: the test proves nothing")
	}
	if err := st.Client.ConfigFilesystem(ctx, 4, "configstatus", "drain"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "fs 4 to show drained", func() bool { return fsRow(t, st, 4).Drain == "drained" })
	for _, f := range files {
		n, _ := st.NS.Stat(ctx, auth.Root, f.path)
		for _, l := range n.Locations {
			if l == 4 || group(l) != group(n.Locations[0]) {
				t.Fatalf("%s after draining fs 4: %v", f.path, n.Locations)
			}
		}
	}
	checkFiles(t, st, files)
}

// TestReadGrantedBeforeSwitch: a client redirected to a stripe before a
// drain moved it can still follow the redirect after the switch: the old
// stripe is deleted only once the capability lifetime has passed (and the
// drain is not drained until then). The drain starts right after its
// target was made rw, before the target's storage server heard of it:
// its moves are not refused.
func TestReadGrantedBeforeSwitch(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{Filesystems: 2, CapabilityTTL: time.Minute})
	ctx := context.Background()
	if err := st.Client.ConfigFilesystem(ctx, 2, "configstatus", "ro"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // two heartbeats: the storage server knows fs 2 is ro
	data := make([]byte, 3<<20)
	rand.Read(data)
	if code := st.Put(t, "/f", data); code != 201 {
		t.Fatalf("PUT %d", code)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(st.HTTP.URL + "/f")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusTemporaryRedirect || loc == "" {
		t.Fatalf("GET /f: %d, Location %q", resp.StatusCode, loc)
	}
	if err := st.Client.ConfigFilesystem(ctx, 2, "configstatus", "rw"); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.ConfigFilesystem(ctx, 1, "configstatus", "drain"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "/f to move off fs 1", func() bool {
		n, err := st.NS.Stat(ctx, auth.Root, "/f")
		return err == nil && !slices.Contains(n.Locations, 1)
	})
	// fs 2 became rw just before the drain started, before its storage
	// server's next heartbeat: the moves onto it are not refused as "ro".
	if s, err := st.Client.FsStatus(ctx, 1); err != nil || s.Failed != 0 {
		t.Fatalf("drain onto a filesystem just made rw: %d failed attempts %v (%v)", s.Failed, s.Failures, err)
	}
	time.Sleep(3 * time.Second) // three heartbeats: a deletion due now would have been carried out
	if s, err := st.Client.FsStatus(ctx, 1); err != nil || s.Drain != "draining" || !strings.Contains(s.DrainPhase, "delete") {
		t.Fatalf("fs 1 with the old stripe still on it: drain %q, phase %q (%v), want draining, waiting for the deletion", s.Drain, s.DrainPhase, err)
	}
	resp, err = http.Get(loc)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(got, data) {
		t.Fatalf("following a redirect granted before the switch: %d, %d bytes", resp.StatusCode, len(got))
	}
	if code, got := st.Get(t, "/f"); code != 200 || !bytes.Equal(got, data) {
		t.Fatalf("GET after the drain: %d", code)
	}
}

// TestDrainReachesSession: a session that subscribed to a file (a mount
// caching it, holding it open) is told when a drain moves its stripe:
// the invalidation arrives for the file's inode, and what the session
// then looks up names the new location, from which the content reads.
func TestDrainReachesSession(t *testing.T) {
	st := kaontest.New(t, kaontest.Options{Filesystems: 3, CapabilityTTL: time.Second})
	ctx := context.Background()
	f := fill(t, st, []string{"plain"}, 1, 64<<10)[0]
	n, err := st.NS.Stat(ctx, auth.Root, f.path)
	if err != nil || len(n.Locations) != 1 {
		t.Fatalf("%s: %v %v, want one location", f.path, n.Locations, err)
	}
	ino, drained := n.ID, n.Locations[0]
	s, err := st.Client.OpenSession(ctx, client.SessionOptions{Host: "drain-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if ls, err := s.Subscribe(ctx, f.path); err != nil || len(ls) != 1 || ls[0].Error != "" {
		t.Fatalf("subscribe %s: %+v %v", f.path, ls, err)
	}
	if err := st.Client.ConfigFilesystem(ctx, drained, "configstatus", "drain"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(60 * time.Second)
	for told := false; !told; {
		select {
		case inv, ok := <-s.Invalidations():
			if !ok {
				t.Fatal("the session's invalidations closed before the drain's move reached it")
			}
			told = inv.Full || inv.Ino == ino
		case <-deadline:
			t.Fatalf("waiting for the drain's move of %s (inode %d) to reach the subscribed session: nothing within 60 s", f.path, ino)
		}
	}
	n, err = st.Client.Stat(ctx, f.path)
	if err != nil || slices.Contains(n.Locations, drained) || len(n.Locations) != 1 {
		t.Fatalf("%s after the session was told: %v %v, want one location off fs %d", f.path, n.Locations, err, drained)
	}
	checkFiles(t, st, []file{f})
}

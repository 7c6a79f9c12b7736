package storage

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/adler32"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend"
	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/layout"
)

// fakeNS records commits and aborts; it numbers filesystems by path order.
type fakeNS struct {
	mu          sync.Mutex
	claimed     map[uint64]bool
	initialized map[uint32]bool
	reports     []message.FsReport
	commits     []message.Commit
	aborts      []uint64
	failCommit  bool
	uploads     []uint64 // the last heartbeat's uploads being written
}

// Heartbeat asks for initialization until a filesystem was reported
// with its marker, as the registry does.
func (f *fakeNS) Heartbeat(_ context.Context, hb message.Heartbeat) (message.HeartbeatReply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.uploads = hb.Uploads
	if f.initialized == nil {
		f.initialized = map[uint32]bool{}
	}
	var r message.HeartbeatReply
	for i, fs := range hb.Filesystems {
		id := uint32(i + 1)
		if fs.ID == id && fs.Offline == "" {
			f.initialized[id] = true
		}
		f.reports = append(f.reports, fs)
		r.Filesystems = append(r.Filesystems, message.FsAssignment{ID: id, Path: fs.Path, UUID: "u", ConfigStatus: "rw", Init: !f.initialized[id]})
	}
	return r, nil
}

// Claim refuses a fid claimed before, as the namespace refuses a used
// write capability.
func (f *fakeNS) Claim(_ context.Context, fid uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.claimed[fid] {
		return kerr.New(kerr.Permission, "write", "", "write capability already used")
	}
	if f.claimed == nil {
		f.claimed = map[uint64]bool{}
	}
	f.claimed[fid] = true
	return nil
}

func (f *fakeNS) Commit(_ context.Context, c message.Commit) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failCommit {
		return kerr.New(kerr.NotFound, "commit", "", "no pending upload")
	}
	f.commits = append(f.commits, c)
	return nil
}

func (f *fakeNS) Abort(_ context.Context, fid uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.aborts = append(f.aborts, fid)
	return nil
}

func newServer(t *testing.T, nfs int) (*Server, *fakeNS, *capability.Key, []string) {
	t.Helper()
	key, _ := capability.NewKey(bytes.Repeat([]byte("k"), 32))
	ns := &fakeNS{}
	var paths []string
	for i := 0; i < nfs; i++ {
		paths = append(paths, filepath.Join(t.TempDir(), "fs"))
	}
	s, err := New(Config{Node: "n", Addr: "http://unused", Key: key, Namespace: ns, Paths: paths,
		Store: func(p string) (backend.Store, error) {
			return posix.New(p, posix.Options{IO: backend.IODirect, Sync: true}), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the first reply initializes them
		if _, _, err := s.beat(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return s, ns, key, paths
}

func writeCap(fid uint64, layout string, n int) *capability.Capability {
	c := &capability.Capability{Fid: fid, Write: true, Path: "/f", Layout: layout, Checksums: []string{"adler32", "md5"},
		Expires: time.Now().Add(time.Minute).Unix()}
	for i := 0; i < n; i++ {
		c.Targets = append(c.Targets, capability.Target{FsID: uint32(i + 1), Addr: "http://unused"})
	}
	return c
}

func TestUploadOutOfOrderAndReadBack(t *testing.T) {
	for _, tc := range []struct {
		layout string
		n      int
	}{{"plain", 1}, {"replica:3", 3}, {"ec:4+2:65536", 6}} {
		s, ns, key, paths := newServer(t, tc.n)
		c := writeCap(42, tc.layout, tc.n)
		u, err := s.NewUpload(context.Background(), c, key.Sign(c), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 1<<20+17)
		rand.Read(data)
		// Parallel streams deliver chunks out of order.
		chunks := [][2]int{{300000, 600000}, {0, 300000}, {900000, len(data)}, {600000, 900000}}
		for _, ch := range chunks {
			if _, err := u.WriteAt(data[ch[0]:ch[1]], int64(ch[0])); err != nil {
				t.Fatal(err)
			}
		}
		if err := u.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(ns.commits) != 1 || ns.commits[0].Size != int64(len(data)) || ns.commits[0].Checksums["adler32"] == "" {
			t.Fatalf("%s commit %+v", tc.layout, ns.commits)
		}
		for i, p := range paths {
			m, err := s.mounts[p].store.ReadMeta(42)
			if err != nil || m.Fid != 42 || m.Stripe != i || m.Size != int64(len(data)) || m.Checksums["md5"] != ns.commits[0].Checksums["md5"] {
				t.Fatalf("%s stripe %d meta %+v %v", tc.layout, i, m, err)
			}
		}
		rc := *c
		rc.Write, rc.Size, rc.Sums = false, int64(len(data)), ns.commits[0].Checksums
		f, err := s.Open(context.Background(), &rc, key.Sign(&rc), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
		f.Close()
		if !bytes.Equal(got, data) {
			t.Fatalf("%s read back differs", tc.layout)
		}
	}
}

func TestUploadHoleAndAbortLeaveNothing(t *testing.T) {
	s, ns, key, paths := newServer(t, 6)
	c := writeCap(7, "ec:4+2:65536", 6)
	u, _ := s.NewUpload(context.Background(), c, key.Sign(c), time.Second)
	u.WriteAt(make([]byte, 1000), 0)
	u.WriteAt(make([]byte, 1000), 5000) // gap 1000..5000 never filled
	err := u.Commit(context.Background())
	if kerr.KindOf(err) != kerr.Invalid || !strings.Contains(err.Error(), "hole") {
		t.Fatalf("commit with a hole: %v", err)
	}
	if len(ns.commits) != 0 || len(ns.aborts) != 1 {
		t.Fatalf("commits %v aborts %v", ns.commits, ns.aborts)
	}
	for _, p := range paths {
		if _, err := os.Stat(posix.PhysPath(p, 7)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stripe left behind: %v", err)
		}
	}
	// A namespace that refuses the commit also leaves nothing behind.
	ns.failCommit = true
	c = writeCap(8, "plain", 1)
	u, _ = s.NewUpload(context.Background(), c, key.Sign(c), time.Second)
	u.Write([]byte("hello"))
	if err := u.Commit(context.Background()); err == nil {
		t.Fatal("commit refused by the namespace reported success")
	}
}

func TestCapabilityChecks(t *testing.T) {
	s, _, key, _ := newServer(t, 1)
	c := writeCap(9, "plain", 1)
	tok := key.Sign(c)
	if _, err := s.Verify(tok, capability.Access{Fid: 10, Write: true}); kerr.KindOf(err) != kerr.Permission {
		t.Fatalf("wrong fid: %v", err)
	}
	rc := *c
	rc.Write = false
	if _, err := s.NewUpload(context.Background(), &rc, key.Sign(&rc), time.Second); kerr.KindOf(err) != kerr.Permission {
		t.Fatalf("upload with read capability: %v", err)
	}
	bad := *c
	bad.Layout = "ec:4+2"
	if _, err := s.NewUpload(context.Background(), &bad, key.Sign(&bad), time.Second); kerr.KindOf(err) != kerr.Invalid {
		t.Fatalf("targets not matching the layout: %v", err)
	}
}

func TestReadOnlyFilesystemRefusesNewStripes(t *testing.T) {
	s, _, key, _ := newServer(t, 1)
	s.local(1).status.Store("ro")
	c := writeCap(11, "plain", 1)
	if _, err := s.NewUpload(context.Background(), c, key.Sign(c), time.Second); kerr.KindOf(err) != kerr.ReadOnly {
		t.Fatalf("write to a ro filesystem: %v", err)
	}
}

// TestWriteCapabilityOneUpload: a write capability used once can never
// touch the committed stripes again, whether the namespace refuses the
// claim or (defence in depth) the stripe file already exists.
func TestWriteCapabilityOneUpload(t *testing.T) {
	for _, tc := range []struct {
		layout string
		n      int
	}{{"plain", 1}, {"replica:2", 2}, {"ec:2+1:65536", 3}} {
		s, ns, key, paths := newServer(t, tc.n)
		c := writeCap(9, tc.layout, tc.n)
		token := key.Sign(c)
		upload := func(b []byte) error {
			u, err := s.NewUpload(context.Background(), c, token, time.Second)
			if err != nil {
				return err
			}
			if _, err := u.Write(b); err != nil {
				u.Abort(context.Background())
				return err
			}
			return u.Commit(context.Background())
		}
		if err := upload([]byte("committed bytes")); err != nil {
			t.Fatal(err)
		}
		before := make([][]byte, len(paths))
		for i, p := range paths {
			before[i], _ = os.ReadFile(posix.PhysPath(p, 9))
		}
		check := func(when string) {
			t.Helper()
			for i, p := range paths {
				if now, err := os.ReadFile(posix.PhysPath(p, 9)); err != nil || !bytes.Equal(now, before[i]) {
					t.Fatalf("%s %s: stripe %d changed by a replayed capability (%v)", tc.layout, when, i, err)
				}
			}
		}
		if err := upload([]byte("replayed")); !kerr.Is(err, kerr.Permission) {
			t.Fatalf("%s: replay after commit: %v", tc.layout, err)
		}
		check("refused claim")
		ns.mu.Lock()
		ns.claimed = nil // a namespace that wrongly allowed the claim
		ns.mu.Unlock()
		if err := upload([]byte("replayed")); err == nil {
			t.Fatalf("%s: replay over existing stripes accepted", tc.layout)
		}
		check("existing stripes")
	}
}

// TestFilesystemIdentity: a filesystem whose root loses its identity
// marker (its mount went away) goes offline with the reason, takes no new
// stripe and is never recreated; it comes back when the marker does.
func TestFilesystemIdentity(t *testing.T) {
	s, ns, key, paths := newServer(t, 1)
	root := paths[0]
	if id, err := s.mounts[root].store.Identity(); err != nil || id.FsID != 1 || id.UUID != "u" {
		t.Fatalf("marker after initialization: %+v %v", id, err)
	}
	moved := root + ".mounted"
	if err := os.Rename(root, moved); err != nil { // the mount goes away...
		t.Fatal(err)
	}
	if err := os.Mkdir(root, 0o700); err != nil { // ... and leaves the bare mountpoint
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, _, err := s.beat(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	last := ns.reports[len(ns.reports)-1]
	if !strings.Contains(last.Offline, "marker") || !strings.HasPrefix(last.Health, "offline") {
		t.Fatalf("report after the marker vanished: %+v", last)
	}
	c := writeCap(77, "plain", 1)
	if _, err := s.NewUpload(context.Background(), c, key.Sign(c), time.Second); !kerr.Is(err, kerr.Unavailable) {
		t.Fatalf("upload onto an offline filesystem: %v", err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Fatalf("the bare mountpoint was written to: %v", ents)
	}
	// Another filesystem's disk is not taken for this one either.
	if err := posix.New(root, posix.Options{}).Initialize(backend.Identity{FsID: 9, UUID: "other"}); err != nil {
		t.Fatal(err)
	}
	s.beat(context.Background())
	s.beat(context.Background()) // checked on the reply, reported on the next beat
	if last := ns.reports[len(ns.reports)-1]; !strings.Contains(last.Offline, "fs 9") {
		t.Fatalf("report with a foreign marker: %+v", last)
	}
	os.RemoveAll(root)
	if err := os.Rename(moved, root); err != nil { // remounted
		t.Fatal(err)
	}
	s.beat(context.Background())
	s.beat(context.Background())
	if last := ns.reports[len(ns.reports)-1]; last.Offline != "" || last.Health != "ok" {
		t.Fatalf("report after remount: %+v", last)
	}
	c = writeCap(78, "plain", 1)
	u, err := s.NewUpload(context.Background(), c, key.Sign(c), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	u.Write([]byte("back"))
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestStreamMemoryBudget: streams whose buffers do not fit in the budget
// wait for a place (and are told the server is busy when they waited too
// long), instead of growing the server's memory.
func TestStreamMemoryBudget(t *testing.T) {
	s, _, key, _ := newServer(t, 1)
	l, _ := layout.Parse("plain")
	s.budget = newBudget(uploadMemory(l, s.local(1).store.WriteMemory(createOptions(l)))) // room for exactly one plain upload
	c1, c2 := writeCap(101, "plain", 1), writeCap(102, "plain", 1)
	u1, err := s.NewUpload(context.Background(), c1, key.Sign(c1), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewUpload(context.Background(), c2, key.Sign(c2), 50*time.Millisecond); !kerr.Is(err, kerr.Busy) || !strings.Contains(err.Error(), "stream memory") {
		t.Fatalf("second upload over the budget: %v", err)
	}
	got := make(chan error, 1)
	go func() {
		u2, err := s.NewUpload(context.Background(), c2, key.Sign(c2), 10*time.Second)
		if err == nil {
			u2.Write([]byte("two"))
			err = u2.Commit(context.Background())
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("second upload admitted while the first holds the budget: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	u1.Write([]byte("one"))
	if err := u1.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("second upload not admitted within 10s after the first committed")
	}
	// An aborted upload gives its memory back too.
	c3 := writeCap(103, "plain", 1)
	u3, err := s.NewUpload(context.Background(), c3, key.Sign(c3), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	u3.Abort(context.Background())
	c4 := writeCap(104, "plain", 1)
	if _, err := s.NewUpload(context.Background(), c4, key.Sign(c4), time.Second); err != nil {
		t.Fatalf("budget not released by an abort: %v", err)
	}
}

// An erasure-coded upload aborted while its encoder still writes rows
// (a client cut off mid-body) stops the encoder before its local stripe
// writers are closed: closing one under a write crashed the server.
func TestECAbortWhileEncoding(t *testing.T) {
	s, ns, key, paths := newServer(t, 6)
	data := make([]byte, 8<<20)
	for i := 0; i < 20; i++ {
		fid := uint64(500 + i)
		c := writeCap(fid, "ec:4+2:65536", 6)
		u, err := s.NewUpload(context.Background(), c, key.Sign(c), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := u.Write(data); err != nil {
			t.Fatal(err)
		}
		u.Abort(context.Background())
		for _, p := range paths {
			if _, err := os.Stat(posix.PhysPath(p, fid)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("stripe left behind after abort: %v", err)
			}
		}
	}
	if len(ns.commits) != 0 || len(ns.aborts) != 20 {
		t.Fatalf("commits %v, %d aborts", ns.commits, len(ns.aborts))
	}
}

// A write the upload refuses (a rewrite of bytes already written, a
// truncate to another size) voids the upload: the close that follows
// fails with the reason and nothing is committed or left on disk.
func TestRefusedWriteVoidsUpload(t *testing.T) {
	s, ns, key, paths := newServer(t, 1)
	for i, refuse := range []func(u *Upload) error{
		func(u *Upload) error { _, err := u.WriteAt([]byte("second"), 0); return err },
		func(u *Upload) error { return u.Truncate(3) },
	} {
		fid := uint64(600 + i)
		c := writeCap(fid, "plain", 1)
		u, err := s.NewUpload(context.Background(), c, key.Sign(c), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := u.WriteAt([]byte("first data"), 0); err != nil {
			t.Fatal(err)
		}
		rerr := refuse(u)
		if kerr.KindOf(rerr) != kerr.Unsupported {
			t.Fatalf("refused operation %d: %v, want Unsupported", i, rerr)
		}
		if _, err := u.WriteAt([]byte("more"), 10); err == nil {
			t.Fatalf("refused operation %d: a write after it was accepted", i)
		}
		if err := u.Commit(context.Background()); err == nil || err.Error() != rerr.Error() {
			t.Fatalf("refused operation %d: close after it: %v, want %v", i, err, rerr)
		}
		if _, err := os.Stat(posix.PhysPath(paths[0], fid)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("refused operation %d: stripe left behind: %v", i, err)
		}
	}
	if len(ns.commits) != 0 || len(ns.aborts) != 2 {
		t.Fatalf("commits %v aborts %v", ns.commits, ns.aborts)
	}
}

// TestUploadCRC32CFolded: an upload's crc32c comes from what its
// stripes sum anyway (an erasure writer's data frames, a plain or
// replicated stripe's block sums), not a second pass over the stream; it
// is the crc32c of the bytes in the middle of the upload (what a copy
// checks before committing), in the commit and in every stripe's
// metadata, for the default set and for crc32c beside another type.
func TestUploadCRC32CFolded(t *testing.T) {
	for _, tc := range []struct {
		layout string
		n      int
	}{{"plain", 1}, {"replica:3", 3}, {"ec:4+2:65536", 6}} {
		for _, types := range [][]string{nil, {"md5", "crc32c"}} {
			s, ns, key, paths := newServer(t, tc.n)
			c := writeCap(43, tc.layout, tc.n)
			c.Checksums = types
			u, err := s.NewUpload(context.Background(), c, key.Sign(c), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, typ := range u.sums.Types() {
				if typ == "crc32c" {
					t.Fatalf("%s %v: the upload hashes crc32c over the stream besides its stripes", tc.layout, types)
				}
			}
			data := make([]byte, 3<<20+12345)
			rand.Read(data)
			half := 1<<20 + 777
			if _, err := u.Write(data[:half]); err != nil {
				t.Fatal(err)
			}
			if got, want := u.Sums()["crc32c"], fmt.Sprintf("%08x", crc32.Checksum(data[:half], crc32.MakeTable(crc32.Castagnoli))); got != want {
				t.Fatalf("%s %v: crc32c after %d bytes %s, want %s", tc.layout, types, half, got, want)
			}
			if _, err := u.Write(data[half:]); err != nil {
				t.Fatal(err)
			}
			if err := u.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("%08x", crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
			if got := ns.commits[0].Checksums["crc32c"]; got != want {
				t.Fatalf("%s %v: committed crc32c %s, want %s (all: %v)", tc.layout, types, got, want, ns.commits[0].Checksums)
			}
			if len(types) == 0 && ns.commits[0].Checksums["adler32"] == "" || len(types) > 0 && ns.commits[0].Checksums["md5"] == "" {
				t.Fatalf("%s %v: the other checksums are missing: %v", tc.layout, types, ns.commits[0].Checksums)
			}
			for i, p := range paths {
				if m, err := s.mounts[p].store.ReadMeta(43); err != nil || m.Checksums["crc32c"] != want {
					t.Fatalf("%s %v: stripe %d meta %+v %v", tc.layout, types, i, m, err)
				}
			}
		}
	}
}

// oddReader delivers a body in pieces of odd sizes.
type oddReader struct {
	data []byte
	i    int
}

func (r *oddReader) Read(p []byte) (int, error) {
	if r.i == len(r.data) {
		return 0, io.EOF
	}
	n := min(len(p), 1+(r.i*7919+12345)%200000, len(r.data)-r.i)
	copy(p, r.data[r.i:r.i+n])
	r.i += n
	return n, nil
}

// TestUploadReadFromStoresTheBody: a body read by ReadFrom (an HTTP
// PUT's) is stored byte for byte in every stripe, with its block sums
// and checksums, whatever its size and the sizes its pieces arrive in.
func TestUploadReadFromStoresTheBody(t *testing.T) {
	sizes := []int{0, 1, 4095, 4097, 65537, 1<<20 - 1, 1 << 20, 1<<20 + 1, 3<<20 + 12345}
	for _, tc := range []struct {
		layout string
		n      int
	}{{"plain", 1}, {"replica:3", 3}, {"ec:4+2:65536", 6}} {
		s, ns, key, paths := newServer(t, tc.n)
		for k, size := range sizes {
			fid := uint64(100 + k)
			c := writeCap(fid, tc.layout, tc.n)
			c.Checksums = []string{"adler32", "crc32c", "md5"}
			u, err := s.NewUpload(context.Background(), c, key.Sign(c), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			data := make([]byte, size)
			rand.Read(data)
			r := &oddReader{data: data}
			if n, err := u.ReadFrom(r); err != nil || n != int64(size) {
				t.Fatalf("%s %d bytes: ReadFrom %d %v", tc.layout, size, n, err)
			}
			if err := u.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			cm := ns.commits[len(ns.commits)-1]
			crc := fmt.Sprintf("%08x", crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
			if cm.Fid != fid || cm.Size != int64(size) || cm.Checksums["crc32c"] != crc ||
				cm.Checksums["adler32"] != fmt.Sprintf("%08x", adler32.Checksum(data)) ||
				cm.Checksums["md5"] != fmt.Sprintf("%x", md5.Sum(data)) {
				t.Fatalf("%s %d bytes: commit %+v, want crc32c %s", tc.layout, size, cm, crc)
			}
			if tc.layout != "ec:4+2:65536" {
				for i, p := range paths { // every replica, its block sums verified
					rd, err := s.mounts[p].store.Open(fid)
					if err != nil {
						t.Fatal(err)
					}
					got, err := io.ReadAll(io.NewSectionReader(rd, 0, rd.Size()))
					rd.Close()
					if err != nil || !bytes.Equal(got, data) {
						t.Fatalf("%s %d bytes: stripe %d reads back %d bytes, %v", tc.layout, size, i, len(got), err)
					}
				}
			}
			rc := *c
			rc.Write, rc.Size, rc.Sums = false, int64(size), cm.Checksums
			f, err := s.Open(context.Background(), &rc, key.Sign(&rc), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
			f.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s %d bytes: read back %d bytes, %v", tc.layout, size, len(got), err)
			}
		}
	}
}

package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend/posix"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// upload writes data as fid with layout onto fs 1..n and returns its
// read capability (size and checksums as committed).
func upload(t *testing.T, s *Server, ns *fakeNS, key *capability.Key, fid uint64, layout string, n int, data []byte) *capability.Capability {
	t.Helper()
	c := writeCap(fid, layout, n)
	u, err := s.NewUpload(context.Background(), c, key.Sign(c), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	u.Write(data)
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc := *c
	rc.Write, rc.Checksums, rc.Size, rc.Sums = false, nil, int64(len(data)), ns.commits[len(ns.commits)-1].Checksums
	return &rc
}

func moveOrder(key *capability.Key, rc *capability.Capability, stripe int, to uint32) message.MoveOrder {
	c := *rc
	c.Move = &capability.Move{Stripe: stripe, Dst: capability.Target{FsID: to, Addr: "http://unused"}}
	return message.MoveOrder{Token: key.Sign(&c)}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readData reads the data of stripe fid in the posix filesystem at root
// (its block sums and footer left out).
func readData(t *testing.T, root string, fid uint64) []byte {
	t.Helper()
	r, err := posix.New(root, posix.Options{}).Open(fid)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.NewSectionReader(r, 0, r.Size()))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func flipByte(t *testing.T, p string, at int64) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, at)
	b[0] ^= 0x20
	f.WriteAt(b, at)
}

// TestMoveECStripe: an EC stripe moves by copy when its own copy checks
// out, and is rebuilt from the others when it is corrupt or missing; the
// new stripe is byte for byte the original, with the file's metadata.
func TestMoveECStripe(t *testing.T) {
	s, ns, key, paths := newServer(t, 8)
	data := make([]byte, 5<<20+333)
	rand.Read(data)
	rc := upload(t, s, ns, key, 77, "ec:4+2:65536", 6, data)
	orig := readFile(t, posix.PhysPath(paths[2], 77))
	for _, tc := range []struct {
		name   string
		to     uint32
		damage func()
		how    string
	}{
		{"intact", 7, func() {}, message.MovedCopy},
		{"corrupt", 8, func() { flipByte(t, posix.PhysPath(paths[2], 77), 70000) }, message.MovedRebuilt},
	} {
		tc.damage()
		res, err := s.MoveStripe(context.Background(), moveOrder(key, rc, 2, tc.to))
		if err != nil || res.How != tc.how || res.Bytes != int64(len(orig)) {
			t.Fatalf("%s: %+v %v", tc.name, res, err)
		}
		if got := readFile(t, posix.PhysPath(paths[tc.to-1], 77)); !bytes.Equal(got, orig) {
			t.Fatalf("%s: the moved stripe differs from the original", tc.name)
		}
		m, err := s.mounts[paths[tc.to-1]].store.ReadMeta(77)
		if err != nil || m.Stripe != 2 || m.Size != int64(len(data)) || m.Layout != rc.Layout || m.Checksums["adler32"] != rc.Sums["adler32"] {
			t.Fatalf("%s: meta %+v %v", tc.name, m, err)
		}
		if tc.how == message.MovedRebuilt && !strings.Contains(res.Tried, "crc32c") {
			t.Fatalf("%s: tried %q does not say why the copy was given up", tc.name, res.Tried)
		}
		os.Remove(posix.PhysPath(paths[tc.to-1], 77))
	}
	// Missing, and too few others left: refused, nothing left on the target.
	os.Remove(posix.PhysPath(paths[2], 77))
	os.Remove(posix.PhysPath(paths[0], 77))
	os.Remove(posix.PhysPath(paths[1], 77))
	_, err := s.MoveStripe(context.Background(), moveOrder(key, rc, 2, 7))
	if err == nil || !strings.Contains(err.Error(), "need 4") {
		t.Fatalf("move with 3 of 6 stripes: %v", err)
	}
	if _, err := os.Stat(posix.PhysPath(paths[6], 77)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed move left a stripe: %v", err)
	}
}

// TestMoveReplica: a replica is copied from a replica whose blocks
// verify (and match the file's checksum), and the damaged source is
// repaired in the background; a plain file whose only copy is damaged
// cannot move, leaves nothing behind and is marked damaged.
func TestMoveReplica(t *testing.T) {
	s, ns, key, paths := newServer(t, 3)
	data := make([]byte, 3<<20+5)
	rand.Read(data)
	rc := upload(t, s, ns, key, 5, "replica:2", 2, data)
	flipByte(t, posix.PhysPath(paths[0], 5), 12345)
	res, err := s.MoveStripe(context.Background(), moveOrder(key, rc, 0, 3))
	if err != nil || res.How != message.MovedCopy || !strings.Contains(res.Tried, "replica 0") ||
		!strings.Contains(res.Tried, "crc32c") || !strings.HasPrefix(res.Checksum, "adler32=") {
		t.Fatalf("move from a damaged replica: %+v %v", res, err)
	}
	if got := readData(t, paths[2], 5); !bytes.Equal(got, data) {
		t.Fatal("the moved replica differs from the file")
	}
	s.heal.wg.Wait()
	if got := readData(t, paths[0], 5); !bytes.Equal(got, data) {
		t.Fatal("the damaged source was not repaired")
	}
	// Plain, damaged: no source.
	rc = upload(t, s, ns, key, 6, "plain", 1, data)
	flipByte(t, posix.PhysPath(paths[0], 6), 99)
	if _, err := s.MoveStripe(context.Background(), moveOrder(key, rc, 0, 2)); !kerr.Is(err, kerr.IO) || !strings.Contains(err.Error(), "crc32c") {
		t.Fatalf("move of a damaged plain file: %v", err)
	}
	s.heal.wg.Wait()
	if r, err := s.local(1).store.Open(6); err != nil || !strings.Contains(r.Damaged(), "no other copy") {
		t.Fatalf("the damaged plain file's copy is not marked damaged: %v", err)
	}
	if _, err := os.Stat(posix.PhysPath(paths[1], 6)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed move left a stripe: %v", err)
	}
}

// TestMoveOrdersAreInternal: a client's read capability is not a move
// order; a move or staged capability is refused where clients come; a
// move onto an offline filesystem is refused, one onto a filesystem this
// server still believes read-only is not (the namespace, which ordered
// it, knows the current configstatus; this server learns it a heartbeat
// later).
func TestMoveOrdersAreInternal(t *testing.T) {
	s, ns, key, _ := newServer(t, 2)
	rc := upload(t, s, ns, key, 9, "plain", 1, []byte("hello"))
	if _, err := s.MoveStripe(context.Background(), message.MoveOrder{Token: key.Sign(rc)}); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("a read capability as a move order: %v", err)
	}
	order := moveOrder(key, rc, 0, 2)
	if _, err := s.Verify(order.Token, capability.Access{Fid: 9}); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("a move order at a client endpoint: %v", err)
	}
	wc := writeCap(10, "plain", 1)
	wc.Staged = true
	if _, err := s.NewUpload(context.Background(), wc, key.Sign(wc), time.Second); !kerr.Is(err, kerr.Permission) {
		t.Fatalf("a staged capability as an upload: %v", err)
	}
	s.local(2).offline.Store("identity marker missing")
	if _, err := s.MoveStripe(context.Background(), order); !kerr.Is(err, kerr.Unavailable) {
		t.Fatalf("a move onto an offline filesystem: %v", err)
	}
	s.local(2).offline.Store("")
	s.local(2).status.Store("ro")
	if _, err := s.MoveStripe(context.Background(), order); err != nil {
		t.Fatalf("a move ordered onto a filesystem this server still believes ro: %v", err)
	}
}

// TestConvertStaged: a conversion copies the file into a staged upload
// of another layout whose stripes are finished with the file's checksums
// and never committed to the namespace.
func TestConvertStaged(t *testing.T) {
	s, ns, key, paths := newServer(t, 6)
	data := make([]byte, 2<<20+1)
	rand.Read(data)
	rc := upload(t, s, ns, key, 11, "replica:2", 2, data)
	commits := len(ns.commits)
	wc := writeCap(12, "ec:4+2:65536", 6)
	wc.Staged = true
	res, err := s.Convert(context.Background(), message.ConvertOrder{Read: key.Sign(rc), Write: key.Sign(wc)})
	if err != nil || res.Size != int64(len(data)) || res.Checksums["adler32"] != rc.Sums["adler32"] {
		t.Fatalf("convert: %+v %v", res, err)
	}
	if len(ns.commits) != commits || len(ns.claimed) != commits {
		t.Fatalf("a staged copy was claimed or committed: %d commits, %d claims", len(ns.commits), len(ns.claimed))
	}
	for i, p := range paths {
		if m, err := s.mounts[p].store.ReadMeta(12); err != nil || m.Stripe != i || m.Layout != wc.Layout {
			t.Fatalf("staged stripe %d: %+v %v", i, m, err)
		}
	}
	ec := *wc
	ec.Write, ec.Staged, ec.Size, ec.Sums = false, false, res.Size, res.Checksums
	f, err := s.Open(context.Background(), &ec, key.Sign(&ec), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
	f.Close()
	if !bytes.Equal(got, data) {
		t.Fatal("the converted copy differs")
	}
}

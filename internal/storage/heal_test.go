package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/backend/backendtest"
	"github.com/kaon-storage/kaon/internal/backend/memstore"
	"github.com/kaon-storage/kaon/internal/capability"
	"github.com/kaon-storage/kaon/internal/cluster/message"
	"github.com/kaon-storage/kaon/internal/kerr"
	"github.com/kaon-storage/kaon/internal/storage/storagetest"
)

// Bitrot on the read paths: memory stores whose bytes are flipped behind
// their back (memstore.Corrupt), read through the storage core.

// bitrotFile uploads size random bytes with layout lay, its stripes
// spread over two servers as spread places them, and returns the read
// capability and the data.
func bitrotFile(t *testing.T, servers []*Server, ns *storagetest.Namespace, key *capability.Key, fid uint64, lay string, n, size int) (*capability.Capability, []byte) {
	t.Helper()
	c := spread(fid, lay, n, 2)
	u, err := servers[0].NewUpload(context.Background(), c, key.Sign(c), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	rand.Read(data)
	if _, err := u.ReadFrom(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	commit, _ := ns.Committed(fid)
	rc := *c
	rc.Write, rc.Size, rc.Sums = false, int64(size), commit.Checksums
	return &rc, data
}

// storeOf is the memory store holding stripe i of c.
func storeOf(stores map[string]*memstore.Store, c *capability.Capability, i int) *memstore.Store {
	id := c.Targets[i].FsID
	return stores[fmt.Sprintf("/s%d/fs%d", (id-1)/3, (id-1)%3)]
}

// stripeBytes reads stripe i of c as its store holds it, and whether
// every block of it verified.
func stripeBytes(t *testing.T, stores map[string]*memstore.Store, c *capability.Capability, i int) ([]byte, error) {
	t.Helper()
	r, err := storeOf(stores, c, i).Open(c.Fid)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b := make([]byte, r.Size())
	n, err := r.ReadAt(b, 0)
	if err == io.EOF && n == len(b) {
		err = nil
	}
	return b[:n], err
}

// readAll reads the whole file through s, then every range of 100 KiB
// at an odd offset.
func readAll(t *testing.T, s *Server, key *capability.Key, c *capability.Capability, data []byte) {
	t.Helper()
	f, err := s.Open(context.Background(), c, key.Sign(c), time.Second)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer f.Close()
	var got bytes.Buffer
	if _, err := Copy(&got, f); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("whole read: %v, %d bytes, equal %v", err, got.Len(), bytes.Equal(got.Bytes(), data))
	}
	p := make([]byte, 100<<10)
	for off := int64(777); off < int64(len(data)); off += int64(len(p)) {
		n, err := f.ReadAt(p, off)
		if (err != nil && err != io.EOF) || !bytes.Equal(p[:n], data[off:off+int64(n)]) || n != min(len(p), len(data)-int(off)) {
			t.Fatalf("range at %d: %d bytes, %v", off, n, err)
		}
	}
}

// bitrotOf is what s counts for the filesystem holding stripe i of c.
func bitrotOf(t *testing.T, s *Server, c *capability.Capability, i int) BitrotStats {
	t.Helper()
	for _, b := range s.BitrotStats() {
		if b.FsID == c.Targets[i].FsID {
			return b
		}
	}
	t.Fatalf("no bitrot counters for fs %d", c.Targets[i].FsID)
	return BitrotStats{}
}

// TestBitrotReplicaHealed: both copies of a replica:2 file rot, each in
// other blocks (the middle and the last); reads through either server
// return the file byte-exact (each range from the copy that verifies),
// and each server mends its own copy from the other.
func TestBitrotReplicaHealed(t *testing.T) {
	servers, ns, key, stores := memServers(t, 2, 3)
	const size = 1<<20 + 12345 // 257 memstore blocks of 4 KiB
	c, data := bitrotFile(t, servers, ns, key, 60, "replica:2", 2, size)
	storeOf(stores, c, 0).Corrupt(60, 500_000)
	storeOf(stores, c, 1).Corrupt(60, 300_000)
	storeOf(stores, c, 1).Corrupt(60, size-1)
	for i := range 2 {
		if _, err := stripeBytes(t, stores, c, i); err == nil {
			t.Fatalf("copy %d reads clean after rotting", i)
		}
	}
	readAll(t, servers[0], key, c, data)
	readAll(t, servers[1], key, c, data)
	for _, s := range servers {
		s.heal.wg.Wait()
	}
	for i := range 2 {
		if got, err := stripeBytes(t, stores, c, i); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("copy %d after the reads: %v, equal %v", i, err, bytes.Equal(got, data))
		}
		// Each copy is counted by the server holding it (spread puts copy i on server i).
		if b := bitrotOf(t, servers[i], c, i); b.ReadBad == 0 || b.Repaired != 1 || b.Damaged+b.Failed != 0 {
			t.Fatalf("counters of copy %d's filesystem: %+v", i, b)
		}
	}
}

// TestBitrotPlainFails: the only copy of a plain file rots: a read
// returns the good bytes before the bad block and then an I/O error
// naming the file and the block, never a byte of it; the copy is then
// marked damaged, and the next open fails at once saying so.
func TestBitrotPlainFails(t *testing.T) {
	servers, ns, key, stores := memServers(t, 2, 3)
	c, data := bitrotFile(t, servers, ns, key, 61, "plain", 1, 200_000)
	storeOf(stores, c, 0).Corrupt(61, 100_000)
	f, err := servers[0].Open(context.Background(), c, key.Sign(c), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, len(data))
	n, err := f.ReadAt(p, 0)
	f.Close()
	bad := int64(100_000 / memstore.BlockSize * memstore.BlockSize)
	if !kerr.Is(err, kerr.IO) || !strings.Contains(err.Error(), "/f") || !strings.Contains(err.Error(), "crc32c") ||
		int64(n) != bad || !bytes.Equal(p[:n], data[:n]) {
		t.Fatalf("read of a rotten plain file: %d bytes (want the %d before the bad block), %v", n, bad, err)
	}
	if bytes.Contains(p[n:], data[bad+4096:bad+4200]) {
		t.Fatal("bytes past the bad block were left in the caller's buffer")
	}
	servers[0].heal.wg.Wait()
	if b := bitrotOf(t, servers[0], c, 0); b.ReadBad != 1 || b.Damaged != 1 || b.Repaired+b.Failed != 0 {
		t.Fatalf("counters of the plain file's filesystem: %+v", b)
	}
	_, err = servers[0].Open(context.Background(), c, key.Sign(c), time.Second)
	if !kerr.Is(err, kerr.IO) || !strings.Contains(err.Error(), "/f") || !strings.Contains(err.Error(), "damaged beyond repair") ||
		!strings.Contains(err.Error(), "no other copy") {
		t.Fatalf("open of a plain file known damaged: %v", err)
	}
	// Through the other server (a peer's copy): refused too.
	if _, err := io.ReadAll(io.NewSectionReader(mustOpen(t, servers[1], key, c), 0, c.Size)); err == nil ||
		!strings.Contains(err.Error(), "damaged") {
		t.Fatalf("read of a damaged peer copy: %v", err)
	}
}

func mustOpen(t *testing.T, s *Server, key *capability.Key, c *capability.Capability) File {
	t.Helper()
	f, err := s.Open(context.Background(), c, key.Sign(c), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestBitrotECRebuilt: frames of two stripes of an ec:4+2 file rot, one
// on the entry server, one on its peer: the file reads byte-exact
// (reconstructed), and both stripes are rebuilt as they were.
func TestBitrotECRebuilt(t *testing.T) {
	servers, ns, key, stores := memServers(t, 2, 3)
	c, data := bitrotFile(t, servers, ns, key, 62, "ec:4+2:65536", 6, 1<<20+777)
	var orig [][]byte
	for i := range 6 {
		b, err := stripeBytes(t, stores, c, i)
		if err != nil {
			t.Fatal(err)
		}
		orig = append(orig, b)
	}
	storeOf(stores, c, 0).Corrupt(62, 70_000) // on s0, the entry
	storeOf(stores, c, 1).Corrupt(62, 65_540) // on s1
	f := mustOpen(t, servers[0], key, c)
	var got bytes.Buffer
	if _, err := Copy(&got, f); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("read of an ec file with rotten frames: %v, equal %v", err, bytes.Equal(got.Bytes(), data))
	}
	f.Close()
	servers[0].heal.wg.Wait()
	for _, i := range []int{0, 1} {
		if b, err := stripeBytes(t, stores, c, i); err != nil || !bytes.Equal(b, orig[i]) {
			t.Fatalf("stripe %d after the read: %v, rebuilt as it was: %v", i, err, bytes.Equal(b, orig[i]))
		}
		if b := bitrotOf(t, servers[i], c, i); b.ReadBad != 1 || b.Repaired != 1 || b.Failed != 0 {
			t.Fatalf("counters of stripe %d's filesystem: %+v", i, b)
		}
	}
}

// TestScrubBlockSums: a scrub finds a rotten block of a replica
// (blockxs_err) and of a plain file's only copy, which it also marks
// damaged; it gives a stripe written before block sums its sums when its
// bytes match its checksum, and not when they do not.
func TestScrubBlockSums(t *testing.T) {
	rep := write(t, "replica:2", 50000)
	rep.stores[1].Corrupt(42, 30000)
	rep.stores[1].Corrupt(42, 40000)
	found := rep.scan(t, 1, true)
	if len(found) != 1 || !strings.Contains(found[0].BlockErr, "2 blocks") || !strings.Contains(found[0].BlockErr, "block 7 ") {
		t.Fatalf("scrub of a rotten replica: %+v", found)
	}
	var bad atomic.Int64
	if err := walkStore(context.Background(), rep.stores[1], &scanOptions{Scrub: true, Bad: &bad},
		func([]message.FsckStripe, int64, int64) error { return nil }); err != nil || bad.Load() != 2 {
		t.Fatalf("a scrub counted %d bad blocks of 2 (%v)", bad.Load(), err)
	}
	if r, _ := rep.stores[1].Open(42); r.Damaged() != "" {
		t.Fatal("a scrub marked a replica damaged (reads mend it from the other copy)")
	}
	plain := write(t, "plain", 50000)
	plain.stores[0].Corrupt(42, 49999)
	if found := plain.scan(t, 0, true); len(found) != 1 || found[0].BlockErr == "" {
		t.Fatalf("scrub of a rotten plain file: %+v", found)
	}
	if r, _ := plain.stores[0].Open(42); !strings.Contains(r.Damaged(), "block 12 ") {
		t.Fatalf("the plain file's damaged copy is not marked: %q", r.Damaged())
	}

	old := write(t, "replica:2", 50000)
	old.stores[0].Legacy(42)
	old.stores[1].Legacy(42)
	old.stores[1].Corrupt(42, 100) // rotted before it had sums
	for i, want := range []bool{true, false} {
		o := &scanOptions{Scrub: true, AddSums: true}
		err := walkStore(context.Background(), old.stores[i], o, func([]message.FsckStripe, int64, int64) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		added := o.Added
		r, _ := old.stores[i].Open(42)
		if r.BlockSums() != want || (added == 1) != want {
			t.Fatalf("legacy stripe %d (bytes match its checksum: %v): block sums %v, %d added", i, want, r.BlockSums(), added)
		}
	}
	if got := old.stripe(t, 0); !bytes.Equal(got, old.data) {
		t.Fatal("the stripe given sums reads differently")
	}
}

// TestBitrotAfterUpdate: the blocks an update wrote carry current sums
// (backend/journal.go): both copies of an updated replica:2 file rot,
// each in other updated blocks; reads return the new content byte-exact
// from the copy that verifies, never a rotten byte, and each server
// mends its copy from the other, at the new version.
func TestBitrotAfterUpdate(t *testing.T) {
	servers, ns, key, stores := memServers(t, 2, 3)
	const size = 200_000
	c := spread(64, "replica:2", 2, 2)
	m := &backendtest.Model{B: make([]byte, size)}
	rand.Read(m.B)
	uploaded(t, servers, key, c, m.B)
	uc := updateCap(t, ns, c)
	u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct{ off, n int64 }{{5000, 100}, {100_000, 30_000}, {size - 10, 20_000}} {
		p := make([]byte, w.n)
		rand.Read(p)
		if _, err := u.WriteAt(p, w.off); err != nil {
			t.Fatal(err)
		}
		m.WriteAt(p, w.off)
	}
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	servers[0].applying.Wait() // the stores are read below, not through a server
	rc := readCap(t, ns, c)
	if rc.DataVersion != 1 || rc.Size != int64(len(m.B)) {
		t.Fatalf("after the update: version %d, %d bytes", rc.DataVersion, rc.Size)
	}
	for i := range 2 {
		if got, err := stripeBytes(t, stores, c, i); err != nil || !bytes.Equal(got, m.B) {
			t.Fatalf("copy %d after the update: %v, equal %v", i, err, bytes.Equal(got, m.B))
		}
	}
	storeOf(stores, c, 0).Corrupt(64, 5050)    // a block the first write changed in part
	storeOf(stores, c, 1).Corrupt(64, 110_000) // one the second wrote whole
	storeOf(stores, c, 1).Corrupt(64, size+5)  // the extension
	for i := range 2 {
		if _, err := stripeBytes(t, stores, c, i); err == nil {
			t.Fatalf("copy %d reads clean after its updated blocks rotted", i)
		}
	}
	readAll(t, servers[0], key, rc, m.B)
	readAll(t, servers[1], key, rc, m.B)
	for _, s := range servers {
		s.heal.wg.Wait()
	}
	for i := range 2 {
		if got, err := stripeBytes(t, stores, c, i); err != nil || !bytes.Equal(got, m.B) {
			t.Fatalf("copy %d after the reads: %v, equal %v", i, err, bytes.Equal(got, m.B))
		}
		if b := bitrotOf(t, servers[i], c, i); b.Repaired != 1 || b.Damaged+b.Failed != 0 {
			t.Fatalf("counters of copy %d's filesystem: %+v", i, b)
		}
	}
}

// TestHealOfAnOlderVersion: a repair asked with a capability of the
// version before an update (a read that began before it) leaves the
// copy alone: it neither puts back bytes of the old version nor marks
// the copy damaged because no copy holds that version any more; a
// repair at the new version mends it.
func TestHealOfAnOlderVersion(t *testing.T) {
	servers, ns, key, stores := memServers(t, 2, 3)
	c := spread(65, "replica:2", 2, 2)
	m := &backendtest.Model{B: make([]byte, 50_000)}
	rand.Read(m.B)
	uploaded(t, servers, key, c, m.B)
	old := readCap(t, ns, c)
	uc := updateCap(t, ns, c)
	u, err := servers[0].NewUpdate(context.Background(), uc, key.Sign(uc))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.WriteAt([]byte("new bytes"), 20_000); err != nil { // the size stays
		t.Fatal(err)
	}
	m.WriteAt([]byte("new bytes"), 20_000)
	if err := u.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	servers[0].applying.Wait() // the copy is corrupted below, not read through a server
	storeOf(stores, c, 0).Corrupt(65, 20_001)
	servers[0].healReplica(old, key.Sign(old), 0, fmt.Errorf("a read of the old version met a bad block"))
	servers[0].heal.wg.Wait()
	r, err := storeOf(stores, c, 0).Open(65)
	if err != nil {
		t.Fatal(err)
	}
	damaged := r.Damaged()
	r.Close()
	if _, err := stripeBytes(t, stores, c, 0); err == nil || damaged != "" {
		t.Fatalf("a repair at the old version touched the updated copy: read %v, damage mark %q", err, damaged)
	}
	rc := readCap(t, ns, c)
	servers[0].healReplica(rc, key.Sign(rc), 0, fmt.Errorf("a bad block"))
	servers[0].heal.wg.Wait()
	if got, err := stripeBytes(t, stores, c, 0); err != nil || !bytes.Equal(got, m.B) {
		t.Fatalf("after a repair at the new version: %v, equal %v", err, bytes.Equal(got, m.B))
	}
}

package health

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// bitrotCluster starts a namespace server and two storage servers with
// four filesystems each, every one with a root:// listener; it returns
// the namespace server and the storage servers' HTTP URLs.
func bitrotCluster(t *testing.T) (*harness.Process, []string) {
	t.Helper()
	mdir := t.TempDir()
	m := harness.Start(t, mdir, "mgm", "--data", mdir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--cap-ttl", "5s")
	key := filepath.Join(mdir, "keys", "capability.key")
	var fsts []string
	for i, port := range harness.FreePorts(t, 2) {
		d := t.TempDir()
		fsts = append(fsts, fmt.Sprintf("http://127.0.0.1:%d", port))
		args := []string{"fst", "--mgm", m.EP.HTTP, "--key", key, "--http", fmt.Sprintf("127.0.0.1:%d", port), "--xrootd", "127.0.0.1:0",
			"--node", fmt.Sprintf("node%d", i), "--data", d}
		for j := range 4 {
			args = append(args, "--fs", filepath.Join(d, fmt.Sprintf("fs%d", j)))
		}
		harness.Start(t, d, args...)
	}
	harness.WaitFor(t, 30*time.Second, "every filesystem to boot", func() bool {
		return strings.Count(m.MustKaon("fs", "ls"), " booted ") == 8
	})
	return m, fsts
}

// fstCount sums a storage counter with labels want over the storage
// servers' /metrics.
func fstCount(t *testing.T, fsts []string, name string, want map[string]string) float64 {
	t.Helper()
	sum := 0.0
	for _, url := range fsts {
		v, _ := value(scrape(t, url), name, want)
		sum += v
	}
	return sum
}

// client runs a client command with a deadline naming step.
func client(t *testing.T, step string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("%s: %s did not finish within 2m", step, name)
		return "", nil
	}
}

// curlGet reads path over HTTP (args: more curl options, e.g. a range)
// into a file and returns what arrived, curl's output and its error.
func curlGet(t *testing.T, k *harness.Process, path string, args ...string) ([]byte, string, error) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "got")
	out, err := client(t, "GET "+path, "curl", append([]string{"-sS", "-f", "-L", "-o", dst, k.EP.HTTP + path}, args...)...)
	b, _ := os.ReadFile(dst)
	return b, out, err
}

// xrdGet reads path over root:// with xrdcp.
func xrdGet(t *testing.T, k *harness.Process, path string) ([]byte, string, error) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "gotx")
	out, err := client(t, "xrdcp "+path, "xrdcp", "-f", "-s", k.EP.XRootD+"/"+path, dst)
	b, _ := os.ReadFile(dst)
	return b, out, err
}

// rot flips bytes of stripe file phys at each offset, behind Kaon's back.
func rot(t *testing.T, phys string, offs ...int64) {
	t.Helper()
	for _, off := range offs {
		flip(t, phys, off)
	}
}

// pyVectorRead reads chunks of path with one kXR_readv (Python XRootD)
// and compares them with data; it returns the client's output and
// whether the read succeeded with the right bytes.
func pyVectorRead(t *testing.T, k *harness.Process, path string, data []byte, chunks [][2]int) (string, bool) {
	t.Helper()
	local := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(local, data, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-c", pyReadv, k.EP.XRootD + "/" + path, local}
	for _, c := range chunks {
		args = append(args, fmt.Sprintf("%d:%d", c[0], c[1]))
	}
	out, err := client(t, "python readv "+path, "/usr/bin/python3", args...)
	return out, err == nil && strings.Contains(out, "READV-OK")
}

const pyReadv = `
import sys
from XRootD import client
url, local = sys.argv[1], sys.argv[2]
data = open(local, "rb").read()
chunks = [tuple(int(x) for x in c.split(":")) for c in sys.argv[3:]]
f = client.File()
st, _ = f.open(url)
if not st.ok:
    print("FAIL open", st.message); sys.exit(1)
st, vr = f.vector_read(chunks)
if not st.ok:
    print("FAIL readv", st.message); sys.exit(1)
for (off, n), c in zip(chunks, vr.chunks):
    if c.buffer != data[off:off + n]:
        print("FAIL wrong bytes at", off); sys.exit(1)
print("READV-OK")
`

// readable reads path over root:// (a vector read of pieces around
// every rotten place first, then xrdcp) and HTTP (full and two ranges),
// and fails unless every read is byte-exact.
func readable(t *testing.T, k *harness.Process, path string, data []byte) {
	t.Helper()
	n := len(data)
	if out, ok := pyVectorRead(t, k, path, data, [][2]int{{0, 100}, {n/4 - 50, 100}, {n/2 - 5000, 10000}, {n - 100, 100}}); !ok {
		t.Fatalf("readv %s: %s", path, out)
	}
	if b, out, err := curlGet(t, k, path); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("GET %s: %v %s, %d bytes, equal %v", path, err, out, len(b), bytes.Equal(b, data))
	}
	for _, r := range [][2]int{{1000, 1999}, {len(data)/2 - 70000, len(data) - 1}} {
		b, out, err := curlGet(t, k, path, "-r", fmt.Sprintf("%d-%d", r[0], r[1]))
		if err != nil || !bytes.Equal(b, data[r[0]:r[1]+1]) {
			t.Fatalf("GET %s bytes %d-%d: %v %s, equal %v", path, r[0], r[1], err, out, bytes.Equal(b, data[r[0]:r[1]+1]))
		}
	}
	if b, out, err := xrdGet(t, k, path); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("xrdcp %s: %v %s, equal %v", path, err, out, bytes.Equal(b, data))
	}
}

// TestBitrotNeverReachesClients: stripes of a plain, a replica:2 and an
// ec:4+2 file rot on disk (bytes flipped in the middle and in the last
// block), on a namespace server with two storage servers. Over HTTP
// (whole and ranged) and root://, the replicated and erasure-coded files
// read byte-exact (each range from a copy that verifies, or
// reconstructed), and their bad copies are mended on disk as they were.
// The plain file, which has no other copy, never sends a wrong byte: a
// read that started is cut off, and once its copy is known damaged every
// read fails at once naming it. A drain of a filesystem holding rotten
// stripes moves the others' good bytes and refuses the plain file's,
// saying why. A replica written before block sums reads as before and a
// scrub gives it its sums.
func TestBitrotNeverReachesClients(t *testing.T) {
	m, fsts := bitrotCluster(t)
	for _, d := range []string{"/rot/rep", "/rot/ec", "/rot/drain/rep", "/rot/drain/ec"} {
		m.MustKaon("mkdir", "-p", d)
	}
	m.MustKaon("attr", "set", "/rot/rep", "sys.forced.layout=replica:2")
	m.MustKaon("attr", "set", "/rot/ec", "sys.forced.layout=ec:4+2:65536")
	data := randomBytes(t, 3<<20+12345)
	mid, last := int64(len(data)/2), int64(len(data)-16) // flip inverts 16 bytes
	for _, p := range []string{"/rot/plain", "/rot/rep/f", "/rot/ec/f", "/rot/rep/legacy"} {
		put(t, m, p, data)
	}
	saved := map[string][]byte{}

	// A replica written before block sums (its stripe files cut to their
	// data, format 1) reads as before, and a scrub gives it its sums.
	legacy := stripes(t, m, "/rot/rep/legacy")
	for _, s := range legacy {
		saved[s.phys] = readPhys(t, s.phys).data
		if err := os.Truncate(s.phys, int64(len(data))); err != nil {
			t.Fatal(err)
		}
	}
	readable(t, m, "/rot/rep/legacy", data)
	m.MustKaon("fsck", "run", "--scrub", "--wait", "--timeout", "2m")
	for _, s := range legacy {
		if b := readPhys(t, s.phys).data; !bytes.Equal(b, saved[s.phys]) {
			t.Fatalf("a scrub did not give the replica %s written without block sums its sums: %d bytes, %d with them",
				s.phys, len(b), len(saved[s.phys]))
		}
	}

	// replica:2: copy 0 (read first, on the entry server) rots a quarter
	// in; copy 1 (on the other server) in the middle and its last block.
	rep := stripes(t, m, "/rot/rep/f")
	if rep[0].node == rep[1].node {
		t.Fatalf("the replicas of /rot/rep/f share node %s", rep[0].node)
	}
	for _, s := range rep {
		saved[s.phys] = readPhys(t, s.phys).data
	}
	rot(t, rep[0].phys, int64(len(data)/4))
	rot(t, rep[1].phys, mid, last)
	// ec:4+2: two data stripes on different servers (reads fetch parity
	// only to reconstruct, so only data frames are sure to be read), each
	// in its middle and its last frame.
	ec := stripes(t, m, "/rot/ec/f")
	other := 1
	for other < 4 && ec[other].node == ec[0].node {
		other++
	}
	if other == 4 {
		t.Fatalf("the data stripes of /rot/ec/f are all on %s", ec[0].node)
	}
	ecRot := []stripe{ec[0], ec[other]}
	for _, s := range ecRot {
		saved[s.phys] = readPhys(t, s.phys).data
		n := int64(len(saved[s.phys]))
		rot(t, s.phys, n/2, n-20) // the data of the last frame
	}
	readable(t, m, "/rot/rep/f", data)
	readable(t, m, "/rot/ec/f", data)
	for _, s := range append(rep, ecRot...) {
		harness.WaitFor(t, 30*time.Second, "the rotten stripe "+s.phys+" to be mended as it was", func() bool {
			b, err := os.ReadFile(s.phys)
			return err == nil && bytes.Equal(b, saved[s.phys])
		})
	}
	// The storage servers count what the reads met and the repairs (two
	// replica copies, two ec stripes; a repair counts once it has
	// checked what it wrote, just after the bytes are back).
	harness.WaitFor(t, 10*time.Second, "the storage servers' metrics to count 4 bad stripes read and repaired", func() bool {
		return fstCount(t, fsts, "kaon_fst_bad_blocks_total", map[string]string{"found": "read"}) >= 4 &&
			fstCount(t, fsts, "kaon_fst_heals_total", map[string]string{"result": "repaired"}) >= 4
	})

	// plain: the only copy rots in the middle and its last block.
	plain := stripes(t, m, "/rot/plain")[0].phys
	rot(t, plain, mid, last)
	if b, out, err := curlGet(t, m, "/rot/plain", "-r", "0-99999"); err != nil || !bytes.Equal(b, data[:100000]) {
		t.Fatalf("GET of the good start of a rotten plain file: %v %s", err, out)
	}
	b, out, err := curlGet(t, m, "/rot/plain")
	if err == nil || !bytes.Equal(b, data[:len(b)]) || int64(len(b)) > mid {
		t.Fatalf("GET of a rotten plain file: %v %s; %d bytes arrived (a prefix of the file: %v), want it cut off before byte %d",
			err, out, len(b), bytes.Equal(b, data[:min(len(b), len(data))]), mid)
	}
	harness.WaitFor(t, 30*time.Second, "reads of the rotten plain file to fail at once", func() bool {
		_, out, err := curlGet(t, m, "/rot/plain", "-r", "0-99")
		return err != nil && strings.Contains(out, "500")
	})
	harness.WaitFor(t, 10*time.Second, "kaon_fst_heals_total{result=damaged} to count the plain file's copy", func() bool {
		return fstCount(t, fsts, "kaon_fst_heals_total", map[string]string{"result": "damaged"}) == 1
	})
	body, _ := client(t, "GET /rot/plain", "curl", "-sS", "-L", m.EP.HTTP+"/rot/plain")
	if !strings.Contains(body, "/rot/plain") || !strings.Contains(body, "damaged beyond repair") {
		t.Fatalf("GET of a plain file known damaged: %s", body)
	}
	if b, out, err := xrdGet(t, m, "/rot/plain"); err == nil || !strings.Contains(out, "/rot/plain") || !strings.Contains(out, "damaged") ||
		!bytes.Equal(b, data[:len(b)]) {
		t.Fatalf("xrdcp of a plain file known damaged: %v %s", err, out)
	}
	if out, ok := pyVectorRead(t, m, "/rot/plain", data, [][2]int{{0, 100}}); ok || !strings.Contains(out, "damaged") {
		t.Fatalf("readv of a plain file known damaged: %s", out)
	}

	// A drain of the filesystem holding a rotten plain file's copy, a
	// rotten replica and a rotten ec stripe (files of 200 KiB: several
	// 64 KiB blocks).
	small := randomBytes(t, 200<<10+99)
	m.MustKaon("attr", "set", "/rot/drain/rep", "sys.forced.layout=replica:2")
	m.MustKaon("attr", "set", "/rot/drain/ec", "sys.forced.layout=ec:4+2:65536")
	put(t, m, "/rot/drain/plain", small)
	d := stripes(t, m, "/rot/drain/plain")[0]
	rot(t, d.phys, int64(len(small)/2), int64(len(small)-16))
	var moving []string
	for _, dir := range []string{"/rot/drain/rep", "/rot/drain/ec"} {
		for i := 0; ; i++ {
			if i == 40 {
				t.Fatalf("no file of %s placed on fs %s in 40 uploads", dir, d.fsid)
			}
			p := fmt.Sprintf("%s/f%d", dir, i)
			put(t, m, p, small)
			if s, ok := stripeOn(stripes(t, m, p), d.fsid); ok {
				n := int64(len(readPhys(t, s.phys).data)) - 4 // an ec stripe's last frame ends with its crc
				if strings.HasSuffix(dir, "rep") {
					n = int64(len(small))
				}
				rot(t, s.phys, n/2, n-16)
				moving = append(moving, p)
				break
			}
		}
	}
	// The first rotten plain file may have been placed on this fs too:
	// then neither can move.
	left, unmoved := "left:          1 stripes", []string{"/rot/drain/plain"}
	if _, ok := stripeOn(stripes(t, m, "/rot/plain"), d.fsid); ok {
		left, unmoved = "left:          2 stripes", append(unmoved, "/rot/plain")
	}
	m.MustKaon("fs", "config", d.fsid, "configstatus=drain")
	var st string
	defer func() {
		if t.Failed() {
			t.Logf("fs %s's last status:\n%s", d.fsid, st)
		}
	}()
	harness.WaitFor(t, 2*time.Minute, "the drain of fs "+d.fsid+" to move all but the rotten plain files "+strings.Join(unmoved, ", "), func() bool {
		st = m.MustKaon("fs", "status", d.fsid)
		for _, p := range unmoved {
			if !strings.Contains(st, p+" stripe 0: ") {
				return false
			}
		}
		return strings.Contains(st, left) && (strings.Contains(st, "crc32c") || strings.Contains(st, "damaged"))
	})
	for _, p := range moving {
		if _, ok := stripeOn(stripes(t, m, p), d.fsid); ok {
			t.Fatalf("%s still has a stripe on the drained fs %s", p, d.fsid)
		}
		readable(t, m, p, small)
	}
	if b, out, err := curlGet(t, m, "/rot/drain/plain"); err == nil || !bytes.Equal(b, small[:len(b)]) {
		t.Fatalf("GET of the rotten plain file the drain could not move: %v %s", err, out)
	}
}

// stripeOn is the stripe of ss on filesystem fsid.
func stripeOn(ss []stripe, fsid string) (stripe, bool) {
	for _, s := range ss {
		if s.fsid == fsid {
			return s, true
		}
	}
	return stripe{}, false
}

// TestBitrotInUpdatedFile: a replica:2 file updated in place with ranged
// PUTs (a write inside a block, one across blocks, one past the end)
// keeps block sums that verify; bytes the update wrote then rot on disk
// in each copy, in other blocks: every read over HTTP and root:// is
// byte-exact (each range from the copy that verifies), and both copies
// are mended on disk to the updated content, block sums and all.
func TestBitrotInUpdatedFile(t *testing.T) {
	m, fsts := bitrotCluster(t)
	m.MustKaon("mkdir", "-p", "/upd")
	m.MustKaon("attr", "set", "/upd", "sys.forced.layout=replica:2")
	data := randomBytes(t, 1<<20+777)
	put(t, m, "/upd/f", data)
	for _, w := range []struct{ off, n int }{{100_000, 100}, {300_000, 200_000}, {len(data) - 10, 150_000}} {
		p := randomBytes(t, w.n)
		local := filepath.Join(t.TempDir(), "range")
		if err := os.WriteFile(local, p, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := client(t, "ranged PUT", "curl", "-sS", "-f", "-L", "-T", local, "-H",
			fmt.Sprintf("Content-Range: bytes %d-%d/*", w.off, w.off+w.n-1), m.EP.HTTP+"/upd/f")
		if err != nil {
			t.Fatalf("ranged PUT of %d bytes at %d: %v %s", w.n, w.off, err, out)
		}
		if end := w.off + w.n; end > len(data) {
			data = append(data, make([]byte, end-len(data))...)
		}
		copy(data[w.off:], p)
	}
	rep := stripes(t, m, "/upd/f")
	if len(rep) != 2 || rep[0].node == rep[1].node {
		t.Fatalf("the replicas of /upd/f: %+v", rep)
	}
	saved := map[string][]byte{}
	for _, s := range rep {
		// The last update's apply follows its reply (its journal, removed
		// last, is the record until then).
		harness.WaitFor(t, 30*time.Second, "replica "+s.phys+" to apply the last update", func() bool {
			_, err := os.Stat(s.phys + ".journal")
			return os.IsNotExist(err)
		})
		saved[s.phys] = readPhys(t, s.phys).data
		if len(saved[s.phys]) < len(data) || !bytes.Equal(saved[s.phys][:len(data)], data) {
			t.Fatalf("replica %s does not hold the updated content", s.phys)
		}
	}
	readable(t, m, "/upd/f", data) // the updated blocks' sums verify
	before := fstCount(t, fsts, "kaon_fst_heals_total", map[string]string{"result": "repaired"})
	rot(t, rep[0].phys, 100_050)                        // a block the first write changed in part
	rot(t, rep[1].phys, 400_000, int64(len(data)-1000)) // the second write, the extension
	readable(t, m, "/upd/f", data)
	for _, s := range rep {
		harness.WaitFor(t, 30*time.Second, "the rotten updated replica "+s.phys+" to be mended", func() bool {
			b, err := os.ReadFile(s.phys)
			return err == nil && bytes.Equal(b, saved[s.phys])
		})
	}
	harness.WaitFor(t, 10*time.Second, "kaon_fst_heals_total{result=repaired} to count both copies", func() bool {
		return fstCount(t, fsts, "kaon_fst_heals_total", map[string]string{"result": "repaired"}) >= before+2
	})
}

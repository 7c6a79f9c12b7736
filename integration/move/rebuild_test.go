package move

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/layout"
)

// rebuildLayouts are the layouts of TestRebuildLostDisks (ec:8+2 needs
// 10 of its 12 filesystems).
var rebuildLayouts = []string{"replica:2", "replica:3", "ec:4+2:65536", "ec:8+2:65536"}

// loadClients write new files and read acknowledged ones (curl and
// xrdcp) until stop is closed. A write told to have failed is not
// recorded (a file placed on a disk that just died fails, and says so);
// a read told to have succeeded must return the bytes written.
type loadClients struct {
	k    *harness.Process
	t    *testing.T
	mu   sync.Mutex
	acks map[string][]byte // acknowledged writes
	bad  []string          // reads that returned wrong bytes
	errs map[string]int    // failures the clients were told of, by kind
	ops  int
}

func (l *loadClients) run(stop chan struct{}, n int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for id := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(id), 7))
			tmp := l.t.TempDir()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				xrd := id%2 == 1
				if i%2 == 0 { // write a new file
					p := fmt.Sprintf("/load/l%d/c%d-%d", i/2%len(rebuildLayouts), id, i)
					local, b := randomBytes(l.t, 1+rng.IntN(256<<10))
					var err error
					if xrd {
						err = putXrd(l.k, local, p)
					} else {
						err = putHTTP(l.k, local, p)
					}
					os.Remove(local)
					l.mu.Lock()
					l.ops++
					if err != nil {
						l.errs["write"]++
					} else {
						l.acks[p] = b
					}
					l.mu.Unlock()
					continue
				}
				l.mu.Lock()
				var ps []string
				for p := range l.acks {
					ps = append(ps, p)
				}
				l.mu.Unlock()
				if len(ps) == 0 {
					continue
				}
				slices.Sort(ps)
				p := ps[rng.IntN(len(ps))]
				var got []byte
				var err error
				if xrd {
					got, err = getXrd(l.k, tmp, p)
				} else {
					got, err = getHTTP(l.k, tmp, p)
				}
				l.mu.Lock()
				l.ops++
				want := l.acks[p]
				switch {
				case err != nil:
					l.errs["read"]++
				case !bytes.Equal(got, want):
					l.bad = append(l.bad, fmt.Sprintf("%s: read %d bytes, want %d (equal: false)", p, len(got), len(want)))
				}
				l.mu.Unlock()
			}
		}()
	}
	return &wg
}

// checkRedundancy checks that every file has its layout's number of
// stripes on distinct filesystems, none in lost, each there on disk
// (roots: fsid -> root).
func checkRedundancy(t *testing.T, k *harness.Process, files map[string][]byte, roots map[uint32]string, lost ...uint32) {
	t.Helper()
	for p := range files {
		out := k.MustKaon("file", "info", p)
		var lay string
		for _, l := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(l, "Layout: "); ok {
				lay = strings.TrimSpace(v)
			}
		}
		l, err := layout.Parse(lay)
		if err != nil {
			t.Fatalf("%s: layout %q: %v", p, lay, err)
		}
		st := stripesIn(out)
		if len(st) != l.Stripes() {
			t.Fatalf("%s (%s): %d stripes on distinct filesystems, want %d:\n%s", p, lay, len(st), l.Stripes(), out)
		}
		for fs, phys := range st {
			if slices.Contains(lost, fs) {
				t.Fatalf("%s has a stripe on lost fs %d:\n%s", p, fs, out)
			}
			if !strings.HasPrefix(phys, roots[fs]+"/") {
				t.Fatalf("%s: stripe on fs %d at %s, not below its root %s", p, fs, phys, roots[fs])
			}
			if _, err := os.Stat(phys); err != nil {
				t.Fatalf("%s: stripe on fs %d: %v", p, fs, err)
			}
		}
	}
}

// TestRebuildLostDisks: with replica:2, replica:3, ec:4+2 and ec:8+2
// files on 12 filesystems of 4 storage servers, a disk dies (its
// directory returns EIO) while clients write and read: it is declared
// lost after the grace and everything it held is rebuilt; every file
// then has its full redundancy, byte-exact, its checksums matching (a
// scrub finds nothing). Then a storage server is killed for good: every
// file is still readable, and is rebuilt to full redundancy again.
// Every read the clients were told succeeded returned the bytes written.
func TestRebuildLostDisks(t *testing.T) {
	mdir := t.TempDir()
	m := harness.Start(t, mdir, "mgm", "--data", mdir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--cap-ttl", "5s",
		"--rebuild-after", "4s")
	key := filepath.Join(mdir, "keys", "capability.key")
	base := t.TempDir()
	lower, mnt := filepath.Join(base, "lower"), filepath.Join(base, "a1")
	os.Mkdir(lower, 0o755)
	os.Mkdir(mnt, 0o755)
	fault := harness.FaultFS(t, lower, mnt)
	servers := map[string]*harness.Process{}
	for node, paths := range map[string][]string{"a": {mnt, "a2", "a3", "a4"}, "b": {"b1", "b2", "b3", "b4"}, "c": {"c1", "c2", "c3"}, "d": {"d1"}} {
		d := t.TempDir()
		args := []string{"fst", "--mgm", m.EP.HTTP, "--key", key, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--node", node,
			"--data", d, "--io-timeout", "5s"}
		for _, p := range paths {
			if !filepath.IsAbs(p) {
				p = filepath.Join(d, p)
			}
			args = append(args, "--fs", p)
		}
		servers[node] = harness.Start(t, d, args...)
	}
	harness.WaitFor(t, 60*time.Second, "12 filesystems to boot", func() bool { return strings.Count(m.MustKaon("fs", "ls"), " booted ") == 12 })
	roots := map[uint32]string{}
	ids := map[string]uint32{} // root -> fsid
	for _, l := range strings.Split(m.MustKaon("fs", "ls"), "\n")[1:] {
		if f := strings.Fields(l); len(f) > 3 {
			id, _ := strconv.ParseUint(f[1], 10, 32)
			roots[uint32(id)], ids[f[2]] = f[2], uint32(id)
		}
	}
	dead, gone := ids[mnt], uint32(0)
	for root, id := range ids {
		if strings.HasSuffix(root, "/d1") {
			gone = id
		}
	}
	files := map[string][]byte{}
	for li, l := range rebuildLayouts {
		for _, dir := range []string{fmt.Sprintf("/seed/l%d", li), fmt.Sprintf("/load/l%d", li)} {
			layoutDir(t, m, dir, l)
		}
		for i := range 24 {
			size := 1 + rand.IntN(64<<10)
			if i < 2 {
				size = 3<<20 + rand.IntN(3<<20)
			}
			local, b := randomBytes(t, size)
			p := fmt.Sprintf("/seed/l%d/f%d", li, i)
			if err := putHTTP(m, local, p); err != nil {
				t.Fatal(err)
			}
			files[p] = b
		}
	}
	onDead := 0
	for p := range files {
		if _, ok := stripesOf(t, m, p)[dead]; ok {
			onDead++
		}
	}
	if onDead < 20 {
		t.Fatalf("only %d files have a stripe on fs %d: the test proves little", onDead, dead)
	}

	start := time.Now()
	lap := func(what string) { t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond)) }
	// The disk dies under load.
	load := &loadClients{k: m, t: t, acks: map[string][]byte{}, errs: map[string]int{}}
	stop := make(chan struct{})
	wg := load.run(stop, 3)
	time.Sleep(2 * time.Second)
	os.WriteFile(fault, []byte("eio"), 0o644)
	sid := strconv.FormatUint(uint64(dead), 10)
	harness.WaitFor(t, 60*time.Second, "fs "+sid+" (EIO) to be declared lost", func() bool { return strings.Contains(fsRow(t, m, sid), " lost ") })
	lap("lost")
	harness.WaitFor(t, 3*time.Minute, "the rebuild of fs "+sid+" to end (empty)", func() bool { return strings.Contains(fsRow(t, m, sid), " empty ") })
	lap("rebuilt")
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("client operations during the loss: %d, failures they were told of: %v", load.ops, load.errs)
	if len(load.bad) > 0 {
		t.Fatalf("reads that succeeded with the wrong bytes:\n%s", strings.Join(load.bad, "\n"))
	}
	st := m.MustKaon("fs", "status", sid)
	if !strings.Contains(st, "failures:      0 now") || !strings.Contains(st, "unreadable for") {
		t.Fatalf("fs status of the lost filesystem:\n%s", st)
	}
	for p, b := range load.acks {
		files[p] = b
	}
	verifyAll(t, m, files)
	checkRedundancy(t, m, files, roots, dead)
	lap("checked")
	logs := m.Logs()
	for _, want := range []string{`msg="filesystem lost" fsid=` + sid, `msg="rebuild started`, `msg="rebuild ended`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the namespace server's log does not say %q", want)
		}
	}
	scrub(t, m)
	lap("scrubbed")

	// A storage server dies for good: everything stays readable, and is
	// rebuilt again (10 filesystems left: ec:8+2 fits).
	servers["d"].Kill9()
	gid := strconv.FormatUint(uint64(gone), 10)
	harness.WaitFor(t, 30*time.Second, "fs "+gid+" to show down", func() bool { return strings.Contains(fsRow(t, m, gid), " down ") })
	verifyAll(t, m, files)
	lap("read with a storage server gone")
	harness.WaitFor(t, 3*time.Minute, "the rebuild of fs "+gid+" (storage server killed) to end", func() bool {
		return strings.Contains(fsRow(t, m, gid), " empty ")
	})
	lap("rebuilt again")
	checkRedundancy(t, m, files, roots, dead, gone)
	scrub(t, m)
	for _, p := range []string{"/seed/l0/f0", "/seed/l3/f0", "/seed/l3/f1"} {
		got, err := getHTTP(m, t.TempDir(), p)
		if err != nil || !bytes.Equal(got, files[p]) {
			t.Fatalf("%s after two rebuilds: %v, equal %v", p, err, bytes.Equal(got, files[p]))
		}
	}
	want, _ := checksum.Sum("adler32", files["/seed/l3/f0"])
	if got := digest(t, m, "/seed/l3/f0"); got != want {
		t.Fatalf("adler32 of an ec:8+2 file after two rebuilds: %s, want %s", got, want)
	}
	lap("checked again")
}

// scrub has every readable filesystem scanned with its data re-read
// (every replica's checksum, every EC frame's crc32c) and fails on any
// damage found.
func scrub(t *testing.T, m *harness.Process) {
	t.Helper()
	out, errs, code := m.Kaon("fsck", "run", "--scrub", "--wait", "--timeout", "2m")
	if code != 0 {
		t.Fatalf("fsck run --scrub: %s %s", out, errs)
	}
	stat := m.MustKaon("fsck", "stat")
	damage := []string{"blockxs_err", "stripe_err", "d_mem_sz_diff", "m_mem_sz_diff", "d_cx_diff", "m_cx_diff", "rep_missing_n", "rep_diff_n"}
	for _, l := range strings.Split(stat, "\n") {
		if f := strings.Fields(l); len(f) > 2 && slices.Contains(damage, f[0]) && f[1] != "0" {
			t.Fatalf("fsck finds damage after the rebuild:\n%s", stat)
		}
	}
}

package move

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

var layouts = []string{"plain", "replica:2", "ec:4+2:65536"}

// upRoots are the filesystem roots of a `kaon up --fs n`.
func upRoots(k *harness.Process, n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, filepath.Join(k.Dir, "fs", fmt.Sprintf("%02d", i)))
	}
	return out
}

// seed writes n files of each layout below /seed and returns them.
func seed(t *testing.T, k *harness.Process, n, maxSize int) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for li, l := range layouts {
		dir := fmt.Sprintf("/seed/l%d", li)
		layoutDir(t, k, dir, l)
		for i := range n {
			local, b := randomBytes(t, 1+rand.IntN(maxSize))
			p := fmt.Sprintf("%s/f%d", dir, i)
			if err := putHTTP(k, local, p); err != nil {
				t.Fatal(err)
			}
			files[p] = b
		}
	}
	return files
}

// client is one of the test's readers and writers: it owns the files
// below its directory (writes, rewrites, deletes) and reads its own and
// the seed files, through curl (even) or xrdcp (odd), comparing bytes.
type client struct {
	id    int
	k     *harness.Process
	t     *testing.T
	seed  map[string][]byte
	mu    sync.Mutex
	own   map[string][]byte
	ops   atomic.Int64
	fails []string
	next  int
}

func (c *client) put(local, p string) error {
	if c.id%2 == 0 {
		return putHTTP(c.k, local, p)
	}
	return putXrd(c.k, local, p)
}

func (c *client) get(dir, p string) ([]byte, error) {
	if c.id%2 == 0 {
		return getHTTP(c.k, dir, p)
	}
	return getXrd(c.k, dir, p)
}

func (c *client) fail(format string, a ...any) {
	c.mu.Lock()
	c.fails = append(c.fails, fmt.Sprintf("client %d: ", c.id)+fmt.Sprintf(format, a...))
	c.mu.Unlock()
}

func (c *client) step(tmp string, rng *rand.Rand) {
	dir := fmt.Sprintf("/c%d/l%d", c.id, c.next%len(layouts))
	c.mu.Lock()
	var mine []string
	for p := range c.own {
		mine = append(mine, p)
	}
	c.mu.Unlock()
	switch op := rng.IntN(10); {
	case op < 3 || len(mine) < 3: // a new file
		c.next++
		p := fmt.Sprintf("%s/n%d", dir, c.next)
		local, b := randomBytes(c.t, 1+rng.IntN(1<<20))
		if err := c.put(local, p); err != nil {
			c.fail("%v", err)
			return
		}
		c.mu.Lock()
		c.own[p] = b
		c.mu.Unlock()
	case op < 5: // rewrite one of its files (maybe while it moves)
		p := mine[rng.IntN(len(mine))]
		local, b := randomBytes(c.t, 1+rng.IntN(1<<20))
		if err := c.put(local, p); err != nil {
			c.fail("rewrite: %v", err)
			return
		}
		c.mu.Lock()
		c.own[p] = b
		c.mu.Unlock()
	case op < 6: // delete one
		p := mine[rng.IntN(len(mine))]
		if _, errs, code := c.k.Kaon("rm", p); code != 0 {
			c.fail("rm %s: %s", p, errs)
			return
		}
		c.mu.Lock()
		delete(c.own, p)
		c.mu.Unlock()
	case op < 8: // read one of its own
		p := mine[rng.IntN(len(mine))]
		c.mu.Lock()
		want := c.own[p]
		c.mu.Unlock()
		if got, err := c.get(tmp, p); err != nil || !bytes.Equal(got, want) {
			c.fail("read %s: %v, %d bytes, want %d", p, err, len(got), len(want))
		}
	default: // read a seed file
		var ps []string
		for p := range c.seed {
			ps = append(ps, p)
		}
		p := ps[rng.IntN(len(ps))]
		if got, err := c.get(tmp, p); err != nil || !bytes.Equal(got, c.seed[p]) {
			c.fail("read %s: %v, %d bytes, want %d", p, err, len(got), len(c.seed[p]))
		}
	}
	c.ops.Add(1)
}

// TestDrainUnderLoad: a filesystem of a `kaon up` drains while 8 clients
// (curl and xrdcp) write, rewrite, delete and read files; every client
// operation succeeds with the right bytes throughout; the drain ends in
// drained in fs ls; afterwards every file's bytes and adler32 are right,
// no file has a stripe on the drained filesystem, and the disks hold
// exactly the registered stripes.
func TestDrainUnderLoad(t *testing.T) {
	k := harness.Up(t, "--fs", "7", "--cap-ttl", "5s")
	files := seed(t, k, 12, 3<<20)
	var clients []*client
	for i := range 8 {
		c := &client{id: i, k: k, t: t, seed: files, own: map[string][]byte{}}
		for li, l := range layouts {
			layoutDir(t, k, fmt.Sprintf("/c%d/l%d", i, li), l)
		}
		clients = append(clients, c)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c.id), 1))
			tmp, _ := os.MkdirTemp("", "kaon-move-client-")
			defer os.RemoveAll(tmp)
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.step(tmp, rng)
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	// Let the clients put files everywhere, fs 1 included, then drain it
	// slowly enough that they keep working on files as they move.
	harness.WaitFor(t, time.Minute, "every client to have done 3 operations", func() bool {
		for _, c := range clients {
			if c.ops.Load() < 3 {
				return false
			}
		}
		return true
	})
	k.MustKaon("fs", "config", "1", "drain.rate=2M")
	k.MustKaon("fs", "config", "1", "drain.parallel=2")
	k.MustKaon("fs", "config", "1", "configstatus=drain")
	harness.WaitFor(t, 3*time.Second, "fs ls to show fs 1 draining", func() bool { return strings.Contains(fsRow(t, k, "1"), " draining ") })
	opsAtStart := int64(0)
	for _, c := range clients {
		opsAtStart += c.ops.Load()
	}
	drainStart := time.Now()
	harness.WaitFor(t, 4*time.Minute, "fs 1 to show drained in fs ls", func() bool { return strings.Contains(fsRow(t, k, "1"), " drained ") })
	close(stop)
	wg.Wait()
	opsEnd := int64(0)
	for _, c := range clients {
		opsEnd += c.ops.Load()
		for _, f := range c.fails {
			t.Error(f)
		}
		for p, b := range c.own {
			files[p] = b
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if moved := movedStripes(t, k, "1"); moved == 0 || opsEnd-opsAtStart < 8 {
		t.Fatalf("the drain moved %d stripes while clients did %d operations: no overlap to speak of", moved, opsEnd-opsAtStart)
	}
	t.Logf("drain moved %d stripes in %v while 8 clients did %d operations; %d files", movedStripes(t, k, "1"),
		time.Since(drainStart).Round(time.Second), opsEnd-opsAtStart, len(files))
	verifyAll(t, k, files)
	checkNoOrphans(t, k, upRoots(k, 7), files, 1)
}

// TestDrainedIsEmpty: `drained` in fs ls means nothing of any file is left
// on the filesystem, so its disk can be pulled: right when it shows, the
// filesystem's directory holds only its identity marker (before, the
// stripes moved away stayed there until their deletion was due, one
// --cap-ttl later, and fs ls already said drained).
func TestDrainedIsEmpty(t *testing.T) {
	k := harness.Up(t, "--fs", "7", "--cap-ttl", "5s")
	for i, l := range []string{"", "ec:4+2"} { // ec:4+2 covers 6 of the 7 filesystems: fs 1 holds something
		dir := fmt.Sprintf("/d%d", i)
		k.MustKaon("mkdir", dir)
		if l != "" {
			k.MustKaon("attr", "set", dir, "sys.forced.layout="+l)
		}
		for j := range 4 {
			local, _ := randomBytes(t, 3<<20)
			if err := putHTTP(k, local, fmt.Sprintf("%s/f%d", dir, j)); err != nil {
				t.Fatal(err)
			}
		}
	}
	k.MustKaon("fs", "config", "1", "configstatus=drain")
	harness.WaitFor(t, 2*time.Minute, "fs 1 to show drained in fs ls", func() bool { return strings.Contains(fsRow(t, k, "1"), " drained ") })
	root := upRoots(k, 1)[0]
	var left []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, strings.TrimPrefix(p, root+"/"))
		}
		return nil
	})
	if len(left) != 1 || left[0] != ".kaon-fsid" {
		t.Fatalf("fs 1 shows drained, and %s holds %v (want only .kaon-fsid)", root, left)
	}
	if moved := movedStripes(t, k, "1"); moved == 0 {
		t.Fatal("the drain moved no stripe: the test proves nothing")
	}
}

// Package chaos is the chaos suite of issue 24 (scripts/chaos.sh): a
// replicated instance (3 etcd members, 2 namespace servers, 3 storage
// servers with 2 filesystems each, two of them behind the FUSE fault
// layer) takes uploads, updates, renames, deletes and reads from
// clients over HTTP (curl) and root:// (xrdcp, xrdfs) while a scheduler
// seeded with -chaos.seed injects faults one after another: kill -9 of
// a namespace server (active or standby), a storage server or an etcd
// member, SIGSTOP of the active namespace server beyond its lease, a
// partition of a namespace server from etcd beyond its lease (etcd's
// members run in a network namespace the test makes, each namespace
// server reaches it through a veth link of its own, taken down:
// harness.Netns; the suite needs root), a slow disk, and once a disk
// whose every operation fails with EIO (it is declared lost and
// rebuilt). Every operation is recorded with what
// the client was told. At the end, once healed, the checker (not the
// scheduler) decides: every path must hold exactly what the last
// acknowledged operation left (an acknowledged write byte-exact with its
// adler32, an acknowledged delete or rename source absent), or, after an
// operation the client was not told succeeded, either the state before
// it or the state after it, never anything in between; every file has
// its full redundancy again, none on the lost disk.
//
// No two namespace servers accepted writes in one term: every audit log
// record names the HA term of the server that wrote it (AuditRecord.Term),
// and the checker reads both servers' logs and fails on a term two of
// them accepted mutations in, or a mutation with no term. It prints how
// many acknowledged writes it found a commit record of
// (writes_with_term=N/M: a record still queued when its server was
// killed is lost with it). A write acknowledged by a deposed server
// would also show as missing or overwritten content at the end.
//
// It runs only when -chaos.seconds is set (CI runs 20 s of faults,
// 1.5 minutes in all, scripts/test.sh):
//
//	scripts/chaos.sh --seconds 60 --seed 42
//	scripts/chaos.sh --seconds 20 --sabotage   # the checker must say lost=1
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/etcdtest"
	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/layout"
	"github.com/kaon-storage/kaon/internal/nsserver"
)

var (
	seconds  = flag.Int("chaos.seconds", 0, "seconds of faults under load (0: the suite does not run)")
	seed     = flag.Uint64("chaos.seed", 0, "seed of the clients and the fault scheduler (0: from the clock)")
	nclient  = flag.Int("chaos.clients", 4, "concurrent clients")
	sabotage = flag.Bool("chaos.sabotage", false, "remove one acknowledged file behind the clients' backs before the check (the checker must say lost=1)")
)

// lease is the namespace servers' --meta-lease.
const lease = 3 * time.Second

// layouts are those of the clients' directories (3 storage servers, 6
// filesystems, one lost during the run: each fits on 5, one stripe per
// server where it can).
var layouts = []string{"replica:2", "replica:3", "ec:2+1:65536"}

// cluster is the instance under test.
type cluster struct {
	t       *testing.T
	etcd    *etcdtest.Cluster
	mgms    []*harness.Process
	links   []*harness.NetLink // namespace server i reaches etcd through links[i]
	http    []string           // namespace servers' URLs (fixed ports: restarts keep them)
	xrd     []string           // their root:// host:port
	fsts    []*harness.Process
	eio     string // control file of the fault layer of the disk that dies
	slow    string // control file of the fault layer of the disk that slows
	slowMnt string // that disk's root
	eioFs   string // the dying disk's fs id
}

func startCluster(t *testing.T) *cluster {
	// etcd's members run in a network namespace of their own, the test
	// reaches them through one link, each namespace server through
	// another.
	etcdNet := harness.NewNetns(t)
	own := etcdNet.Link()
	c := &cluster{t: t}
	for range 2 {
		c.links = append(c.links, etcdNet.Link())
	}
	c.etcd = etcdtest.StartWith(t, 3, etcdtest.Options{Wrap: etcdNet.Wrap, Host: own.Inside})
	ports := harness.FreePorts(t, 4)
	var key string
	for i := range 2 {
		c.http = append(c.http, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]))
		c.xrd = append(c.xrd, fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]))
		dir := t.TempDir()
		var hosts []string
		for _, ep := range c.etcd.EndpointsAt(c.links[i].Inside) {
			hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
		}
		meta := "etcd://" + strings.Join(hosts, ",")
		args := []string{"mgm", "--data", dir, "--http", strings.TrimPrefix(c.http[i], "http://"), "--xrootd", c.xrd[i],
			"--meta", meta, "--meta-lease", lease.String(), "--meta-txn-ops", strconv.Itoa(etcdtest.MaxTxnOps),
			"--meta-request-bytes", strconv.Itoa(etcdtest.MaxRequestBytes), "--rebuild-after", "5s", "--cap-ttl", "10s"}
		if i == 0 {
			key = filepath.Join(dir, "keys", "capability.key")
		} else {
			args = append(args, "--key", key)
		}
		c.mgms = append(c.mgms, harness.Start(t, dir, args...))
		if i == 0 {
			c.wait("the first namespace server to be active", time.Minute, func() error {
				_, err := c.active()
				return err
			})
		}
	}
	base := t.TempDir()
	var faulty []string
	for _, n := range []string{"eio", "slow"} {
		lower, mnt := filepath.Join(base, n+"-lower"), filepath.Join(base, n)
		os.Mkdir(lower, 0o755)
		os.Mkdir(mnt, 0o755)
		ctl := harness.FaultFS(t, lower, mnt)
		if n == "eio" {
			c.eio = ctl
		} else {
			c.slow, c.slowMnt = ctl, mnt
		}
		faulty = append(faulty, mnt)
	}
	for i, node := range []string{"a", "b", "c"} {
		d := t.TempDir()
		fs := []string{filepath.Join(d, "fs1"), filepath.Join(d, "fs2")}
		if i < 2 {
			fs[0] = faulty[i]
		}
		args := []string{"fst", "--mgm", strings.Join(c.http, ","), "--key", key, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0",
			"--mgm-xrootd", c.xrd[0], "--node", node, "--data", d, "--io-timeout", "5s", "--fs", fs[0], "--fs", fs[1]}
		c.fsts = append(c.fsts, harness.Start(t, d, args...))
	}
	c.wait("6 filesystems to boot", time.Minute, func() error {
		out, err := c.kaon("fs", "ls")
		if n := strings.Count(out, " booted "); err != nil || n != 6 {
			return fmt.Errorf("fs ls: %v\n%s", err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[2] == faulty[0] {
				c.eioFs = f[1]
			}
		}
		return nil
	})
	for i, l := range layouts {
		dir := fmt.Sprintf("/chaos/l%d", i)
		for _, args := range [][]string{{"mkdir", "-p", dir}, {"attr", "set", dir, "sys.forced.layout=" + l}} {
			if out, err := c.kaon(args...); err != nil {
				t.Fatalf("kaon %v: %v %s", args, err, out)
			}
		}
	}
	return c
}

// active is the URL of the namespace server both name active.
func (c *cluster) active() (string, error) {
	found := ""
	for _, u := range c.http {
		out, err := run("ns status", 20*time.Second, harness.Binary(c.t), "--url", u, "ns", "status")
		var a string
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "active" {
				a = f[1]
			}
		}
		if err != nil || a == "" || (found != "" && a != found) {
			return "", fmt.Errorf("%s names active %q (%v; other: %q)", u, a, err, found)
		}
		found = a
	}
	return found, nil
}

// kaon runs the CLI against any namespace server (standbys forward).
func (c *cluster) kaon(args ...string) (string, error) {
	return run("kaon "+strings.Join(args, " "), time.Minute, harness.Binary(c.t), append([]string{"--url", c.http[0]}, args...)...)
}

// wait retries fn every 200ms until it succeeds; after d the test fails
// naming step.
func (c *cluster) wait(step string, d time.Duration, fn func() error) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within %v: %v", step, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// run runs a command with a deadline.
func run(step string, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return out.String(), fmt.Errorf("%s: %s did not finish within %v", step, name, timeout)
	}
	return out.String(), err
}

// state is what a path holds: absent, or these bytes.
type state struct {
	there bool
	data  []byte
}

func (s state) String() string {
	if !s.there {
		return "absent"
	}
	return fmt.Sprintf("%d bytes %q...", len(s.data), s.data[:min(len(s.data), 24)])
}

// record is what the checker accepts at a path: the state the last
// acknowledged operation left, or (unacknowledged) either of the states
// before and after an operation the client was not told succeeded; a
// path is never used again after such an operation.
type record struct {
	allowed []state
	acked   bool
}

// history is every client's record of its own paths.
type history struct {
	mu     sync.Mutex
	paths  map[string]*record
	acked  int            // operations acknowledged
	unack  int            // operations the client was not told succeeded
	failed map[string]int // those by kind
	reads  int            // reads compared
	bad    []string
	wrote  []string // paths of acknowledged writes, in order
}

func (h *history) set(p string, r *record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.paths[p] = r
}

// count counts an operation that changed paths, by what the client was
// told (those it was told failed by kind).
func (h *history) count(op string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.acked++
	} else {
		h.unack++
		h.failed[op]++
	}
}

// client runs operations on the paths below its own prefix until stop.
type client struct {
	c    *cluster
	h    *history
	id   int
	rng  *rand.Rand
	tmp  string
	live map[string][]byte // its paths with a known content
	n    int
}

func (cl *client) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		cl.n++
		paths := slices.Sorted(func(yield func(string) bool) {
			for p := range cl.live {
				if !yield(p) {
					return
				}
			}
		})
		switch op := cl.rng.IntN(100); {
		case op < 40 || len(paths) == 0:
			p := fmt.Sprintf("/chaos/l%d/c%d-%d", cl.rng.IntN(len(layouts)), cl.id, cl.n)
			cl.write(p, state{})
		case op < 55:
			p := paths[cl.rng.IntN(len(paths))]
			cl.write(p, state{true, cl.live[p]})
		case op < 65:
			p := paths[cl.rng.IntN(len(paths))]
			cl.remove(p)
		case op < 75:
			p := paths[cl.rng.IntN(len(paths))]
			cl.rename(p, fmt.Sprintf("%s/c%d-%d", filepath.Dir(p), cl.id, cl.n))
		default:
			cl.read(paths[cl.rng.IntN(len(paths))])
		}
	}
}

// server picks a namespace server at random (a standby sends the client
// to the active one).
func (cl *client) server() int { return cl.rng.IntN(len(cl.c.http)) }

func (cl *client) xrd() bool { return cl.rng.IntN(2) == 0 }

// content is unique bytes: who wrote them, when, then random ones.
func (cl *client) content() []byte {
	n := 1 + cl.rng.IntN(64<<10)
	if cl.rng.IntN(20) == 0 {
		n = 1<<20 + cl.rng.IntN(1<<20)
	}
	b := fmt.Appendf(nil, "client %d op %d seed %d\n", cl.id, cl.n, *seed)
	for len(b) < n {
		b = append(b, byte(cl.rng.Uint32()))
	}
	return b
}

// done records the outcome of an operation that changed p from before
// to after.
func (cl *client) done(err error, p string, before, after state) {
	if err == nil {
		cl.h.set(p, &record{allowed: []state{after}, acked: true})
		if after.there {
			cl.live[p] = after.data
		} else {
			delete(cl.live, p)
		}
		return
	}
	cl.h.set(p, &record{allowed: []state{before, after}})
	delete(cl.live, p)
}

func (cl *client) write(p string, before state) {
	b := cl.content()
	local := filepath.Join(cl.tmp, "put")
	if err := os.WriteFile(local, b, 0o644); err != nil {
		cl.c.t.Error(err)
		return
	}
	i := cl.server()
	var err error
	if cl.xrd() {
		_, err = run("xrdcp "+p, time.Minute, "xrdcp", "-f", "-s", local, "root://"+cl.c.xrd[i]+"/"+p)
	} else {
		_, err = run("PUT "+p, time.Minute, "curl", "-sS", "-f", "-L", "-T", local, cl.c.http[i]+p)
	}
	cl.done(err, p, before, state{true, b})
	if err == nil {
		cl.h.mu.Lock()
		cl.h.wrote = append(cl.h.wrote, p)
		cl.h.mu.Unlock()
	}
	op := "create"
	if before.there {
		op = "update"
	}
	cl.h.count(op, err)
}

func (cl *client) remove(p string) {
	i := cl.server()
	var err error
	if cl.xrd() {
		_, err = run("xrdfs rm "+p, time.Minute, "xrdfs", cl.c.xrd[i], "rm", p)
	} else {
		_, err = run("DELETE "+p, time.Minute, "curl", "-sS", "-f", "-L", "-X", "DELETE", cl.c.http[i]+p)
	}
	cl.done(err, p, state{true, cl.live[p]}, state{})
	cl.h.count("delete", err)
}

func (cl *client) rename(from, to string) {
	b := cl.live[from]
	i := cl.server()
	var err error
	if cl.xrd() {
		_, err = run("xrdfs mv "+from, time.Minute, "xrdfs", cl.c.xrd[i], "mv", from, to)
	} else {
		_, err = run("MOVE "+from, time.Minute, "curl", "-sS", "-f", "-L", "-X", "MOVE", "-H", "Destination: "+to, cl.c.http[i]+from)
	}
	cl.done(err, from, state{true, b}, state{})
	cl.done(err, to, state{}, state{true, b})
	cl.h.count("rename", err)
}

// read compares what a read the client is told succeeded returns with
// the path's content: a read may fail during a fault, never return other
// bytes.
func (cl *client) read(p string) {
	got, err := get(cl.c, cl.server(), cl.xrd(), cl.tmp, p)
	if err != nil {
		return
	}
	cl.h.mu.Lock()
	defer cl.h.mu.Unlock()
	cl.h.reads++
	if !bytes.Equal(got, cl.live[p]) {
		cl.h.bad = append(cl.h.bad, fmt.Sprintf("a read of %s succeeded with %d bytes %q..., not the %d written",
			p, len(got), got[:min(len(got), 24)], len(cl.live[p])))
	}
}

// get reads p through namespace server i; a missing file is errNotFound.
func get(c *cluster, i int, xrd bool, tmp, p string) ([]byte, error) {
	dst := filepath.Join(tmp, "get")
	os.Remove(dst)
	var out string
	var err error
	if xrd {
		out, err = run("xrdcp "+p, time.Minute, "xrdcp", "-f", "-s", "root://"+c.xrd[i]+"/"+p, dst)
	} else {
		out, err = run("GET "+p, time.Minute, "curl", "-sS", "-L", "-o", dst, "-w", "%{http_code}", c.http[i]+p)
		if err == nil && out != "200" {
			if out == "404" {
				return nil, errNotFound
			}
			err = fmt.Errorf("GET %s: status %s", p, out)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	return os.ReadFile(dst)
}

var errNotFound = errors.New("not found")

// fault is one fault the scheduler injects and heals.
type fault struct {
	name string
	do   func(c *cluster, rng *rand.Rand) (what string, heal func())
}

var faults = []fault{
	{"kill -9 namespace server", func(c *cluster, rng *rand.Rand) (string, func()) {
		i := rng.IntN(len(c.mgms))
		c.mgms[i].Kill9()
		return fmt.Sprintf("namespace server %d", i), c.mgms[i].Restart
	}},
	{"kill -9 storage server", func(c *cluster, rng *rand.Rand) (string, func()) {
		i := rng.IntN(len(c.fsts))
		c.fsts[i].Kill9()
		return fmt.Sprintf("storage server %d", i), c.fsts[i].Restart
	}},
	{"kill -9 etcd member", func(c *cluster, rng *rand.Rand) (string, func()) {
		i := rng.IntN(c.etcd.Size())
		c.etcd.KillMember(i)
		return fmt.Sprintf("etcd member %d", i), func() { c.etcd.StartMember(i, true) }
	}},
	{"SIGSTOP active namespace server beyond its lease", func(c *cluster, rng *rand.Rand) (string, func()) {
		a, _ := c.active()
		i := max(slices.Index(c.http, a), 0)
		c.mgms[i].Cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(lease + time.Second)
		return fmt.Sprintf("namespace server %d (stopped %v before this)", i, lease+time.Second), func() { c.mgms[i].Cmd.Process.Signal(syscall.SIGCONT) }
	}},
	{"partition of a namespace server from etcd beyond its lease", func(c *cluster, rng *rand.Rand) (string, func()) {
		i := rng.IntN(len(c.mgms))
		c.links[i].SetUp(false)
		time.Sleep(lease + time.Second)
		return fmt.Sprintf("namespace server %d (its link to etcd's network namespace down %v before this)", i, lease+time.Second), func() {
			c.links[i].SetUp(true)
		}
	}},
	{"slow disk", func(c *cluster, rng *rand.Rand) (string, func()) {
		os.WriteFile(c.slow, []byte("300ms"), 0o644)
		return "fs " + c.slowMnt + " 300ms per operation", func() { os.WriteFile(c.slow, []byte("0"), 0o644) }
	}},
}

// TestChaos: see the package notes.
func TestChaos(t *testing.T) {
	if *seconds <= 0 {
		t.Skip("the chaos suite runs with -chaos.seconds N (scripts/chaos.sh)")
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	fmt.Printf("chaos: seed=%d seconds=%d clients=%d (replay: scripts/chaos.sh --seconds %d --seed %d)\n",
		*seed, *seconds, *nclient, *seconds, *seed)
	c := startCluster(t)
	h := &history{paths: map[string]*record{}, failed: map[string]int{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := range *nclient {
		cl := &client{c: c, h: h, id: id, rng: rand.New(rand.NewPCG(*seed, uint64(id)+1)), tmp: t.TempDir(), live: map[string][]byte{}}
		wg.Add(1)
		go func() { defer wg.Done(); cl.run(stop) }()
	}

	// The scheduler: one fault at a time, each healed before the next;
	// the disk that dies does so once, at a random time, and stays dead.
	rng := rand.New(rand.NewPCG(*seed, 0))
	end := time.Now().Add(time.Duration(*seconds) * time.Second)
	eioAt := time.Now().Add(time.Duration(rng.Int64N(int64(*seconds)*int64(time.Second)/2)) + 2*time.Second)
	injected := map[string]int{}
	eio := false
	for time.Now().Before(end) {
		time.Sleep(time.Duration(1000+rng.IntN(3000)) * time.Millisecond)
		if !eio && time.Now().After(eioAt) {
			os.WriteFile(c.eio, []byte("eio"), 0o644)
			eio = true
			injected["disk returning EIO"]++
			t.Logf("%s fault: fs %s returns EIO from now on", time.Now().Format("15:04:05.000"), c.eioFs)
			continue
		}
		f := faults[rng.IntN(len(faults))]
		what, heal := f.do(c, rng)
		injected[f.name]++
		hold := time.Duration(1000+rng.IntN(4000)) * time.Millisecond
		t.Logf("%s fault: %s: %s for %v", time.Now().Format("15:04:05.000"), f.name, what, hold)
		time.Sleep(hold)
		heal()
	}
	if !eio {
		os.WriteFile(c.eio, []byte("eio"), 0o644)
		injected["disk returning EIO"]++
	}
	close(stop)
	wg.Wait()

	// Healed: one active namespace server, the dead disk rebuilt.
	c.wait("a namespace server to be active after the faults", time.Minute, func() error {
		_, err := c.active()
		return err
	})
	c.wait("fs "+c.eioFs+" (EIO) to be declared lost and rebuilt (empty)", 5*time.Minute, func() error {
		out, err := c.kaon("fs", "ls")
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[1] == c.eioFs && strings.Contains(l, " lost ") && strings.Contains(l, " empty ") {
				return nil
			}
		}
		return fmt.Errorf("fs ls: %v\n%s", err, out)
	})
	if *sabotage {
		for p, r := range h.paths {
			if r.acked && r.allowed[0].there {
				out, err := c.kaon("rm", p)
				t.Logf("sabotage: kaon rm %s: %v %s", p, err, out)
				break
			}
		}
	}
	lost := check(t, c, h)
	acc, err := readAudit(c)
	if err != nil {
		t.Fatal(err)
	}
	terms, attributed := map[uint64]bool{}, 0
	committed := map[string]bool{}
	for _, a := range acc {
		if !terms[a.term] {
			t.Logf("term %d: first mutation accepted by namespace server %d at %s", a.term, a.server, a.at.Format("15:04:05.000"))
		}
		terms[a.term] = true
		if a.op == "commit" {
			committed[a.path] = true
		}
	}
	for _, p := range h.wrote {
		if committed[p] {
			attributed++
		}
	}
	for _, v := range splitBrain(acc) {
		t.Log("violation: " + v)
		lost++
	}
	nfaults := 0
	for _, n := range injected {
		nfaults += n
	}
	fmt.Printf("chaos: seed=%d acknowledged=%d unacknowledged=%d %v reads=%d faults=%d %v files_checked=%d terms=%d writes_with_term=%d/%d lost=%d\n",
		*seed, h.acked, h.unack, h.failed, h.reads, nfaults, injected, len(h.paths), len(terms), attributed, len(h.wrote), lost)
	if lost > 0 {
		t.Errorf("lost=%d (seed %d)", lost, *seed)
	}
}

// accepted is a mutation a namespace server recorded as done in its
// audit log (commit: an upload made visible), with the HA term it held.
type accepted struct {
	server   int
	term     uint64
	op, path string
	at       time.Time
}

// readAudit reads every namespace server's audit log.
func readAudit(c *cluster) ([]accepted, error) {
	var acc []accepted
	for i, m := range c.mgms {
		b, err := os.ReadFile(filepath.Join(m.Dir, "audit.log"))
		if err != nil {
			return nil, fmt.Errorf("namespace server %d's audit log: %v", i, err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var r nsserver.AuditRecord
			if json.Unmarshal([]byte(l), &r) != nil || r.Result != "ok" {
				continue // a line cut by kill -9, or a refusal
			}
			acc = append(acc, accepted{server: i, term: r.Term, op: r.Op, path: r.Path, at: r.Time})
		}
	}
	return acc, nil
}

// splitBrain returns a violation for every term in which two namespace
// servers accepted mutations (terms are leaderships won in etcd: one
// server each), and for every mutation accepted with no term (one the
// check cannot place).
func splitBrain(acc []accepted) []string {
	var v []string
	first := map[uint64]accepted{}
	for _, a := range acc {
		if a.term == 0 {
			v = append(v, fmt.Sprintf("namespace server %d accepted %s %s at %v with no HA term", a.server, a.op, a.path, a.at))
			continue
		}
		f, ok := first[a.term]
		if !ok {
			first[a.term] = a
		} else if f.server != a.server {
			v = append(v, fmt.Sprintf("term %d: namespace server %d accepted %s %s at %v and namespace server %d accepted %s %s at %v",
				a.term, f.server, f.op, f.path, f.at, a.server, a.op, a.path, a.at))
			first[a.term] = a // one violation per change of server
		}
	}
	return v
}

// check compares every path's content with what its record accepts and
// every file's redundancy with its layout; it returns the number of
// violations, each logged.
func check(t *testing.T, c *cluster, h *history) int {
	tmp := t.TempDir()
	var lost []string
	bad := func(format string, args ...any) { lost = append(lost, fmt.Sprintf(format, args...)) }
	lost = append(lost, h.bad...)
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range h.paths {
			if !yield(p) {
				return
			}
		}
	}) {
		r := h.paths[p]
		var got state
		var err error
		for try := 0; try < 3; try++ { // a server restarted a moment ago may still refuse
			var b []byte
			b, err = get(c, 0, false, tmp, p)
			if err == nil || errors.Is(err, errNotFound) {
				got = state{err == nil, b}
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil && !errors.Is(err, errNotFound) {
			bad("%s: unreadable after healing: %v", p, err)
			continue
		}
		ok := slices.ContainsFunc(r.allowed, func(s state) bool { return s.there == got.there && bytes.Equal(s.data, got.data) })
		if !ok {
			bad("%s (acknowledged: %v): holds %v, want one of %v", p, r.acked, got, r.allowed)
			continue
		}
		if got.there {
			if why := checkFile(c, p, got.data); why != "" {
				bad("%s: %s", p, why)
			}
		}
	}
	for _, l := range lost {
		t.Log("violation: " + l)
	}
	return len(lost)
}

// checkFile checks that p's adler32 is that of data and that it has its
// layout's stripes, none on the lost disk.
func checkFile(c *cluster, p string, data []byte) string {
	want, _ := checksum.Sum("adler32", data)
	out, err := run("HEAD "+p, time.Minute, "curl", "-sS", "-f", "-I", "-L", "-H", "Want-Digest: adler32", c.http[0]+p)
	if err != nil || !strings.Contains(strings.ToLower(out), "digest: adler32="+want) {
		return fmt.Sprintf("adler32 is not %s: %v %s", want, err, out)
	}
	out, err = c.kaon("file", "info", p)
	if err != nil {
		return fmt.Sprintf("kaon file info: %v %s", err, out)
	}
	var l layout.Layout
	fss := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Layout: "); ok {
			l, err = layout.Parse(strings.TrimSpace(v))
		}
		if f := strings.Fields(line); len(f) == 4 && strings.HasPrefix(f[3], "/") {
			if _, e := strconv.Atoi(f[0]); e == nil {
				fss[f[1]] = true
			}
		}
	}
	switch {
	case err != nil || l.Stripes() == 0:
		return fmt.Sprintf("no layout in kaon file info (%v):\n%s", err, out)
	case len(fss) != l.Stripes():
		return fmt.Sprintf("%d stripes on distinct filesystems, want %d (redundancy not full again):\n%s", len(fss), l.Stripes(), out)
	case fss[c.eioFs]:
		return fmt.Sprintf("a stripe on the lost fs %s:\n%s", c.eioFs, out)
	}
	return ""
}

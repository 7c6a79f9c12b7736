// Package ha tests a replicated namespace with the real binary: a real
// 3-member etcd cluster (integration/etcdtest), two or three `kaon mgm
// --meta etcd://...` and a storage server, driven by curl, davix, xrdcp
// and the kaon CLI through failovers, freezes and the loss of etcd
// members.
package ha

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"hash/adler32"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/etcdtest"
	"github.com/kaon-storage/kaon/integration/harness"
	"github.com/kaon-storage/kaon/internal/nsserver"
)

// lease is the namespace servers' --meta-lease in these tests: a dead
// active server is replaced about this long after it died.
const lease = "3s"

// instance is one replicated Kaon instance: etcd, namespace servers, one
// storage server with two filesystems.
type instance struct {
	t     *testing.T
	etcd  *etcdtest.Cluster
	meta  string
	key   string // the capability key file (written by the first server)
	mgms  []*harness.Process
	down  []bool   // namespace servers killed, stopped or frozen by the test
	http  []string // namespace servers' URLs (fixed ports: restarts keep them)
	xrd   []string // their root:// host:port
	fst   *harness.Process
	fsDir []string
	links []*harness.NetLink // with options.netns: namespace server i reaches etcd through links[i]
}

// options change what newInstanceWith starts.
type options struct {
	etcdFlags []string                         // added to every etcd member's command line
	meta      func(in *instance, i int) string // --meta of namespace server i (default in.meta)
	lease     time.Duration                    // --meta-lease (default lease)
	mgmFlags  []string                         // added to every namespace server's command line
	// netns runs etcd in a network namespace of its own, reached by each
	// namespace server through a link of its own (instance.links).
	netns bool
}

// newInstance starts etcd, n namespace servers (the first one alone, so it
// is the active one and writes the key) and the storage server.
func newInstance(t *testing.T, n int) *instance { return newInstanceWith(t, n, options{}) }

func newInstanceWith(t *testing.T, n int, o options) *instance {
	in := &instance{t: t}
	metaAt := func(eps []string) string {
		var hosts []string
		for _, ep := range eps {
			hosts = append(hosts, strings.TrimPrefix(ep, "http://"))
		}
		return "etcd://" + strings.Join(hosts, ",")
	}
	if o.netns {
		ns := harness.NewNetns(t)
		own := ns.Link()
		for range n {
			in.links = append(in.links, ns.Link())
		}
		in.etcd = etcdtest.StartWith(t, 3, etcdtest.Options{Flags: o.etcdFlags, Wrap: ns.Wrap, Host: own.Inside})
		o.meta = func(in *instance, i int) string { return metaAt(in.etcd.EndpointsAt(in.links[i].Inside)) }
	} else {
		in.etcd = etcdtest.Start(t, 3, o.etcdFlags...)
	}
	in.meta = metaAt(in.etcd.Endpoints())
	ports := harness.FreePorts(t, 2*n)
	for i := 0; i < n; i++ {
		in.http = append(in.http, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]))
		in.xrd = append(in.xrd, fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]))
	}
	for i := 0; i < n; i++ {
		dir := t.TempDir()
		meta := in.meta
		if o.meta != nil {
			meta = o.meta(in, i)
		}
		l := lease
		if o.lease > 0 {
			l = o.lease.String()
		}
		args := []string{"mgm", "--data", dir, "--http", strings.TrimPrefix(in.http[i], "http://"), "--xrootd", in.xrd[i],
			"--meta", meta, "--meta-lease", l, "--meta-txn-ops", strconv.Itoa(etcdtest.MaxTxnOps),
			"--meta-request-bytes", strconv.Itoa(etcdtest.MaxRequestBytes)}
		args = append(args, o.mgmFlags...)
		if i == 0 {
			in.key = filepath.Join(dir, "keys", "capability.key")
		} else {
			args = append(args, "--key", in.key)
		}
		in.mgms = append(in.mgms, harness.Start(t, dir, args...))
		in.down = append(in.down, false)
		if i == 0 {
			in.waitActive(0, "the first namespace server becomes active")
		}
	}
	fstDir := t.TempDir()
	in.fsDir = []string{filepath.Join(fstDir, "fs1"), filepath.Join(fstDir, "fs2")}
	in.fst = harness.Start(t, fstDir, "fst", "--mgm", strings.Join(in.http, ","), "--key", in.key,
		"--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0", "--mgm-xrootd", in.xrd[0], "--node", "disk01",
		"--fs", in.fsDir[0], "--fs", in.fsDir[1], "--data", fstDir)
	in.eventually("both filesystems booted", 60*time.Second, func() error {
		out, _, _ := in.kaon(in.http[in.activeNow()], "fs", "ls")
		if strings.Count(out, "booted") != 2 {
			return fmt.Errorf("fs ls:\n%s", out)
		}
		return nil
	})
	return in
}

// kaon runs the CLI against url.
func (in *instance) kaon(url string, args ...string) (string, string, int) {
	return harness.KaonAt(in.t, url, args...)
}

var activeLine = regexp.MustCompile(`(?m)^active\s+(http://\S+)$`)

// activeSeenBy is the active server's URL as server i reports it ("" if
// none or it does not answer).
func (in *instance) activeSeenBy(i int) string {
	out, _, code := in.kaon(in.http[i], "ns", "status", "--url", in.http[i])
	if m := activeLine.FindStringSubmatch(out); code == 0 && m != nil {
		return m[1]
	}
	return ""
}

// activeNow is the index of the server every running server names active
// right now, or -1.
func (in *instance) activeNow() int {
	found := ""
	for i := range in.mgms {
		if in.down[i] {
			continue
		}
		a := in.activeSeenBy(i)
		if a == "" || (found != "" && a != found) {
			return -1
		}
		found = a
	}
	for i, u := range in.http {
		if u == found {
			return i
		}
	}
	return -1
}

// waitActive waits until every running server names server want active
// (want -1: any one), and returns it.
func (in *instance) waitActive(want int, step string) int {
	in.t.Helper()
	got := -1
	in.eventually(step, 60*time.Second, func() error {
		got = in.activeNow()
		if got < 0 || (want >= 0 && got != want) {
			return fmt.Errorf("active: %d, want %d", got, want)
		}
		return nil
	})
	return got
}

// waitActiveOther waits until every running server names one other than
// old active (which they name until its lease lapses), and returns it.
func (in *instance) waitActiveOther(old int, step string) int {
	in.t.Helper()
	got := -1
	in.eventually(step, 60*time.Second, func() error {
		if got = in.activeNow(); got < 0 || got == old {
			return fmt.Errorf("active: %d, want another than %d", got, old)
		}
		return nil
	})
	return got
}

// signal sends sig to namespace server i (SIGSTOP/SIGCONT: frozen or
// not, as far as activeNow is concerned).
func (in *instance) signal(i int, sig syscall.Signal) {
	in.t.Helper()
	if err := in.mgms[i].Cmd.Process.Signal(sig); err != nil {
		in.t.Fatal(err)
	}
	in.down[i] = sig == syscall.SIGSTOP
}

// eventually retries fn until it succeeds, failing with step after d.
func (in *instance) eventually(step string, d time.Duration, fn func() error) {
	in.t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			in.t.Fatalf("%s: not within %v: %v", step, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// curlResult is one run of the real curl.
type curlResult struct {
	code   int
	exit   int
	body   []byte
	stderr string
}

func curl(args ...string) curlResult {
	cmd := exec.Command("curl", append([]string{"-sS", "-w", "\n%{http_code}"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := curlResult{stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.exit = ee.ExitCode()
	}
	b := out.Bytes()
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		r.code, _ = strconv.Atoi(string(b[i+1:]))
		r.body = b[:i]
	}
	return r
}

func randomFile(t *testing.T, size int) (string, []byte) {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.Read(b)
	f, err := os.CreateTemp(t.TempDir(), "data-")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return f.Name(), b
}

func adler(b []byte) string { return fmt.Sprintf("%08x", adler32.Checksum(b)) }

// checkFile fails unless path reads back as want through url, with its
// adler32 recorded.
// A 503 (a server that just took over, still hearing from the storage
// servers) is retried, as clients do.
func (in *instance) checkFile(url, path string, want []byte) {
	in.t.Helper()
	var r curlResult
	in.eventually("GET "+path+" via "+url+" answers", 30*time.Second, func() error {
		if r = curl("-L", url+path); r.code == 503 {
			return fmt.Errorf("503 %s", r.body)
		}
		return nil
	})
	if r.code != 200 || !bytes.Equal(r.body, want) {
		in.t.Fatalf("GET %s via %s: status %d, %d bytes (want %d), equal %v: %s", path, url, r.code, len(r.body), len(want), bytes.Equal(r.body, want), r.stderr)
	}
	r = curl("-I", "-L", "-H", "Want-Digest: adler32", url+path)
	if !strings.Contains(string(r.body), "adler32="+adler(want)) {
		in.t.Fatalf("HEAD %s: digest not adler32=%s:\n%s", path, adler(want), r.body)
	}
}

// putRetry uploads until it succeeds, as a client does through a failover.
func (in *instance) putRetry(url, local, path, step string) {
	in.t.Helper()
	in.eventually(step, 60*time.Second, func() error {
		if r := curl("-L", "-T", local, url+path); r.code != 201 {
			return fmt.Errorf("PUT %s: %d %s %s", path, r.code, r.body, r.stderr)
		}
		return nil
	})
}

// stripes counts the stripe files on the storage server's filesystems.
func (in *instance) stripes() int {
	n := 0
	for _, d := range in.fsDir {
		_ = filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() && !strings.HasPrefix(fi.Name(), ".") {
				n++
			}
			return nil
		})
	}
	return n
}

// commitTerm is the HA term of the last upload of path that namespace
// server i's audit log records as committed (0: none).
func (in *instance) commitTerm(i int, path string) uint64 {
	b, _ := os.ReadFile(filepath.Join(in.mgms[i].Dir, "audit.log"))
	var term uint64
	for _, l := range strings.Split(string(b), "\n") {
		var r nsserver.AuditRecord
		if json.Unmarshal([]byte(l), &r) == nil && r.Op == "commit" && r.Path == path && r.Result == "ok" {
			term = r.Term
		}
	}
	return term
}

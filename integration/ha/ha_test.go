package ha

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// Any namespace server's URL works: standbys send curl, davix, xrdcp,
// xrdfs and the CLI to the active one; every server reports the same
// active one; step-down hands the role over and clients follow.
func TestStandbysSendClientsToTheActiveServer(t *testing.T) {
	in := newInstance(t, 3)
	a := in.waitActive(0, "server 0 is active")
	sb := in.http[1] // a standby
	local, data := randomFile(t, 3<<20)

	if r := curl("-L", "-T", local, sb+"/data/curl.bin"); r.code != 201 {
		t.Fatalf("curl -L -T through a standby: %d %s %s", r.code, r.body, r.stderr)
	}
	r := curl("-o", "/dev/null", "-D", "-", sb+"/data/curl.bin")
	if r.code != 307 || !strings.Contains(string(r.body), "Location: "+in.http[a]+"/data/curl.bin") {
		t.Fatalf("GET at a standby: %d, want 307 to %s:\n%s", r.code, in.http[a], r.body)
	}
	in.checkFile(sb, "/data/curl.bin", data)

	if out, err := exec.Command("davix-put", local, sb+"/data/davix.bin").CombinedOutput(); err != nil {
		t.Fatalf("davix-put through a standby: %v\n%s", err, out)
	}
	got := filepath.Join(t.TempDir(), "davix.out")
	if out, err := exec.Command("davix-get", sb+"/data/davix.bin", got).CombinedOutput(); err != nil {
		t.Fatalf("davix-get through a standby: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(got); !bytes.Equal(b, data) {
		t.Fatal("davix-get through a standby: content differs")
	}

	xsb := "root://" + in.xrd[2]
	if out, err := exec.Command("xrdcp", "-f", "--cksum", "adler32", local, xsb+"//data/xrdcp.bin").CombinedOutput(); err != nil {
		t.Fatalf("xrdcp through a standby: %v\n%s", err, out)
	}
	out, err := exec.Command("xrdfs", in.xrd[2], "ls", "-l", "/data").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "/data/xrdcp.bin") || !strings.Contains(string(out), "/data/davix.bin") {
		t.Fatalf("xrdfs ls through a standby: %v\n%s", err, out)
	}
	if o, e, code := in.kaon(sb, "mkdir", "-p", "/cli/sub"); code != 0 {
		t.Fatalf("kaon mkdir through a standby: %s %s", o, e)
	}
	if o, e, code := in.kaon(sb, "cp", local, "kaon:/cli/sub/cp.bin"); code != 0 {
		t.Fatalf("kaon cp through a standby: %s %s", o, e)
	}
	if o, _, _ := in.kaon(sb, "ls", "/cli/sub"); !strings.Contains(o, "cp.bin") {
		t.Fatalf("kaon ls through a standby: %s", o)
	}

	st, _, code := in.kaon(sb, "ns", "status")
	for _, want := range []string{"active    " + in.http[a], "engine    etcd", " standby ", "healthy, leader"} {
		if code != 0 || !strings.Contains(st, want) {
			t.Fatalf("kaon ns status at a standby lacks %q:\n%s", want, st)
		}
	}
	if n := strings.Count(st, "\nserver "); n != 3 {
		t.Fatalf("ns status lists %d servers, want 3:\n%s", n, st)
	}
	for _, u := range in.http {
		if code, body := statusAsNobody(t, u); code != "403" {
			t.Fatalf("ns status of %s for a non-root client: %s %s (want 403: servers, roles and etcd endpoints are for the admin)", u, code, body)
		}
	}

	// Step-down, asked at a standby: the request is sent on to the active
	// server, which hands over; the clients follow the new one.
	if o, e, code := in.kaon(sb, "ns", "step-down"); code != 0 {
		t.Fatalf("kaon ns step-down: %s %s", o, e)
	}
	b := in.waitActiveOther(a, "another server is active after the step-down")
	in.checkFile(in.http[a], "/data/curl.bin", data) // the old one is a standby now
	in.putRetry(in.http[a], local, "/data/after-step-down.bin", "upload through the former active server")
	in.checkFile(in.http[b], "/data/after-step-down.bin", data)
}

// A frozen active server (SIGSTOP) loses its role to a standby; writes go
// on through the new one; the old one, resumed, has its commit refused by
// etcd (fenced), does not apply the write that waited for it, and becomes
// a standby.
func TestFrozenActiveServerIsFenced(t *testing.T) {
	in := newInstance(t, 2)
	in.waitActive(0, "server 0 is active")
	local, data := randomFile(t, 1<<20)
	in.putRetry(in.http[0], local, "/before.bin", "upload before the freeze")

	in.signal(0, syscall.SIGSTOP)
	defer in.mgms[0].Cmd.Process.Signal(syscall.SIGCONT)
	in.waitActive(1, "server 1 takes over from the frozen server 0")
	in.putRetry(in.http[1], local, "/during.bin", "upload through the new active server")

	// A write sent to the frozen server waits in its socket.
	queued := make(chan curlResult, 1)
	go func() {
		queued <- curl("-X", "POST", "-H", "Content-Type: application/json", "-d", `{"path":"/queued-at-frozen"}`, in.http[0]+"/api/v1/mkdir")
	}()
	time.Sleep(500 * time.Millisecond) // let it reach the socket
	in.signal(0, syscall.SIGCONT)
	var q curlResult
	select {
	case q = <-queued:
	case <-time.After(60 * time.Second):
		t.Fatal("the write queued at the frozen server got no answer within 60s of SIGCONT")
	}
	if q.code == 200 {
		t.Fatalf("the deposed server applied a write: %d %s", q.code, q.body)
	}
	t.Logf("write queued at the frozen server: %d %s", q.code, strings.TrimSpace(string(q.body)))
	in.eventually("the resumed server logs that etcd refused its commit", 60*time.Second, func() error {
		if !strings.Contains(in.mgms[0].Logs(), "fenced") {
			return fmt.Errorf("no fencing in its log")
		}
		return nil
	})
	in.waitActive(1, "the resumed server is a standby naming server 1 active")
	if o, _, code := in.kaon(in.http[1], "stat", "/queued-at-frozen"); code == 0 {
		t.Fatalf("the write queued at the deposed server is visible: %s", o)
	}
	in.checkFile(in.http[0], "/before.bin", data)
	in.checkFile(in.http[0], "/during.bin", data)
	// Each server's audit log names the term it committed in: server 0's
	// upload before the freeze in one, server 1's during it in a later
	// one (the chaos suite's split-brain check rests on this).
	var before, during uint64
	in.eventually("the audit logs to name the terms of both uploads", 30*time.Second, func() error {
		before, during = in.commitTerm(0, "/before.bin"), in.commitTerm(1, "/during.bin")
		if before == 0 || during <= before {
			return fmt.Errorf("commit of /before.bin on server 0 in term %d, of /during.bin on server 1 in term %d", before, during)
		}
		return nil
	})
	t.Logf("terms: server 0 committed in %d, server 1 in %d", before, during)
}

// kill -9 of the active server during 16 parallel uploads: every upload
// that succeeded is complete with its checksum after the failover, every
// other one is absent; the dead server's pending uploads are aborted and
// their stripes deleted.
func TestKill9DuringParallelUploads(t *testing.T) {
	in := newInstance(t, 2)
	in.waitActive(0, "server 0 is active")
	type upload struct {
		path  string
		data  []byte
		local string
		res   curlResult
	}
	var ups []*upload
	for i := 0; i < 16; i++ {
		size := 1 << 20
		if i%2 == 1 { // still streaming (8 s at 4 MB/s) when the server dies
			size = 32 << 20
		}
		local, data := randomFile(t, size)
		ups = append(ups, &upload{path: fmt.Sprintf("/up/f%02d", i), data: data, local: local})
	}
	if _, e, code := in.kaon(in.http[0], "mkdir", "/up"); code != 0 {
		t.Fatal(e)
	}
	var small, all sync.WaitGroup
	for i, u := range ups {
		all.Add(1)
		if i%2 == 0 {
			small.Add(1)
		}
		go func() {
			defer all.Done()
			args := []string{"-L", "-T", u.local}
			if i%2 == 1 {
				args = append(args, "--limit-rate", "4M")
			}
			u.res = curl(append(args, in.http[0]+u.path)...)
			if i%2 == 0 {
				small.Done()
			}
		}()
	}
	small.Wait()
	time.Sleep(500 * time.Millisecond) // the large ones are streaming to the storage server
	in.mgms[0].Kill9()
	in.down[0] = true
	all.Wait()
	in.waitActive(1, "server 1 takes over")

	ok := 0
	for _, u := range ups {
		if u.res.code == 201 && u.res.exit == 0 {
			ok++
			in.checkFile(in.http[1], u.path, u.data)
			continue
		}
		t.Logf("%s: failed (%d, exit %d): %s", u.path, u.res.code, u.res.exit, strings.TrimSpace(u.res.stderr+string(u.res.body)))
		if o, _, code := in.kaon(in.http[1], "stat", u.path); code == 0 {
			t.Fatalf("%s failed for its client but is visible: %s", u.path, o)
		}
	}
	if ok < 8 {
		t.Fatalf("%d uploads succeeded; the 8 small ones finished before the kill", ok)
	}
	if ok == 16 {
		t.Fatal("every upload succeeded: none was in flight when the server died")
	}
	if !regexp.MustCompile(`aborted unfinished uploads from a previous run.*count=[1-9]`).MatchString(in.mgms[1].Logs()) {
		t.Fatal("the new active server did not abort the dead one's pending uploads")
	}
	in.eventually("only the stripes of visible files remain", 60*time.Second, func() error {
		if n := in.stripes(); n != ok {
			return fmt.Errorf("%d stripe files, %d visible files", n, ok)
		}
		return nil
	})
	// The dead server comes back as a standby.
	in.mgms[0].Restart()
	in.down[0] = false
	in.waitActive(1, "the restarted server is a standby")
	in.putRetry(in.http[0], ups[0].local, "/up/after", "upload through the restarted server")
}

// With one etcd member of three lost the service goes on; with two,
// writes and reads fail at once with "namespace unavailable" (503,
// kXR_ServerError) and `kaon ns status` says why; with the members back
// everything is there and writes work again.
func TestEtcdMemberLoss(t *testing.T) {
	in := newInstance(t, 2)
	in.waitActive(0, "server 0 is active")
	local, data := randomFile(t, 1<<20)
	in.putRetry(in.http[0], local, "/a.bin", "upload with three members")

	in.etcd.KillMember(0)
	for i := 0; i < 5; i++ {
		in.putRetry(in.http[1], local, fmt.Sprintf("/one-down-%d.bin", i), "upload with two members of three")
	}
	st, _, _ := in.kaon(in.http[1], "ns", "status")
	if !strings.Contains(st, "unhealthy") || strings.Count(st, "healthy") != 3 {
		t.Fatalf("ns status with a member down:\n%s", st)
	}

	in.etcd.StopMember(1)
	var r curlResult
	in.eventually("writes fail with namespace unavailable", 60*time.Second, func() error {
		r = curl("-L", "-T", local, in.http[0]+"/two-down.bin")
		if r.code != 503 || !strings.Contains(string(r.body), "namespace unavailable") {
			return fmt.Errorf("PUT: %d %s", r.code, r.body)
		}
		return nil
	})
	start := time.Now()
	for _, u := range in.http {
		r = curl("-L", "-T", local, u+"/two-down.bin")
		if r.code != 503 || !strings.Contains(string(r.body), "namespace unavailable") {
			t.Fatalf("PUT via %s without quorum: %d %s", u, r.code, r.body)
		}
		r = curl("-L", u+"/a.bin")
		if r.code != 503 || !strings.Contains(string(r.body), "namespace unavailable") {
			t.Fatalf("GET via %s without quorum: %d %s, want refused (503)", u, r.code, r.body)
		}
	}
	t.Logf("4 requests without quorum answered in %v", time.Since(start))
	out, _ := exec.Command("xrdcp", "-f", local, "root://"+in.xrd[0]+"//two-down-xrd.bin").CombinedOutput()
	if !strings.Contains(string(out), "[3012]") || !strings.Contains(string(out), "namespace unavailable") {
		t.Fatalf("xrdcp without quorum: want kXR_ServerError (3012) namespace unavailable:\n%s", out)
	}
	st, _, code := in.kaon(in.http[1], "ns", "status")
	if code != 0 || !strings.Contains(st, "active    none") || !strings.Contains(st, "no leader") {
		t.Fatalf("ns status without quorum:\n%s", st)
	}

	in.etcd.StartMember(0, false)
	in.etcd.StartMember(1, true)
	in.putRetry(in.http[1], local, "/back.bin", "upload once the members are back")
	a := in.waitActive(-1, "an active server once the members are back")
	for _, p := range []string{"/a.bin", "/one-down-0.bin", "/one-down-4.bin", "/back.bin"} {
		in.checkFile(in.http[a], p, data)
	}
}

// Restarting everything (etcd members, namespace servers, storage server)
// keeps every file and directory.
func TestWholeClusterRestart(t *testing.T) {
	in := newInstance(t, 2)
	in.waitActive(0, "server 0 is active")
	files := map[string][]byte{}
	for i := 0; i < 5; i++ {
		local, data := randomFile(t, 256<<10)
		p := fmt.Sprintf("/keep/d%d/f%d", i%2, i)
		in.putRetry(in.http[0], local, p, "upload before the restart")
		files[p] = data
	}
	if _, e, code := in.kaon(in.http[0], "attr", "set", "/keep", "sys.forced.layout=replica:2"); code != 0 {
		t.Fatal(e)
	}
	in.fst.Stop()
	for i := range in.mgms {
		in.mgms[i].Stop()
	}
	for i := 0; i < in.etcd.Size(); i++ {
		in.etcd.StopMember(i)
	}
	for i := 0; i < in.etcd.Size(); i++ {
		in.etcd.StartMember(i, i == in.etcd.Size()-1)
	}
	for i := range in.mgms {
		in.mgms[i].Restart()
	}
	in.fst.Restart()
	a := in.waitActive(-1, "an active server after the restart")
	for p, data := range files {
		in.checkFile(in.http[1-a], p, data)
	}
	if o, _, _ := in.kaon(in.http[a], "attr", "get", "/keep", "sys.forced.layout"); !strings.Contains(o, "replica:2") {
		t.Fatalf("attribute lost in the restart: %q", o)
	}
	local, data := randomFile(t, 256<<10)
	in.putRetry(in.http[a], local, "/keep/after", "upload after the restart")
	in.checkFile(in.http[1-a], "/keep/after", data)
}

// An embedded namespace reports itself: one server, active, on Pebble;
// there is nobody to step down to.
func TestStatusOfAnEmbeddedNamespace(t *testing.T) {
	k := harness.Up(t)
	out := k.MustKaon("ns", "status")
	for _, want := range []string{"active    " + k.EP.HTTP, "engine    pebble", "server  " + k.EP.HTTP + "  active"} {
		if !strings.Contains(out, want) {
			t.Fatalf("ns status of kaon up lacks %q:\n%s", want, out)
		}
	}
	if _, errs, code := k.Kaon("ns", "step-down"); code == 0 || !strings.Contains(errs, "not replicated") {
		t.Fatalf("ns step-down of kaon up: exit %d: %s", code, errs)
	}
	if code, body := statusAsNobody(t, k.EP.HTTP); code != "403" {
		t.Fatalf("ns status of kaon up for a non-root client: %s %s (want 403)", code, body)
	}
}

// statusAsNobody asks u for the namespace's status as uid 65534 (a local
// client without credentials) and returns the HTTP status and body.
func statusAsNobody(t *testing.T, u string) (string, string) {
	t.Helper()
	cmd := exec.Command("curl", "-sS", "-w", "\n%{http_code}", u+"/api/v1/ns/status")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Dir = "/"
	out, err := cmd.Output()
	i := bytes.LastIndexByte(out, '\n')
	if err != nil || i < 0 {
		t.Fatalf("curl %s/api/v1/ns/status as nobody: %v %s", u, err, out)
	}
	return string(out[i+1:]), string(out[:i])
}

// freePeerPort is a free loopback port whose predecessor is free too (an
// embedded member serves clients on the port below its peer port).
func freePeerPort(t *testing.T) int {
	t.Helper()
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p-1))
		l.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no two adjacent free ports")
	return 0
}

// Three namespace servers, each running an etcd member (--meta-peers),
// are a whole instance without an etcd of their own: one is active; kill
// -9 of it (and so of its member) leaves two of three members and a
// standby that takes over; back, it rejoins as a standby.
func TestEmbeddedEtcdMembers(t *testing.T) {
	in := &instance{t: t}
	var peers []string
	ports := harness.FreePorts(t, 6)
	for i := 0; i < 3; i++ {
		in.http = append(in.http, fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]))
		in.xrd = append(in.xrd, fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]))
		peers = append(peers, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, freePeerPort(t)))
		in.mgms, in.down = append(in.mgms, nil), append(in.down, false)
	}
	keyDir := t.TempDir()
	in.key = filepath.Join(keyDir, "capability.key")
	if err := os.WriteFile(in.key, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range in.mgms {
		wg.Add(1)
		go func() { // each waits for a majority of the members
			defer wg.Done()
			dir := t.TempDir()
			in.mgms[i] = harness.Start(t, dir, "mgm", "--data", dir, "--http", strings.TrimPrefix(in.http[i], "http://"), "--xrootd", in.xrd[i],
				"--meta-peers", strings.Join(peers, ","), "--meta-name", fmt.Sprintf("m%d", i), "--meta-lease", lease, "--key", in.key)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	a := in.waitActive(-1, "one of the three servers is active")
	fstDir := t.TempDir()
	in.fsDir = []string{filepath.Join(fstDir, "fs1")}
	in.fst = harness.Start(t, fstDir, "fst", "--mgm", strings.Join(in.http, ","), "--key", in.key,
		"--http", "127.0.0.1:0", "--node", "disk01", "--fs", in.fsDir[0], "--data", fstDir)
	st, _, _ := in.kaon(in.http[(a+1)%3], "ns", "status")
	if strings.Count(st, "healthy") != 3 || strings.Contains(st, "unhealthy") || strings.Count(st, "\nserver ") != 3 {
		t.Fatalf("ns status of the embedded members:\n%s", st)
	}
	local, data := randomFile(t, 1<<20)
	in.putRetry(in.http[(a+1)%3], local, "/before.bin", "upload through a standby")

	in.mgms[a].Kill9()
	in.down[a] = true
	b := in.waitActiveOther(a, "a standby takes over, two of three members left")
	in.putRetry(in.http[b], local, "/after.bin", "upload after the kill")
	in.checkFile(in.http[b], "/before.bin", data)

	in.mgms[a].Restart()
	in.down[a] = false
	in.waitActive(b, "the restarted server rejoins as a standby")
	in.eventually("its member is healthy again", 60*time.Second, func() error {
		st, _, _ := in.kaon(in.http[a], "ns", "status")
		if strings.Count(st, "healthy") != 3 || strings.Contains(st, "unhealthy") {
			return fmt.Errorf("ns status:\n%s", st)
		}
		return nil
	})
	in.checkFile(in.http[a], "/after.bin", data)
}

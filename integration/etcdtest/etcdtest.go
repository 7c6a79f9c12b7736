// Package etcdtest runs a real etcd cluster for tests: N members of Debian's
// etcd-server (scripts/deps.sh installs it) on free loopback ports in a temp
// dir, stopped when the test ends, their logs printed if it failed. Members
// can be killed, stopped and restarted to test failures. The flags match
// scripts/etcd-dev.sh, the same cluster for manual runs.
package etcdtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Limits the test cluster raises above etcd's defaults (128 operations and
// 1.5 MiB per request), so that engines can be tested near their own limits.
const (
	MaxTxnOps       = 4096
	MaxRequestBytes = 8 << 20
)

// startTimeout bounds how long members may take to elect a leader.
const startTimeout = 60 * time.Second

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	dir     string
	token   string
	opt     Options
	members []*member
}

// Options are how StartWith runs the members.
type Options struct {
	// Flags are added to every member's command line.
	Flags []string
	// Wrap, if set, turns each member's command line into the one that
	// runs it (e.g. inside a network namespace: harness.Netns.Wrap; it
	// must exec the member, keeping its pid, as nsenter does).
	Wrap func(name string, args []string) (string, []string)
	// Host, if set, is the address the members are reached at (an
	// address of their network namespace): they listen for clients on
	// every address there and talk to each other on its loopback.
	Host string
}

type member struct {
	name      string
	dir       string
	clientURL string
	peerURL   string
	log       *syncBuf
	cmd       *exec.Cmd
	exited    chan struct{} // closed when cmd has exited
}

// Start starts an n-member cluster and waits until it has a leader. Flags
// are added to every member's command line (e.g. "--election-timeout",
// "1000": a test that depends on etcd's timings sets them).
func Start(t testing.TB, n int, flags ...string) *Cluster {
	t.Helper()
	return StartWith(t, n, Options{Flags: flags})
}

// StartWith starts an n-member cluster as o says and waits until it has
// a leader.
func StartWith(t testing.TB, n int, o Options) *Cluster {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcd not found (%v): scripts/deps.sh installs Debian's etcd-server", err)
	}
	var lastErr error
	for try := 0; try < 3; try++ { // a free port can be taken by another process before etcd binds it
		c := &Cluster{t: t, dir: t.TempDir(), token: fmt.Sprintf("kaon-test-%d-%d", os.Getpid(), time.Now().UnixNano()), opt: o}
		ports, err := freePorts(2 * n)
		if err != nil {
			t.Fatal(err)
		}
		host := "127.0.0.1"
		if o.Host != "" {
			host = o.Host
		}
		var initial []string
		for i := 0; i < n; i++ {
			m := &member{
				name:      fmt.Sprintf("m%d", i),
				dir:       filepath.Join(c.dir, fmt.Sprintf("m%d", i)),
				clientURL: "http://" + net.JoinHostPort(host, fmt.Sprint(ports[2*i])),
				peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
				log:       &syncBuf{},
			}
			c.members = append(c.members, m)
			initial = append(initial, m.name+"="+m.peerURL)
		}
		for _, m := range c.members {
			m.start(t, bin, strings.Join(initial, ","), c.token, o)
		}
		if lastErr = c.waitHealthy(c.members...); lastErr == nil {
			t.Cleanup(c.stopAll)
			return c
		}
		c.stopAll()
	}
	t.Fatalf("etcd cluster did not start: %v", lastErr)
	return nil
}

func (m *member) start(t testing.TB, bin, initial, token string, o Options) {
	listen := m.clientURL
	if o.Host != "" {
		listen = "http://0.0.0.0:" + m.clientURL[strings.LastIndex(m.clientURL, ":")+1:]
	}
	args := []string{
		"--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", listen, "--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", m.peerURL, "--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", initial, "--initial-cluster-state", "new", "--initial-cluster-token", token,
		"--max-txn-ops", fmt.Sprint(MaxTxnOps), "--max-request-bytes", fmt.Sprint(MaxRequestBytes),
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
	}
	args = append(args, o.Flags...)
	name := bin
	if o.Wrap != nil {
		name, args = o.Wrap(name, args)
	}
	cmd := exec.Command(name, args...)
	for _, kv := range os.Environ() { // ETCD_* variables would override flags
		if !strings.HasPrefix(kv, "ETCD") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = m.log, m.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	fmt.Fprintf(m.log, "=== start %s: %s %s\n", m.name, name, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd member %s: %v", m.name, err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	go func(done chan struct{}) {
		err := cmd.Wait()
		fmt.Fprintf(m.log, "=== %s exited: %v\n", m.name, err)
		close(done)
	}(m.exited)
}

func (m *member) running() bool {
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// signal sends sig and waits for the exit, escalating to SIGKILL after
// 20s.
func (m *member) signal(sig syscall.Signal) error {
	if !m.running() {
		return nil
	}
	_ = m.cmd.Process.Signal(sig)
	select {
	case <-m.exited:
		return nil
	case <-time.After(20 * time.Second):
	}
	_ = m.cmd.Process.Kill()
	select {
	case <-m.exited:
		return fmt.Errorf("etcd member %s ignored %v for 20s and was killed", m.name, sig)
	case <-time.After(20 * time.Second):
		return fmt.Errorf("etcd member %s (pid %d) did not exit after SIGKILL", m.name, m.cmd.Process.Pid)
	}
}

func (c *Cluster) stopAll() {
	for _, m := range c.members {
		if err := m.signal(syscall.SIGTERM); err != nil {
			c.t.Error(err)
		}
	}
	if c.t.Failed() {
		for _, m := range c.members {
			c.t.Logf("--- etcd member %s log:\n%s", m.name, m.log.tail(8<<10))
		}
	}
}

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL)
	}
	return eps
}

// EndpointsAt returns every member's client URL with host in place of
// Options.Host (the address the members are reached at through another
// link of their network namespace).
func (c *Cluster) EndpointsAt(host string) []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, "http://"+net.JoinHostPort(host, m.clientURL[strings.LastIndex(m.clientURL, ":")+1:]))
	}
	return eps
}

// Endpoint returns member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.members[i].clientURL }

// Size is the number of members.
func (c *Cluster) Size() int { return len(c.members) }

// KillMember kills member i with SIGKILL (a crash) and waits for it to exit.
func (c *Cluster) KillMember(i int) {
	c.t.Helper()
	if err := c.members[i].signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
}

// StopMember stops member i gracefully (SIGTERM) and waits for it to exit.
func (c *Cluster) StopMember(i int) {
	c.t.Helper()
	if err := c.members[i].signal(syscall.SIGTERM); err != nil {
		c.t.Fatal(err)
	}
}

// SignalMember sends sig to member i without waiting (SIGSTOP freezes it
// with its connections open, as a host too loaded to answer; SIGCONT
// resumes it).
func (c *Cluster) SignalMember(i int, sig syscall.Signal) {
	c.t.Helper()
	m := c.members[i]
	if !m.running() {
		c.t.Fatalf("etcd member %s is not running", m.name)
	}
	if err := m.cmd.Process.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
}

// client is a client of the running members, for the test's own reads.
func (c *Cluster) client() *clientv3.Client {
	c.t.Helper()
	var eps []string
	for _, m := range c.members {
		if m.running() {
			eps = append(eps, m.clientURL)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	return cli
}

// Leader is the index of the member that leads the cluster now, waiting
// up to a minute for one.
func (c *Cluster) Leader() int {
	c.t.Helper()
	cli := c.client()
	defer cli.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		for i, m := range c.members {
			if !m.running() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			st, err := cli.Status(ctx, m.clientURL)
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return i
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no etcd member leads after %v", startTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Get reads key (the whole key, prefix included) with a quorum read; nil
// when it does not exist.
func (c *Cluster) Get(key string) []byte {
	c.t.Helper()
	cli := c.client()
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		c.t.Fatalf("etcd get %s: %v", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0].Value
}

// StartMember restarts a stopped or killed member i on its data dir and,
// when wait is set, waits until it is healthy (a member is healthy only
// while the cluster has a leader, so wait only once a quorum runs again).
func (c *Cluster) StartMember(i int, wait bool) {
	c.t.Helper()
	m := c.members[i]
	if m.running() {
		c.t.Fatalf("etcd member %s is already running", m.name)
	}
	bin, _ := exec.LookPath("etcd")
	var initial []string
	for _, o := range c.members {
		initial = append(initial, o.name+"="+o.peerURL)
	}
	m.start(c.t, bin, strings.Join(initial, ","), c.token, c.opt)
	if wait {
		if err := c.waitHealthy(m); err != nil {
			c.t.Fatal(err)
		}
	}
}

// waitHealthy polls each member's /health until it answers true.
func (c *Cluster) waitHealthy(ms ...*member) error {
	deadline := time.Now().Add(startTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for _, m := range ms {
		for {
			if !m.running() {
				return fmt.Errorf("etcd member %s exited while starting:\n%s", m.name, m.log.tail(4<<10))
			}
			resp, err := client.Get(m.clientURL + "/health")
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`"health":"true"`)) {
					break
				}
				err = fmt.Errorf("%s: %s", resp.Status, body)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("etcd member %s not healthy after %v: %v\n%s", m.name, startTimeout, err, m.log.tail(4<<10))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// freePorts returns n distinct loopback ports that were free just now.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// syncBuf is a log buffer written by a process and read by the test.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

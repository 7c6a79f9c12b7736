// Package harness starts the real kaon binary for integration tests: built
// once per test binary, run on free ports in temp dirs, logs kept and
// printed when a test fails.
package harness

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/role/endpoints"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// RepoRoot is the repository root, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// Binary builds cmd/kaon once per test process and returns its path.
// The binary lives in one directory per checkout and build tags
// (os.TempDir()/kaon-bin-HASH), replaced by an atomic rename: each test
// package used to build into a directory of its own that nothing removed
// (719 of them, 46 GB, filled this machine's disk).
func Binary(t testing.TB) string {
	buildOnce.Do(func() {
		sum := sha256.Sum256([]byte(RepoRoot() + "\x00" + buildTags))
		dir := filepath.Join(os.TempDir(), "kaon-bin-"+hex.EncodeToString(sum[:6]))
		if buildErr = os.MkdirAll(dir, 0o755); buildErr != nil {
			return
		}
		_ = os.Chmod(dir, 0o755) // tests run the CLI as other users too
		tmp, err := os.CreateTemp(dir, "kaon-*.partial")
		if err != nil {
			buildErr = err
			return
		}
		tmp.Close()
		defer os.Remove(tmp.Name()) // gone after the rename; left only by a failed build
		args := []string{"build", "-o", tmp.Name()}
		if buildTags != "" {
			args = append(args, "-tags", buildTags)
		}
		cmd := exec.Command("go", append(args, "./cmd/kaon")...)
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		// Processes of other packages still running the previous binary
		// keep its inode; the name now points at this build.
		binPath = filepath.Join(dir, "kaon")
		buildErr = os.Rename(tmp.Name(), binPath)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Endpoints is DIR/endpoints.json, as the servers write it.
type Endpoints = endpoints.Endpoints

// ReadEndpoints reads dir/endpoints.json.
func ReadEndpoints(t testing.TB, dir string) Endpoints {
	t.Helper()
	ep, err := endpoints.Read(dir)
	if err != nil {
		t.Fatalf("endpoints.json in %s: %v", dir, err)
	}
	return ep
}

// Process is one running kaon process.
type Process struct {
	t    testing.TB
	Dir  string // data dir
	Args []string
	Cmd  *exec.Cmd
	Log  *bytes.Buffer
	EP   Endpoints
	mu   sync.Mutex
	done chan struct{}
}

type syncBuf struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (s syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// Logs returns what the process printed so far.
func (p *Process) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.Log.String()
}

// Start runs `kaon args...` whose data dir is dir and waits until it writes
// dir/endpoints.json. The process is killed when the test ends.
func Start(t testing.TB, dir string, args ...string) *Process {
	t.Helper()
	p := &Process{t: t, Dir: dir, Args: args, Log: &bytes.Buffer{}}
	p.start()
	t.Cleanup(func() {
		start := time.Now()
		p.Stop()
		if d := time.Since(start); d > 2*time.Second {
			t.Logf("kaon %v took %v to stop", args, d)
		}
		if t.Failed() {
			t.Logf("kaon %v log:\n%s", args, p.Logs())
		}
	})
	return p
}

func (p *Process) start() {
	p.t.Helper()
	_ = endpoints.Remove(p.Dir)
	cmd := exec.Command(Binary(p.t), p.Args...)
	w := syncBuf{&p.mu, p.Log}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.Cmd = cmd
	p.done = make(chan struct{})
	go func() { cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if ep, err := endpoints.Read(p.Dir); err == nil && ep.PID == cmd.Process.Pid {
			p.EP = ep
			return
		}
		select {
		case <-p.done:
			p.t.Fatalf("kaon %v exited before serving:\n%s", p.Args, p.Logs())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("kaon %v did not write endpoints.json within 60s:\n%s", p.Args, p.Logs())
		}
	}
}

// Stop terminates the process gracefully (SIGTERM, then SIGKILL).
func (p *Process) Stop() {
	if p.Cmd == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
	}
}

// Kill9 kills the process with SIGKILL and waits for it.
func (p *Process) Kill9() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Restart starts the process again with the same arguments.
func (p *Process) Restart() {
	p.t.Helper()
	p.Stop()
	p.start()
}

// Up starts an all-in-one `kaon up` on free ports in a temp dir.
func Up(t testing.TB, extra ...string) *Process {
	dir := t.TempDir()
	args := append([]string{"up", "--data", dir, "--http", "127.0.0.1:0", "--xrootd", "127.0.0.1:0"}, extra...)
	return Start(t, dir, args...)
}

// Kaon runs a CLI command against p and returns stdout, stderr and the
// exit code.
func (p *Process) Kaon(args ...string) (string, string, int) {
	return KaonAt(p.t, p.EP.HTTP, args...)
}

// KaonAt runs a CLI command against the namespace server at url and
// returns stdout, stderr and the exit code.
func KaonAt(t testing.TB, url string, args ...string) (string, string, int) {
	cmd := exec.Command(Binary(t), args...)
	cmd.Env = append(os.Environ(), "KAON_URL="+url)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// MustKaon runs a CLI command that must succeed and returns stdout.
func (p *Process) MustKaon(args ...string) string {
	p.t.Helper()
	out, errs, code := p.Kaon(args...)
	if code != 0 {
		p.t.Fatalf("kaon %v: exit %d: %s", args, code, errs)
	}
	return out
}

// WaitFor polls cond every 200 ms until it holds; past d the test fails
// naming the step that did not happen.
func WaitFor(t testing.TB, d time.Duration, step string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within %v", step, d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// FreePort returns a loopback TCP port nobody listened on a moment ago.
func FreePort(t testing.TB) int { return FreePorts(t, 1)[0] }

// FreePorts returns n distinct loopback ports that were free just now
// (all held open until every one is chosen: ports taken one at a time
// can come back twice).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

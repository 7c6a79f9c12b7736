// Package ops tests the operator's verbs against the real binary with
// real clients: access rules (ban, rate limits) over HTTP and root://,
// who, node ls, ns stat, config save/load, debug.
package ops

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// nobody is the credential of another local user (uid/gid 65534).
var nobody = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}

// needRoot fails a test that acts as another local user without root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatal("this test needs root to act as another user")
	}
}

// asNobody runs a command as uid/gid 65534 and returns its output.
func asNobody(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr, cmd.Dir = nobody, "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// curlCode is the status real curl (as nobody) gets for u, with the body.
func curlCode(t *testing.T, u string) (string, string) {
	t.Helper()
	out, _ := asNobody(t, "curl", "-sS", "-L", "-w", "\n%{http_code}", u)
	i := strings.LastIndexByte(out, '\n')
	if i < 0 {
		t.Fatalf("curl %s: %s", u, out)
	}
	return out[i+1:], out[:i]
}

// xrdSession is an interactive xrdfs of user nobody: one root://
// connection whose commands are sent one at a time.
type xrdSession struct {
	t     *testing.T
	cmd   *exec.Cmd
	in    io.WriteCloser
	mu    sync.Mutex
	out   bytes.Buffer
	asked int
}

type lockedWriter struct{ s *xrdSession }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.out.Write(p)
}

// openXrdfs starts xrdfs on host:port as nobody, with env added.
func openXrdfs(t *testing.T, hostport string, env ...string) *xrdSession {
	t.Helper()
	s := &xrdSession{t: t, cmd: exec.Command("xrdfs", hostport)}
	s.cmd.SysProcAttr, s.cmd.Dir = nobody, "/"
	s.cmd.Env = append(os.Environ(), env...)
	s.cmd.Stdout, s.cmd.Stderr = lockedWriter{s}, lockedWriter{s}
	var err error
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.in.Close()
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-done
		}
	})
	return s
}

// run sends one command and returns what xrdfs printed for it: the
// output up to its next prompt (each command's output ends with one).
func (s *xrdSession) run(line string) string {
	s.t.Helper()
	s.mu.Lock()
	from := s.out.Len()
	s.mu.Unlock()
	if _, err := io.WriteString(s.in, line+"\n"); err != nil {
		s.t.Fatalf("xrdfs %q: %v", line, err)
	}
	s.asked++
	deadline := time.Now().Add(60 * time.Second)
	for {
		s.mu.Lock()
		all := s.out.String()
		s.mu.Unlock()
		// xrdfs echoes the prompt and command, then the answer, then the
		// next command's prompt; the answer is complete once the prompt
		// count passed the commands sent.
		if strings.Count(all, "] / > ") > s.asked {
			return all[from:]
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("xrdfs %q: no answer within 60 s; output so far:\n%s", line, all)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bearerGet sends GET u with token tok on client c and returns the status
// and body.
func bearerGet(t *testing.T, c *http.Client, u, tok string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// up starts kaon up taking the instance's own bearer tokens besides unix
// peers, with /pub (1777) holding /pub/f; it returns the instance and a
// token of user 4242 (subject "4242") reading everything.
func up(t *testing.T) (*harness.Process, string) {
	t.Helper()
	k := harness.Up(t, "--auth", "unix,token")
	k.MustKaon("mkdir", "/pub")
	k.MustKaon("chmod", "1777", "/pub")
	f := t.TempDir() + "/f"
	os.WriteFile(f, []byte("hello\n"), 0o644)
	if out, err := exec.Command("curl", "-sSf", "-L", "-T", f, k.EP.HTTP+"/pub/f").CombinedOutput(); err != nil {
		t.Fatalf("upload /pub/f: %v %s", err, out)
	}
	tok := strings.TrimSpace(k.MustKaon("token", "issue", "--path", "/", "--scope", "storage.read", "--user", "4242", "--ttl", "1h"))
	return k, tok
}

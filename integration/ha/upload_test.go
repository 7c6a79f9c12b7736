package ha

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// An upload streaming to the storage server when its namespace server
// dies (kill -9) is aborted by the server that takes over. Its client is
// told so, as something to retry: curl gets 503 with Retry-After and a
// message naming the file and the failover (not 404 "commit commit fid
// N: no pending upload", which reads as "no such path"), xrdcp an error
// saying the same. Nothing of it is visible, and sent again it succeeds.
func TestUploadAbortedByFailover(t *testing.T) {
	in := newInstance(t, 2)
	in.waitActive(0, "server 0 is active")
	if _, e, code := in.kaon(in.http[0], "mkdir", "/up"); code != 0 {
		t.Fatal(e)
	}
	local, data := randomFile(t, 24<<20)
	headers := filepath.Join(t.TempDir(), "headers")
	curlDone := make(chan curlResult, 1)
	go func() {
		curlDone <- curl("-L", "-T", local, "--limit-rate", "2M", "-D", headers, in.http[0]+"/up/curl.bin")
	}()
	in.eventually("curl's upload streams to the storage server", 60*time.Second, func() error {
		if n := in.stripes(); n == 0 {
			return fmt.Errorf("no stripe file yet")
		}
		return nil
	})
	type xrdResult struct {
		out []byte
		err error
	}
	xrdDone := make(chan xrdResult, 1)
	go func() {
		out, err := exec.Command("xrdcp", "-f", "--xrate", "2M", local, "root://"+in.xrd[0]+"//up/xrdcp.bin").CombinedOutput()
		xrdDone <- xrdResult{out, err}
	}()
	in.eventually("xrdcp's upload streams to the storage server", 60*time.Second, func() error {
		if n := in.stripes(); n < 2 {
			return fmt.Errorf("%d stripe files, want curl's and xrdcp's", n)
		}
		return nil
	})
	in.mgms[0].Kill9()
	in.down[0] = true

	var cr curlResult
	select {
	case cr = <-curlDone:
	case <-time.After(120 * time.Second):
		t.Fatal("curl's upload did not end within 120s of the kill")
	}
	hdr, _ := os.ReadFile(headers)
	last := string(hdr[strings.LastIndex(string(hdr), "HTTP/"):]) // the storage server's answer (after the 307)
	t.Logf("curl: %d %s", cr.code, strings.TrimSpace(string(cr.body)))
	if cr.code != 503 || !regexp.MustCompile(`(?mi)^Retry-After: \d+`).MatchString(last) {
		t.Fatalf("curl's upload aborted by the failover: %d, want 503 with Retry-After:\n%s%s", cr.code, last, cr.body)
	}
	for _, want := range []string{"/up/curl.bin", "failover", "again"} {
		if !strings.Contains(string(cr.body), want) {
			t.Fatalf("curl's error does not say %q: %s", want, cr.body)
		}
	}
	if strings.Contains(string(cr.body), "commit commit") {
		t.Fatalf("curl's error doubles a word: %s", cr.body)
	}
	var xr xrdResult
	select {
	case xr = <-xrdDone:
	case <-time.After(120 * time.Second):
		t.Fatal("xrdcp's upload did not end within 120s of the kill")
	}
	t.Logf("xrdcp: %v %s", xr.err, strings.TrimSpace(string(xr.out)))
	if xr.err == nil || !strings.Contains(string(xr.out), "failover") || !strings.Contains(string(xr.out), "/up/xrdcp.bin") ||
		strings.Contains(string(xr.out), "[3011]") {
		t.Fatalf("xrdcp's upload aborted by the failover: %v, want an error naming the file and the failover (not kXR_NotFound):\n%s", xr.err, xr.out)
	}

	in.waitActive(1, "server 1 takes over")
	for _, p := range []string{"/up/curl.bin", "/up/xrdcp.bin"} {
		if o, _, code := in.kaon(in.http[1], "stat", p); code == 0 {
			t.Fatalf("%s failed for its client but is visible: %s", p, o)
		}
	}
	in.putRetry(in.http[1], local, "/up/curl.bin", "curl's upload sent again")
	in.checkFile(in.http[1], "/up/curl.bin", data)
}

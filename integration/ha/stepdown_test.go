package ha

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// `kaon ns step-down` while curl and xrdcp upload (throttled, so they
// stream long after the step-down returned): the server that steps down
// hands its uploads in flight over, the storage server commits them on the
// new active server, and both files read back whole with their adler32.
func TestStepDownDuringUploads(t *testing.T) {
	in := newInstance(t, 2)
	in.waitActive(0, "server 0 is active")
	if _, e, code := in.kaon(in.http[0], "mkdir", "/inflight"); code != 0 {
		t.Fatal(e)
	}
	bigLocal, big := randomFile(t, 200<<20)
	smallLocal, small := randomFile(t, 48<<20)

	curlDone := make(chan curlResult, 1)
	go func() {
		curlDone <- curl("-L", "-T", bigLocal, "--limit-rate", "16M", in.http[0]+"/inflight/curl.bin")
	}()
	in.eventually("curl's upload streams to the storage server", 60*time.Second, func() error {
		if n := in.stripes(); n == 0 {
			return fmt.Errorf("no stripe file yet")
		}
		return nil
	})
	before := in.stripes()
	type xrdResult struct {
		out []byte
		err error
	}
	xrdDone := make(chan xrdResult, 1)
	go func() {
		out, err := exec.Command("xrdcp", "-f", "--xrate", "4M", "--cksum", "adler32", smallLocal, "root://"+in.xrd[0]+"//inflight/xrdcp.bin").CombinedOutput()
		xrdDone <- xrdResult{out, err}
	}()
	in.eventually("xrdcp's upload streams to the storage server", 60*time.Second, func() error {
		if n := in.stripes(); n <= before {
			return fmt.Errorf("%d stripe files, as before xrdcp started", n)
		}
		return nil
	})

	if o, e, code := in.kaon(in.http[0], "ns", "step-down"); code != 0 {
		t.Fatalf("kaon ns step-down: %s %s", o, e)
	}
	select {
	case r := <-curlDone:
		t.Fatalf("curl's upload ended before the step-down returned (%d): it did not span the step-down", r.code)
	case r := <-xrdDone:
		t.Fatalf("xrdcp's upload ended before the step-down returned (%v): it did not span the step-down", r.err)
	default:
	}
	b := in.waitActiveOther(0, "server 1 is active after the step-down")

	var cr curlResult
	select {
	case cr = <-curlDone:
	case <-time.After(120 * time.Second):
		t.Fatal("curl's upload did not end within 120s of the step-down")
	}
	if cr.code != 201 || cr.exit != 0 {
		t.Fatalf("curl's upload across the step-down: %d exit %d: %s %s", cr.code, cr.exit, cr.body, cr.stderr)
	}
	var xr xrdResult
	select {
	case xr = <-xrdDone:
	case <-time.After(120 * time.Second):
		t.Fatal("xrdcp's upload did not end within 120s of the step-down")
	}
	if xr.err != nil {
		t.Fatalf("xrdcp's upload across the step-down: %v\n%s", xr.err, xr.out)
	}
	if !regexp.MustCompile(`kept the uploads in flight the previous active server handed over.*count=2 claimed=2`).MatchString(in.mgms[b].Logs()) {
		t.Fatal("the new active server did not keep the 2 uploads in flight the old one handed over")
	}
	in.checkFile(in.http[b], "/inflight/curl.bin", big)
	in.checkFile(in.http[b], "/inflight/xrdcp.bin", small)
	out, _, code := in.kaon(in.http[b], "ls", "/inflight")
	if code != 0 || strings.Fields(out)[0] != "curl.bin" || len(strings.Fields(out)) != 2 {
		t.Fatalf("kaon ls /inflight: want curl.bin and xrdcp.bin:\n%s", out)
	}
}

// `kaon ns step-down` names the server that took over, never the one that
// just stepped down: asked at the active server five times in a row, it
// prints the server every server names active afterwards.
func TestStepDownNamesTheSuccessor(t *testing.T) {
	in := newInstance(t, 2)
	a := in.waitActive(0, "server 0 is active")
	for round := 0; round < 5; round++ {
		out, e, code := in.kaon(in.http[a], "ns", "step-down", "--url", in.http[a])
		if code != 0 {
			t.Fatalf("round %d: kaon ns step-down: %s %s", round, out, e)
		}
		b := in.waitActiveOther(a, "another server is active after the step-down")
		if want := "active now: " + in.http[b]; !strings.Contains(out, want) {
			t.Fatalf("round %d: server %d stepped down, server %d took over; kaon ns step-down printed:\n%s", round, a, b, out)
		}
		a = b
	}
}

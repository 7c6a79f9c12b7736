package core

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/integration/harness"
)

// TestQuotaKilledUploadReleases: an upload whose client dies midway (curl
// over HTTP announcing Content-Length, Python XRootD over root://
// announcing oss.asize) gives its booking back: while it runs its size is
// booked and another upload that would exceed the quota with it is
// refused; once the client is killed the same upload fits, and the killed
// upload left no file.
func TestQuotaKilledUploadReleases(t *testing.T) {
	k := harness.Up(t)
	big, _ := randomFile(t, 900<<10)
	k.MustKaon("mkdir", "/qk")
	k.MustKaon("quota", "set", "--path", "/qk", "-p", "--bytes", "1M")
	until := func(step string, f func() bool) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for !f() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 90 s", step)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, c := range []struct {
		proto string
		cmd   *exec.Cmd
	}{
		{"http", exec.Command("curl", "-sS", "-L", "--limit-rate", "20K", "-T", big, k.EP.HTTP+"/qk/killed-http")},
		// Announce the size (as xrdcp does), write a little, die without close.
		{"root", exec.Command("/usr/bin/python3", "-c", `
import os, sys, time
from XRootD import client
from XRootD.client.flags import OpenFlags
f = client.File()
st, _ = f.open(sys.argv[1] + "//qk/killed-root?oss.asize=921600", OpenFlags.NEW)
if not st.ok:
    print(st.message, file=sys.stderr); sys.exit(1)
f.write(b"x" * 4096, 0)
print("open", flush=True)
time.sleep(600)
`, k.EP.XRootD)},
	} {
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { c.cmd.Wait(); close(exited) }()
		target := "/qk/after-" + c.proto
		until(c.proto+": the upload to be killed books its announced size", func() bool {
			select {
			case <-exited:
				t.Fatalf("%s: the slow upload ended before it was killed", c.proto)
			default:
			}
			row := quotaRow(t, k, "/qk", "project")
			return strings.Join(row[len(row)-2:], " ") == "900.00 KiB"
		})
		if r := put(t, k, big, target); r.code != 507 {
			t.Fatalf("%s: a 900K upload beside a 900K upload in progress under a 1M quota: HTTP %d", c.proto, r.code)
		}
		c.cmd.Process.Kill()
		<-exited
		until(c.proto+": the killed upload's booking is released (900K upload fits)", func() bool {
			r := put(t, k, big, target)
			if r.code != 201 && r.code != 507 {
				t.Fatalf("%s: upload after the kill: HTTP %d %s", c.proto, r.code, r.body)
			}
			return r.code == 201
		})
		if _, _, code := k.Kaon("stat", "/qk/killed-"+c.proto); code == 0 {
			t.Fatalf("%s: the killed upload left a file", c.proto)
		}
		k.MustKaon("rm", target)
	}
}

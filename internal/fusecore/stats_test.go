package fusecore

import (
	"encoding/json"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

func TestStatsCountsErrorsPercentiles(t *testing.T) {
	s := NewStats()
	op := s.Op("lookup")
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 250; i++ {
				var e syscall.Errno
				if i%50 == 0 {
					e = syscall.ENOENT
				}
				op.Done(time.Now().Add(-time.Duration(i)*time.Microsecond), &e)
			}
		}()
	}
	wg.Wait()
	s.BytesIn.Add(10)
	snap := s.Snapshot()
	l := snap.Ops["lookup"]
	if l.Count != 1000 || l.Errors != 20 {
		t.Fatalf("count %d errors %d", l.Count, l.Errors)
	}
	// Latencies are spread uniformly over 0..249 µs.
	if l.P50Us < 100 || l.P50Us > 160 || l.P99Us < 230 || l.P99Us > 300 || l.P50Us > l.P99Us {
		t.Errorf("percentiles p50 %.1f p99 %.1f", l.P50Us, l.P99Us)
	}
	if _, ok := snap.Ops["never"]; ok {
		t.Errorf("unused op listed")
	}
	var doc map[string]any
	if err := json.Unmarshal(s.JSON(map[string]any{"passthrough": true}), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["bytes_in"].(float64) != 10 || doc["extra"].(map[string]any)["passthrough"] != true {
		t.Errorf("json: %v", doc)
	}
}

func TestStatsRates(t *testing.T) {
	o := &OpStats{}
	now := time.Now().Unix()
	// Fill the ring by hand: 5 calls in each of the last 10 seconds.
	for sec := now - 10; sec < now; sec++ {
		s := &o.ring[sec%ringSlots]
		s.sec.Store(sec)
		s.n.Store(5)
	}
	if r := o.rate(now, 1); r != 5 {
		t.Errorf("rate 1s = %v", r)
	}
	if r := o.rate(now, 10); r != 5 {
		t.Errorf("rate 10s = %v", r)
	}
	if r := o.rate(now, 60); r < 0.83 || r > 0.84 {
		t.Errorf("rate 60s = %v, want 50/60", r)
	}
	// Stale slots from a previous lap are ignored.
	o.ring[(now-1)%ringSlots].sec.Store(now - 1 - ringSlots)
	if r := o.rate(now, 1); r != 0 {
		t.Errorf("stale slot counted: %v", r)
	}
}

func TestParseGroups(t *testing.T) {
	st := []byte("Name:\tsh\nUid:\t1000\t1000\t1000\t1000\nGroups:\t1000 27 2000 \nNgid:\t0\n")
	g := parseGroups(st, 1000)
	if len(g) != 3 || g[0] != 1000 || g[1] != 27 || g[2] != 2000 {
		t.Errorf("groups %v", g)
	}
	if g := parseGroups([]byte("Groups:\t\n"), 5); len(g) != 1 || g[0] != 5 {
		t.Errorf("empty groups -> %v", g)
	}
}

// TestEnterSwitchesThreadCredentials: with root, Enter makes files
// created on this thread belong to the caller, and Leave restores root.
func TestEnterSwitchesThreadCredentials(t *testing.T) {
	if !isRoot {
		t.Skip("needs root")
	}
	dir, err := os.MkdirTemp("", "fusecore-cred")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	c := &fuse.Caller{Owner: fuse.Owner{Uid: 1234, Gid: 4321}}
	cr := Enter(c)
	fd, err := syscall.Open(dir+"/f", syscall.O_CREAT|syscall.O_WRONLY, 0o644)
	cr.Leave()
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
	var st syscall.Stat_t
	syscall.Stat(dir+"/f", &st)
	if st.Uid != 1234 || st.Gid != 4321 {
		t.Errorf("owner %d:%d", st.Uid, st.Gid)
	}
	// Back to root: may create in a 0700 root-owned dir.
	os.Chmod(dir, 0o700)
	if fd, err := syscall.Open(dir+"/g", syscall.O_CREAT|syscall.O_WRONLY, 0o644); err != nil {
		t.Errorf("after Leave: %v", err)
	} else {
		syscall.Close(fd)
	}
	// As the caller the 0700 dir is closed.
	cr = Enter(c)
	_, err = syscall.Open(dir+"/h", syscall.O_CREAT|syscall.O_WRONLY, 0o644)
	cr.Leave()
	if err != syscall.EACCES {
		t.Errorf("as caller in 0700 root dir: %v, want EACCES", err)
	}
}

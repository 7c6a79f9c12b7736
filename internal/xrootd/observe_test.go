package xrootd_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/xrootd"
	"github.com/kaon-storage/kaon/internal/xrootd/xrdtest"
)

// observed records what Config.Observe is told.
type observed struct {
	mu  sync.Mutex
	got map[string]int // "request code"
	neg bool           // a negative duration was seen
}

func (o *observed) observe(req, code string, took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.got == nil {
		o.got = map[string]int{}
	}
	o.got[req+" "+code]++
	if took < 0 {
		o.neg = true
	}
}

func (o *observed) count(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.got[key]
}

// TestObserveNamesRequestsAndAnswers: every request answered is
// observed once, by kind and by how it was answered (ok, the kXR_* error,
// a redirect); an answer in several kXR_oksofar frames is one request.
func TestObserveNamesRequestsAndAnswers(t *testing.T) {
	var o observed
	c, err := xrdtest.Start(t.TempDir(), xrootd.Config{Observe: o.observe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := os.WriteFile(filepath.Join(c.Root, "f"), make([]byte, 20<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	m := dialWire(t, c.MgrAddr, true)
	defer m.c.Close()
	if r := m.call(3017, [16]byte{}, []byte("/f")); r.status != 0 { // stat
		t.Fatalf("stat /f: %d %q", r.status, r.body)
	}
	if r := m.call(3017, [16]byte{}, []byte("/nothing")); r.errCode() != 3011 {
		t.Fatalf("stat /nothing: %d %q", r.status, r.body)
	}
	var p [16]byte
	binary.BigEndian.PutUint16(p[2:], 0x0010) // open_read
	if r := m.call(3010, p, []byte("/f")); r.status != 4004 {
		t.Fatalf("open at the manager: %d %q", r.status, r.body)
	}
	d, fh := openDataOpts(t, c, "/f", 0x0010)
	defer d.c.Close()
	var rp [16]byte
	copy(rp[0:4], fh[:])
	binary.BigEndian.PutUint32(rp[12:], 20<<20) // read all: several kXR_oksofar frames, then kXR_ok
	if r := d.call(3013, rp, nil); r.status != 0 || len(r.body) != 20<<20 {
		t.Fatalf("read: %d, %d bytes", r.status, len(r.body))
	}
	for key, want := range map[string]int{"login ok": 3, "stat ok": 1, "stat kXR_NotFound": 1, "open kXR_redirect": 2,
		"open ok": 1, "read ok": 1} {
		if got := o.count(key); got != want {
			t.Errorf("observed %q %d times, want %d (all: %v)", key, got, want, o.got)
		}
	}
	if o.neg {
		t.Error("a negative duration was observed")
	}
}

package xrootd

import (
	"bytes"
	"errors"
	"net"
	"testing"
)

// recConn records the writes that reach the TCP side.
type recConn struct {
	net.Conn
	writes [][]byte
	err    error
}

func (r *recConn) Write(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	r.writes = append(r.writes, append([]byte(nil), p...))
	return len(p), nil
}

// The records of a large frame reach the connection in writes of at most
// tlsBatch bytes, in order; outside a frame every record goes out at once
// (handshake and alert records are never held back).
func TestTLSWireBatchesRecordsOfAFrame(t *testing.T) {
	rc := &recConn{}
	w := newTLSWire(rc)
	if _, err := w.Write([]byte("handshake")); err != nil || len(rc.writes) != 1 {
		t.Fatalf("write outside a frame: err %v, %d writes reached the connection, want 1", err, len(rc.writes))
	}
	rc.writes = nil
	var want []byte
	w.batch()
	for i := 0; i < 40; i++ {
		rec := bytes.Repeat([]byte{byte(i)}, tlsRecord+22) // a sealed record
		want = append(want, rec...)
		if _, err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	// 15 records fit in 256 KiB: 15 + 15 + 10.
	if len(rc.writes) != 3 {
		t.Fatalf("40 records of a frame took %d writes, want 3", len(rc.writes))
	}
	for _, b := range rc.writes {
		if len(b) > tlsBatch {
			t.Fatalf("a write of %d bytes, more than tlsBatch", len(b))
		}
	}
	if got := bytes.Join(rc.writes, nil); !bytes.Equal(got, want) {
		t.Fatalf("records reached the connection altered or out of order (%d bytes, want %d)", len(got), len(want))
	}
	rc.writes = nil
	if _, err := w.Write([]byte("alert")); err != nil || len(rc.writes) != 1 {
		t.Fatalf("write after the frame: err %v, %d writes reached the connection, want 1", err, len(rc.writes))
	}
}

// A failed gathered write is reported by flush and by every later write.
func TestTLSWireErrorSticks(t *testing.T) {
	boom := errors.New("connection reset")
	rc := &recConn{}
	w := newTLSWire(rc)
	w.batch()
	if _, err := w.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	rc.err = boom
	if err := w.flush(); !errors.Is(err, boom) {
		t.Fatalf("flush: %v, want %v", err, boom)
	}
	rc.err = nil
	if _, err := w.Write([]byte("x")); !errors.Is(err, boom) {
		t.Fatalf("write after a failed flush: %v, want %v", err, boom)
	}
}

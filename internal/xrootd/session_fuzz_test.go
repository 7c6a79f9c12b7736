package xrootd_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

func fuzzFrame(req uint16, params []byte, body []byte) []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint16(b[2:], req)
	copy(b[4:20], params)
	binary.BigEndian.PutUint32(b[20:], uint32(len(body)))
	return append(b, body...)
}

// FuzzSession sends a handshake followed by arbitrary bytes to a live
// manager and data listener. The server must answer or hang up, never
// crash or wedge, and must keep serving other clients.
func FuzzSession(f *testing.F) {
	login := fuzzFrame(3007, []byte{0, 0, 0, 1, 'f', 'u', 'z', 'z'}, nil)
	fh := []byte{0, 0, 0, 1}
	f.Add(login)
	f.Add(append(login, fuzzFrame(3017, nil, []byte("/"))...))
	f.Add(append(login, fuzzFrame(3010, []byte{1, 0xa4, 0, 0x22}, []byte("/f?kaon.cap=x"))...))
	f.Add(append(login, fuzzFrame(3004, []byte{15: 2}, []byte("/"))...))
	f.Add(append(login, fuzzFrame(3013, append(fh, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0), nil)...))
	f.Add(append(login, fuzzFrame(3025, nil, bytes.Repeat(append(fh, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0), 3))...))
	f.Add(append(login, fuzzFrame(3001, []byte{0, 7}, []byte("readv_iov_max"))...))
	f.Add(append(login, fuzzFrame(3024, bytes.Repeat([]byte{1}, 16), nil)...))
	f.Add(append(login, 0, 1, 0x0b, 0xc3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0))

	c, err := startFuzzCluster(f)
	if err != nil {
		f.Fatal(err)
	}
	hs := make([]byte, 20)
	binary.BigEndian.PutUint32(hs[12:], 4)
	binary.BigEndian.PutUint32(hs[16:], 2012)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, addr := range []string{c.MgrAddr, c.DataAddr} {
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			nc.Write(append(append([]byte{}, hs...), data...))
			nc.(*net.TCPConn).CloseWrite()
			if _, err := io.Copy(io.Discard, nc); err != nil {
				t.Fatalf("server did not finish the connection: %v", err)
			}
			nc.Close()
		}
		w := dialWire(t, c.MgrAddr, true)
		defer w.c.Close()
		id := w.sendReq(3011, [16]byte{}, nil, 0)
		if r, err := w.tryRecv(); err != nil || r.sid != id || r.status != 0 {
			t.Fatalf("server unhealthy after input: %v %+v", err, r)
		}
	})
}

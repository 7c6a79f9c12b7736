package xrootd_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// answer collects the frames of the answer to stream id, failing with step
// if it does not come within 30 seconds.
func answer(t *testing.T, d *wire, id uint16, step string) []resp {
	t.Helper()
	d.c.SetDeadline(time.Now().Add(30 * time.Second))
	var frames []resp
	for {
		r, err := d.tryRecv()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if r.sid != id {
			t.Fatalf("%s: answer for stream %d, want %d", step, r.sid, id)
		}
		frames = append(frames, r)
		if r.status != 4000 { // kXR_oksofar
			return frames
		}
	}
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>12)
	}
	return b
}

// Over roots://, large kXR_write bodies are streamed to the file as they
// are decrypted (an unknown handle's body is drained, the connection stays
// in sync), small ones take the usual path, and the file holds exactly
// what was sent.
func TestTLSWritePath(t *testing.T) {
	c, m := startClusterTLS(t)
	d, fh := openDataScheme(t, c, m, "roots", "/tw.bin", nil)
	data := pattern(3<<20 + 5)
	write := func(h [4]byte, off int, body []byte) resp {
		var p [16]byte
		copy(p[0:4], h[:])
		binary.BigEndian.PutUint64(p[4:], uint64(off))
		id := d.sendReq(3019, p, body, int32(len(body)))
		return answer(t, d, id, "kXR_write of "+strconv.Itoa(len(body))+" bytes")[0]
	}
	if r := write(fh, 0, data); r.status != 0 {
		t.Fatalf("streamed write over TLS: %d %q", r.status, r.body)
	}
	if r := write([4]byte{7, 7, 7, 7}, 0, data[:1<<20]); r.errCode() != 3004 {
		t.Fatalf("streamed write on an unknown handle: %d %q, want kXR_FileNotOpen", r.status, r.body)
	}
	tail := []byte("after the drained body")
	if r := write(fh, len(data), tail); r.status != 0 {
		t.Fatalf("small write after the drained body: %d %q", r.status, r.body)
	}
	var p [16]byte
	copy(p[0:4], fh[:])
	if r := answer(t, d, d.sendReq(3003, p, nil, 0), "kXR_close"); r[0].status != 0 {
		t.Fatalf("close: %+v", r[0])
	}
	got, err := os.ReadFile(filepath.Join(c.Root, "tw.bin"))
	if want := append(data, tail...); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("file written over TLS differs (err %v, %d bytes, want %d)", err, len(got), len(want))
	}
}

// Over roots://, a kXR_read answer comes in pieces of at most 256 KiB
// (kXR_oksofar, then kXR_ok) that add up to the file; kXR_pgread's pages
// arrive with valid CRCs.
func TestTLSReadPath(t *testing.T) {
	c, m := startClusterTLS(t)
	data := pattern(3<<20 + 777)
	d, fh := openDataScheme(t, c, m, "roots", "/tr.bin", data)
	var p [16]byte
	copy(p[0:4], fh[:])
	binary.BigEndian.PutUint32(p[12:], uint32(len(data)+100)) // past the end: a short read
	frames := answer(t, d, d.sendReq(3013, p, nil, 0), "kXR_read")
	var got []byte
	for i, f := range frames {
		if len(f.body) > 256<<10 {
			t.Fatalf("read answer piece %d carries %d bytes, want at most 256 KiB over TLS", i, len(f.body))
		}
		got = append(got, f.body...)
	}
	if frames[len(frames)-1].status != 0 || !bytes.Equal(got, data) {
		t.Fatalf("read over TLS: last status %d, %d bytes in %d pieces, want the file's %d bytes",
			frames[len(frames)-1].status, len(got), len(frames), len(data))
	}
	binary.BigEndian.PutUint64(p[4:], 1000) // not page aligned
	binary.BigEndian.PutUint32(p[12:], 2<<20)
	d.sendReq(3030, p, nil, 0)
	d.c.SetDeadline(time.Now().Add(30 * time.Second))
	if n := d.drain(make([]byte, 3<<20)); n != 2<<20 {
		t.Fatalf("pgread over TLS: %d data bytes, want %d", n, 2<<20)
	}
}

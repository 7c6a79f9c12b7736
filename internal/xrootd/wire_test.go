package xrootd_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/xrootd"
	"github.com/kaon-storage/kaon/internal/xrootd/xrdtest"
)

// wire is a minimal protocol client for tests that real clients cannot
// express (malformed frames, hostile lengths, unknown handles).
type wire struct {
	t    testing.TB
	c    net.Conn
	id   uint16
	sess [16]byte // the session id a login answered
}

type resp struct {
	sid    uint16
	status uint16
	body   []byte
}

func (r resp) errCode() uint32 {
	if r.status != 4003 || len(r.body) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(r.body)
}

func dialWire(t testing.TB, addr string, login bool) *wire {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	w := &wire{t: t, c: c}
	hs := make([]byte, 20)
	binary.BigEndian.PutUint32(hs[12:], 4)
	binary.BigEndian.PutUint32(hs[16:], 2012)
	w.raw(hs)
	r := w.recv()
	if r.status != 0 || len(r.body) != 8 {
		t.Fatalf("handshake answer %+v", r)
	}
	if login {
		var p [16]byte
		copy(p[4:], "tester")
		r := w.call(3007, p, nil)
		if r.status != 0 || len(r.body) != 16 {
			t.Fatalf("login answer %+v", r)
		}
		copy(w.sess[:], r.body)
	}
	return w
}

func (w *wire) raw(b []byte) {
	w.t.Helper()
	if _, err := w.c.Write(b); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wire) sendReq(req uint16, params [16]byte, body []byte, dlen int32) uint16 {
	w.id++
	h := make([]byte, 24, 24+len(body))
	binary.BigEndian.PutUint16(h[0:], w.id)
	binary.BigEndian.PutUint16(h[2:], req)
	copy(h[4:20], params[:])
	binary.BigEndian.PutUint32(h[20:], uint32(dlen))
	w.raw(append(h, body...))
	return w.id
}

func (w *wire) recv() resp {
	w.t.Helper()
	r, err := w.tryRecv()
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

func (w *wire) tryRecv() (resp, error) {
	h := make([]byte, 8)
	if _, err := io.ReadFull(w.c, h); err != nil {
		return resp{}, err
	}
	r := resp{sid: binary.BigEndian.Uint16(h), status: binary.BigEndian.Uint16(h[2:])}
	r.body = make([]byte, binary.BigEndian.Uint32(h[4:]))
	if _, err := io.ReadFull(w.c, r.body); err != nil {
		return resp{}, err
	}
	if r.status == 4007 && len(r.body) >= 16 { // kXR_status: bulk follows
		bulk := make([]byte, binary.BigEndian.Uint32(r.body[12:16]))
		if _, err := io.ReadFull(w.c, bulk); err != nil {
			return resp{}, err
		}
		r.body = append(r.body, bulk...)
	}
	return r, nil
}

func (w *wire) call(req uint16, params [16]byte, body []byte) resp {
	w.t.Helper()
	id := w.sendReq(req, params, body, int32(len(body)))
	var out resp
	for {
		r := w.recv()
		if r.sid != id {
			w.t.Fatalf("answer for stream %d, want %d", r.sid, id)
		}
		if r.status == 4000 { // oksofar
			out.body = append(out.body, r.body...)
			continue
		}
		r.body = append(out.body, r.body...)
		return r
	}
}

func startCluster(t *testing.T) *xrdtest.Cluster { return startClusterB(t) }

func startClusterB(t testing.TB) *xrdtest.Cluster {
	t.Helper()
	c, err := xrdtest.Start(t.TempDir(), xrootd.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// openData opens path for writing at the data listener, following the
// manager's redirect like a client would.
func openData(t *testing.T, c *xrdtest.Cluster, path string, opts uint16) (*wire, [4]byte) {
	return openDataOpts(t, c, path, opts)
}

// openDataB creates path with size bytes (read benchmarks) or opens it for
// writing (size 0).
func openDataB(b *testing.B, c *xrdtest.Cluster, path string, size int) (*wire, [4]byte) {
	if size == 0 {
		return openDataOpts(b, c, path, 0x0002|0x0020)
	}
	if err := os.WriteFile(filepath.Join(c.Root, path), make([]byte, size), 0o644); err != nil {
		b.Fatal(err)
	}
	return openDataOpts(b, c, path, 0x0010)
}

func openDataOpts(t testing.TB, c *xrdtest.Cluster, path string, opts uint16) (*wire, [4]byte) {
	t.Helper()
	m := dialWire(t, c.MgrAddr, true)
	defer m.c.Close()
	var p [16]byte
	binary.BigEndian.PutUint16(p[0:], 0o644)
	binary.BigEndian.PutUint16(p[2:], opts)
	r := m.call(3010, p, []byte(path))
	if r.status != 4004 {
		t.Fatalf("open at manager: status %d %q", r.status, r.body)
	}
	port := binary.BigEndian.Uint32(r.body)
	host, opaque, _ := strings.Cut(string(r.body[4:]), "?")
	if host != "127.0.0.1" || !strings.Contains(opaque, "kaon.cap=") || port == 0 {
		t.Fatalf("redirect %q port %d", r.body[4:], port)
	}
	d := dialWire(t, c.DataAddr, true)
	r = d.call(3010, p, []byte(path+"?"+opaque))
	if r.status != 0 || len(r.body) < 4 {
		t.Fatalf("open at data server: %d %q", r.status, r.body)
	}
	var fh [4]byte
	copy(fh[:], r.body)
	return d, fh
}

func TestOversizedFrameIsRefusedWithoutAllocating(t *testing.T) {
	c := startCluster(t)
	w := dialWire(t, c.DataAddr, true)
	w.sendReq(3017, [16]byte{}, nil, 0x7fffffff) // a stat claiming a 2 GiB path
	r := w.recv()
	if r.errCode() != 3002 { // kXR_ArgTooLong
		t.Fatalf("want kXR_ArgTooLong, got status %d %q", r.status, r.body)
	}
	if _, err := w.tryRecv(); err == nil {
		t.Fatal("connection should be closed after a hostile length")
	}
	// The server is still healthy.
	w2 := dialWire(t, c.MgrAddr, true)
	if r := w2.call(3011, [16]byte{}, nil); r.status != 0 {
		t.Fatalf("ping after attack: %+v", r)
	}
}

func TestNegativeLengthAndTruncatedFrame(t *testing.T) {
	c := startCluster(t)
	w := dialWire(t, c.MgrAddr, true)
	w.sendReq(3017, [16]byte{}, nil, -5)
	if r := w.recv(); r.errCode() != 3002 {
		t.Fatalf("negative dlen: %+v", r)
	}
	w = dialWire(t, c.MgrAddr, true)
	w.sendReq(3017, [16]byte{}, []byte("/ab"), 100) // body shorter than dlen, then close
	w.c.(*net.TCPConn).CloseWrite()
	if _, err := w.tryRecv(); err == nil {
		t.Fatal("truncated frame must not be answered")
	}
	// Garbage instead of a handshake.
	g, err := net.Dial("tcp", c.MgrAddr)
	if err != nil {
		t.Fatal(err)
	}
	g.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	g.SetDeadline(time.Now().Add(5 * time.Second))
	if n, _ := g.Read(make([]byte, 10)); n != 0 {
		t.Fatal("garbage handshake answered")
	}
	g.Close()
}

func TestUnknownHandleAndLoginRequired(t *testing.T) {
	c := startCluster(t)
	w := dialWire(t, c.DataAddr, false)
	if r := w.call(3017, [16]byte{}, []byte("/x")); r.errCode() != 3010 {
		t.Fatalf("stat before login: %+v", r)
	}
	w = dialWire(t, c.DataAddr, true)
	var p [16]byte
	copy(p[0:4], []byte{0, 0, 0x12, 0x34})
	for _, req := range []uint16{3013, 3019, 3003, 3016, 3030, 3026} { // read write close sync pgread pgwrite
		body := []byte(nil)
		if req == 3019 || req == 3026 {
			body = make([]byte, 8)
		}
		r := w.call(req, p, body)
		if r.errCode() != 3004 || !strings.Contains(string(r.body), "not open") {
			t.Fatalf("request %d on unknown handle: %d %q", req, r.status, r.body)
		}
	}
	// readv naming an unknown handle
	el := make([]byte, 16)
	copy(el, []byte{9, 9, 9, 9})
	binary.BigEndian.PutUint32(el[4:], 10)
	if r := w.call(3025, [16]byte{}, el); r.errCode() != 3004 {
		t.Fatalf("readv on unknown handle: %+v", r)
	}
	if r := w.call(3099, [16]byte{}, nil); r.errCode() != 3013 {
		t.Fatalf("unknown request: %+v", r)
	}
}

func TestPathConfinement(t *testing.T) {
	c := startCluster(t)
	w := dialWire(t, c.MgrAddr, true)
	cases := map[string]uint32{
		"/../etc/passwd":                 3000,
		"/a/%2e%2e/%2E%2e/etc":           3000,
		"/a/%252e%252e/etc":              3000,
		"/a/b%2fc":                       3000,
		"/a\x00b":                        3000,
		"relative/path":                  3000,
		"/" + strings.Repeat("n", 300):   3002,
		"/" + strings.Repeat("d/", 2100): 3002,
	}
	for p, want := range cases {
		if r := w.call(3017, [16]byte{}, []byte(p)); r.errCode() != want {
			t.Errorf("stat %q: got %d %q, want %d", p, r.errCode(), r.body, want)
		}
	}
	// Opaque data is not part of the name.
	if r := w.call(3008, [16]byte{}, []byte("/dir?oss.asize=10&x=y")); r.status != 0 {
		t.Fatalf("mkdir with opaque: %+v", r)
	}
	r := w.call(3017, [16]byte{}, []byte("/dir?ignored=1"))
	if r.status != 0 || !strings.Contains(string(r.body), " 51 ") && !strings.Contains(string(r.body), " 19 ") {
		t.Fatalf("stat /dir: %d %q", r.status, r.body)
	}
}

func TestPgwriteChecksumsAndPgread(t *testing.T) {
	c := startCluster(t)
	d, fh := openData(t, c, "/pg.bin", 0x0002|0x0020) // kXR_delete|kXR_open_updt
	data := make([]byte, 3*4096+100)
	for i := range data {
		data[i] = byte(i * 7)
	}
	tbl := crc32.MakeTable(crc32.Castagnoli)
	pages := func(off int64, b []byte, corrupt bool) []byte {
		var out []byte
		for len(b) > 0 {
			n := 4096 - int(off%4096)
			n = min(n, len(b))
			cs := crc32.Checksum(b[:n], tbl)
			if corrupt {
				cs++
			}
			out = binary.BigEndian.AppendUint32(out, cs)
			out = append(out, b[:n]...)
			b, off = b[n:], off+int64(n)
		}
		return out
	}
	var p [16]byte
	copy(p[0:4], fh[:])
	// unaligned second write to exercise the short first page
	binary.BigEndian.PutUint64(p[4:], 0)
	if r := d.call(3026, p, pages(0, data[:5000], false)); r.status != 4007 {
		t.Fatalf("pgwrite: %d %q", r.status, r.body)
	}
	binary.BigEndian.PutUint64(p[4:], 5000)
	if r := d.call(3026, p, pages(5000, data[5000:], true)); r.errCode() != 3019 {
		t.Fatalf("corrupt pgwrite: want kXR_ChkSumErr, got %d %q", r.status, r.body)
	}
	if r := d.call(3026, p, pages(5000, data[5000:], false)); r.status != 4007 {
		t.Fatalf("pgwrite 2: %d %q", r.status, r.body)
	}
	// pgread from an unaligned offset; verify every page CRC.
	var rp [16]byte
	copy(rp[0:4], fh[:])
	binary.BigEndian.PutUint64(rp[4:], 10)
	binary.BigEndian.PutUint32(rp[12:], uint32(len(data)))
	id := d.sendReq(3030, rp, nil, 0)
	var got []byte
	for {
		r := d.recv()
		if r.sid != id || r.status != 4007 {
			t.Fatalf("pgread answer %d %q", r.status, r.body)
		}
		body := r.body[24:]
		off := int64(binary.BigEndian.Uint64(r.body[16:24]))
		if off != 10+int64(len(got)) {
			t.Fatalf("pgread chunk offset %d, want %d", off, 10+len(got))
		}
		for len(body) > 0 {
			n := min(4096-int(off%4096), len(body)-4)
			if crc32.Checksum(body[4:4+n], tbl) != binary.BigEndian.Uint32(body) {
				t.Fatalf("bad page crc at %d", off)
			}
			got = append(got, body[4:4+n]...)
			body, off = body[4+n:], off+int64(n)
		}
		if r.body[7] == 0 { // final
			break
		}
	}
	if string(got) != string(data[10:]) {
		t.Fatalf("pgread returned %d bytes, mismatch", len(got))
	}
	// readv over the same handle
	el := make([]byte, 32)
	copy(el[0:4], fh[:])
	binary.BigEndian.PutUint32(el[4:], 8)
	binary.BigEndian.PutUint64(el[8:], 4090)
	copy(el[16:20], fh[:])
	binary.BigEndian.PutUint32(el[20:], 50)
	binary.BigEndian.PutUint64(el[24:], uint64(len(data)-20)) // short at EOF
	r := d.call(3025, [16]byte{}, el)
	if r.status != 0 || len(r.body) != 16+8+16+20 {
		t.Fatalf("readv: %d len %d", r.status, len(r.body))
	}
	if string(r.body[16:24]) != string(data[4090:4098]) || string(r.body[40:]) != string(data[len(data)-20:]) {
		t.Fatal("readv data mismatch")
	}
	if binary.BigEndian.Uint32(r.body[24+4:]) != 20 {
		t.Fatal("readv short element length not reported")
	}
	var cp [16]byte
	copy(cp[0:4], fh[:])
	if r := d.call(3003, cp, nil); r.status != 0 {
		t.Fatalf("close: %+v", r)
	}
	if n, _ := c.FS.Counts(); n != 1 {
		t.Fatalf("commits = %d", n)
	}
}

func TestDroppedUploadIsAborted(t *testing.T) {
	c := startCluster(t)
	d, fh := openData(t, c, "/partial.bin", 0x0002|0x0020)
	var p [16]byte
	copy(p[0:4], fh[:])
	if r := d.call(3019, p, []byte("some bytes")); r.status != 0 {
		t.Fatalf("write: %+v", r)
	}
	d.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, n := c.FS.Counts(); n == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if commits, aborts := c.FS.Counts(); aborts != 1 || commits != 0 {
		t.Fatalf("aborts=%d commits=%d", aborts, commits)
	}
	m := dialWire(t, c.MgrAddr, true)
	if r := m.call(3017, [16]byte{}, []byte("/partial.bin")); r.errCode() != 3011 {
		t.Fatalf("aborted upload visible: %+v", r)
	}
}

// A streamed kXR_write cut off on a bound connection after part of its
// body was written aborts the upload: the close the client may still send
// on its main connection must not commit the part.
func TestCutStreamedWriteOnBoundPathAborts(t *testing.T) {
	c := startCluster(t)
	d, fh := openData(t, c, "/cut.bin", 0x0002|0x0020)
	b := dialWire(t, c.DataAddr, false)
	r := b.call(3024, d.sess, nil) // kXR_bind
	if r.status != 0 || len(r.body) != 1 {
		t.Fatalf("bind: %+v", r)
	}
	var p [16]byte
	copy(p[0:4], fh[:])
	p[12] = r.body[0]                              // the write's path id
	const size = 20 << 20                          // above the frame limit: streamed
	b.sendReq(3019, p, make([]byte, 12<<20), size) // past the first 8 MiB piece
	b.c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for _, aborts := c.FS.Counts(); aborts == 0; _, aborts = c.FS.Counts() {
		if time.Now().After(deadline) {
			t.Fatal("the upload whose write was cut off was not aborted within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var cp [16]byte
	copy(cp[0:4], fh[:])
	if r := d.call(3003, cp, nil); r.status == 0 {
		t.Fatal("close after a cut write succeeded")
	}
	if commits, _ := c.FS.Counts(); commits != 0 {
		t.Fatalf("commits = %d after a cut write", commits)
	}
}

func TestDataListenerRedirectsNamespaceRequests(t *testing.T) {
	c := startCluster(t)
	w := dialWire(t, c.DataAddr, true)
	r := w.call(3017, [16]byte{}, []byte("/x?kaon.cap=abc"))
	if r.status != 4004 {
		t.Fatalf("stat at data listener: %+v", r)
	}
	if got := string(r.body[4:]); got != "127.0.0.1" {
		t.Fatalf("redirect host %q", got)
	}
	// An open without a capability goes to the manager, which mints one.
	var o [16]byte
	binary.BigEndian.PutUint16(o[2:], 0x0010)
	if r := w.call(3010, o, []byte("/x?oss.asize=1")); r.status != 4004 || !strings.HasSuffix(c.MgrAddr, fmt.Sprint(binary.BigEndian.Uint32(r.body))) {
		t.Fatalf("open without capability at data listener: %d %q", r.status, r.body)
	}
	// A forged capability is refused.
	var p [16]byte
	binary.BigEndian.PutUint16(p[2:], 0x0010)
	if r := w.call(3010, p, []byte("/x?kaon.mode=r&kaon.exp=99999999999&kaon.cap=00")); r.errCode() != 3010 {
		t.Fatalf("forged capability: %d %q", r.status, r.body)
	}
}

func startFuzzCluster(f *testing.F) (*xrdtest.Cluster, error) {
	c, err := xrdtest.Start(f.TempDir(), xrootd.Config{})
	if err == nil {
		f.Cleanup(c.Close)
	}
	return c, err
}

// Many pipelined writes and syncs on one handle (more than the inflight
// slots) are all answered, in the right streams, and land in order.
func TestPipelinedWritesAndSyncs(t *testing.T) {
	c := startCluster(t)
	d, fh := openData(t, c, "/pipe.bin", 0x0002|0x0020)
	const n = 300
	want := make([]byte, 0, n*100)
	ids := map[uint16]bool{}
	for i := 0; i < n; i++ {
		var p [16]byte
		copy(p[0:4], fh[:])
		if i%3 == 2 {
			ids[d.sendReq(3016, p, nil, 0)] = true // sync
			continue
		}
		chunk := bytes.Repeat([]byte{byte(i)}, 100)
		binary.BigEndian.PutUint64(p[4:], uint64(len(want)))
		want = append(want, chunk...)
		ids[d.sendReq(3019, p, chunk, int32(len(chunk)))] = true
	}
	for len(ids) > 0 {
		r := d.recv()
		if !ids[r.sid] || r.status != 0 {
			t.Fatalf("unexpected answer sid=%d status=%d %q", r.sid, r.status, r.body)
		}
		delete(ids, r.sid)
	}
	var cp [16]byte
	copy(cp[0:4], fh[:])
	if r := d.call(3003, cp, nil); r.status != 0 {
		t.Fatalf("close: %+v", r)
	}
	got, err := os.ReadFile(filepath.Join(c.Root, "pipe.bin"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("content after pipelined writes differs (err %v, %d bytes)", err, len(got))
	}
}

func TestServerCloseWithLiveSessions(t *testing.T) {
	c, err := xrdtest.Start(t.TempDir(), xrootd.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := openData(t, c, "/open.bin", 0x0002|0x0020)
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hung with a live session")
	}
	if _, err := d.tryRecv(); err == nil {
		t.Fatal("connection still open after Close")
	}
	if _, aborts := c.FS.Counts(); aborts != 1 {
		t.Fatalf("open upload not aborted on Close: %d", aborts)
	}
}

// A kXR_write larger than the frame limit (Python's File.write of a big
// buffer) is streamed to the file; on an unknown handle it is drained and
// refused without losing the connection.
func TestHugeWriteIsStreamed(t *testing.T) {
	c := startCluster(t)
	d, fh := openData(t, c, "/huge.bin", 0x0002|0x0020)
	data := make([]byte, 40<<20+123)
	for i := range data {
		data[i] = byte(i >> 12)
	}
	var p [16]byte
	copy(p[0:4], fh[:])
	if r := d.call(3019, p, data); r.status != 0 {
		t.Fatalf("huge write: %d %q", r.status, r.body)
	}
	var bad [16]byte
	copy(bad[0:4], []byte{7, 7, 7, 7})
	if r := d.call(3019, bad, data[:20<<20]); r.errCode() != 3004 {
		t.Fatalf("huge write on unknown handle: %d %q", r.status, r.body)
	}
	var cp [16]byte
	copy(cp[0:4], fh[:])
	if r := d.call(3003, cp, nil); r.status != 0 {
		t.Fatalf("close: %+v", r)
	}
	got, err := os.ReadFile(filepath.Join(c.Root, "huge.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("streamed write content differs (err %v, %d bytes)", err, len(got))
	}
}

// write, sync, truncate and close sent back to back (no waiting for
// answers) run in order: none of them sees a closed file.
func TestPipelinedSyncThenClose(t *testing.T) {
	c := startCluster(t)
	for round := 0; round < 20; round++ {
		name := fmt.Sprintf("/seq%d.bin", round)
		d, fh := openData(t, c, name, 0x0002|0x0020)
		var p [16]byte
		copy(p[0:4], fh[:])
		ids := []uint16{
			d.sendReq(3019, p, []byte("0123456789"), 10),
			d.sendReq(3016, p, nil, 0),
		}
		tp := p
		binary.BigEndian.PutUint64(tp[4:], 4)
		ids = append(ids, d.sendReq(3028, tp, nil, 0), d.sendReq(3016, p, nil, 0), d.sendReq(3003, p, nil, 0))
		for range ids {
			if r := d.recv(); r.status != 0 {
				t.Fatalf("round %d: sid %d failed: %d %q", round, r.sid, r.status, r.body)
			}
		}
		if b, err := os.ReadFile(filepath.Join(c.Root, name)); err != nil || string(b) != "0123" {
			t.Fatalf("round %d: content %q err %v", round, b, err)
		}
		d.c.Close()
	}
}

// kXR_endsess from the same client ends an older session (what XrdCl does
// after reconnecting): its connection closes and its upload is aborted.
func TestEndsessEndsOldSession(t *testing.T) {
	c := startCluster(t)
	w := dialWire(t, c.DataAddr, false)
	var lp [16]byte
	copy(lp[4:], "tester")
	id := w.sendReq(3007, lp, nil, 0)
	r := w.recv()
	if r.sid != id || len(r.body) != 16 {
		t.Fatalf("login: %+v", r)
	}
	var sess [16]byte
	copy(sess[:], r.body)
	// An upload in flight on the old session.
	m := dialWire(t, c.MgrAddr, true)
	var op [16]byte
	binary.BigEndian.PutUint16(op[2:], 0x0002|0x0020)
	rd := m.call(3010, op, []byte("/old.bin"))
	_, opaque, _ := strings.Cut(string(rd.body[4:]), "?")
	if r := w.call(3010, op, []byte("/old.bin?"+opaque)); r.status != 0 {
		t.Fatalf("open: %+v", r)
	}
	// Ending our own session id is a no-op success.
	if r := w.call(3023, sess, nil); r.status != 0 {
		t.Fatalf("endsess self: %+v", r)
	}
	third := dialWire(t, c.DataAddr, true)
	if r := third.call(3023, sess, nil); r.status != 0 {
		t.Fatalf("endsess other: %+v", r)
	}
	if _, err := w.tryRecv(); err == nil {
		t.Fatal("ended session's connection still open")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, aborts := c.FS.Counts(); aborts == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("upload of the ended session was not aborted")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

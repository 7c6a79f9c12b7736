package xrootd_test

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kaon-storage/kaon/internal/tlsconf"
	"github.com/kaon-storage/kaon/internal/xrootd"
	"github.com/kaon-storage/kaon/internal/xrootd/xrdtest"
)

// BenchmarkDataPath measures the data listener's hot paths with xrdcp's
// request shapes (8 MiB kXR_read / kXR_write, and kXR_pgread), over
// plaintext (root) and over TLS (roots), so the cost of TLS is the
// difference of the two. The client reuses its buffers (it is in the same
// process and should cost the same in every variant). Besides MB/s it
// reports cpu-s/GiB, the process's CPU time (client and server) per GiB
// moved, which a loaded machine disturbs much less than the wall clock.
//
//	go test -run - -bench DataPath -count 6 ./internal/xrootd/
func BenchmarkDataPath(b *testing.B) {
	const chunk = 8 << 20
	const fileChunks = 8 // a 64 MiB file, read round robin
	for _, op := range []string{"read", "write", "pgread"} {
		for _, scheme := range []string{"root", "roots"} {
			b.Run(op+"/"+scheme, func(b *testing.B) {
				c, m := startClusterTLS(b)
				var d *wire
				var fh [4]byte
				if op == "write" {
					d, fh = openDataScheme(b, c, m, scheme, "/w.bin", nil)
				} else {
					d, fh = openDataScheme(b, c, m, scheme, "/r.bin", make([]byte, fileChunks*chunk))
				}
				buf := make([]byte, chunk+chunk/pgPage*4+64<<10)
				b.SetBytes(chunk)
				cpu0 := cpuTime()
				n := 0
				for i := 0; b.Loop(); i++ {
					n++
					var p [16]byte
					copy(p[0:4], fh[:])
					binary.BigEndian.PutUint64(p[4:], uint64(i%fileChunks)*chunk)
					switch op {
					case "read":
						binary.BigEndian.PutUint32(p[12:], chunk)
						d.sendReq(3013, p, nil, 0)
					case "pgread":
						binary.BigEndian.PutUint32(p[12:], chunk)
						d.sendReq(3030, p, nil, 0)
					case "write":
						d.sendReq(3019, p, nil, chunk)
						d.raw(buf[:chunk])
					}
					if n := d.drain(buf); op != "write" && n != chunk {
						b.Fatalf("%s: %d bytes of data, want %d", op, n, chunk)
					}
				}
				b.ReportMetric((cpuTime()-cpu0).Seconds()/(float64(n)*chunk/(1<<30)), "cpu-s/GiB")
			})
		}
	}
}

const pgPage = 4096

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// drain reads the answer of one request into buf, each frame after the
// previous one as a client fills its chunk buffer, and returns the data
// bytes (page CRCs of kXR_pgread checked and not counted).
func (w *wire) drain(buf []byte) int {
	w.t.Helper()
	var h [8]byte
	total, data := 0, 0 // bytes in buf, data bytes among them
	for {
		if _, err := io.ReadFull(w.c, h[:]); err != nil {
			w.t.Fatal(err)
		}
		status := binary.BigEndian.Uint16(h[2:])
		dlen := int(binary.BigEndian.Uint32(h[4:]))
		switch status {
		case 0, 4000: // kXR_ok, kXR_oksofar
			if _, err := io.ReadFull(w.c, buf[total:total+dlen]); err != nil {
				w.t.Fatal(err)
			}
			total += dlen
			data += dlen
			if status == 0 {
				return data
			}
		case 4007: // kXR_status: 24 bytes, then the pages
			var st [24]byte
			if dlen != len(st) {
				w.t.Fatalf("kXR_status body of %d bytes", dlen)
			}
			if _, err := io.ReadFull(w.c, st[:]); err != nil {
				w.t.Fatal(err)
			}
			final := st[7] == 0
			bulk := int(binary.BigEndian.Uint32(st[12:16]))
			off := int64(binary.BigEndian.Uint64(st[16:24]))
			pages := buf[total : total+bulk]
			if _, err := io.ReadFull(w.c, pages); err != nil {
				w.t.Fatal(err)
			}
			for p := 0; p < bulk; {
				n := min(pgPage-int(off%pgPage), bulk-p-4)
				if crc32.Checksum(pages[p+4:p+4+n], castagnoli) != binary.BigEndian.Uint32(pages[p:]) {
					w.t.Fatalf("pgread: bad page CRC at offset %d", off)
				}
				p += 4 + n
				off += int64(n)
				data += n
			}
			total += bulk
			if final {
				return data
			}
		default:
			w.t.Fatalf("status %d: %q", status, buf[:min(dlen, 200)])
		}
	}
}

// startClusterTLS is startClusterB with TLS on both listeners.
func startClusterTLS(t testing.TB) (*xrdtest.Cluster, *tlsconf.Material) {
	t.Helper()
	m, err := tlsconf.Setup(tlsconf.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := xrdtest.Start(t.TempDir(), xrootd.Config{TLS: m.Server})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, m
}

// openDataScheme opens path for writing (content nil), or writes content
// to it and opens it for reading, like openDataB; the data connection
// switches to TLS for "roots" (kXR_wantTLS, as a roots:// client asks).
func openDataScheme(t testing.TB, c *xrdtest.Cluster, m *tlsconf.Material, scheme, path string, content []byte) (*wire, [4]byte) {
	t.Helper()
	opts := uint16(0x0002 | 0x0020) // as openDataB: create for writing
	if content != nil {
		if err := os.WriteFile(filepath.Join(c.Root, path), content, 0o644); err != nil {
			t.Fatal(err)
		}
		opts = 0x0010 // kXR_open_read
	}
	mw := dialWire(t, c.MgrAddr, true)
	defer mw.c.Close()
	var p [16]byte
	binary.BigEndian.PutUint16(p[0:], 0o644)
	binary.BigEndian.PutUint16(p[2:], opts)
	r := mw.call(3010, p, []byte(path))
	if r.status != 4004 {
		t.Fatalf("open at manager: status %d %q", r.status, r.body)
	}
	d := dialWire(t, c.DataAddr, scheme == "root")
	if scheme == "roots" {
		if f := d.protocol(0x02|0x04, 0x03); f&0x40000000 == 0 {
			t.Fatalf("protocol flags %#x: no kXR_gotoTLS", f)
		}
		d.startTLS(m)
		if r := d.login("bench"); r.status != 0 {
			t.Fatalf("TLS login: %+v", r)
		}
	}
	d.c.SetDeadline(time.Time{})
	_, opaque, _ := strings.Cut(string(r.body[4:]), "?")
	r = d.call(3010, p, []byte(path+"?"+opaque))
	if r.status != 0 || len(r.body) < 4 {
		t.Fatalf("open at data server: %d %q", r.status, r.body)
	}
	var fh [4]byte
	copy(fh[:], r.body)
	return d, fh
}

// cpuTime is the CPU time (user and system) this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

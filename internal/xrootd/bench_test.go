package xrootd_test

import (
	"encoding/binary"
	"testing"
)

// BenchmarkReadThroughput measures kXR_read of 8 MiB chunks (xrdcp's chunk
// size) from the data listener over loopback, protocol cost included.
func BenchmarkReadThroughput(b *testing.B) {
	c := startClusterB(b)
	const chunk = 8 << 20
	d, fh := openDataB(b, c, "/bench.bin", chunk)
	var p [16]byte
	copy(p[0:4], fh[:])
	binary.BigEndian.PutUint32(p[12:], chunk)
	b.SetBytes(chunk)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := d.sendReq(3013, p, nil, 0)
		r := d.recv()
		if r.sid != id || r.status != 0 || len(r.body) != chunk {
			b.Fatalf("read: status %d len %d", r.status, len(r.body))
		}
	}
}

// BenchmarkWriteThroughput measures kXR_write of 8 MiB chunks.
func BenchmarkWriteThroughput(b *testing.B) {
	c := startClusterB(b)
	const chunk = 8 << 20
	d, fh := openDataB(b, c, "/wbench.bin", 0)
	buf := make([]byte, chunk)
	var p [16]byte
	copy(p[0:4], fh[:])
	b.SetBytes(chunk)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		binary.BigEndian.PutUint64(p[4:], uint64(i%64)*chunk)
		id := d.sendReq(3019, p, buf, chunk)
		if r := d.recv(); r.sid != id || r.status != 0 {
			b.Fatalf("write: status %d", r.status)
		}
	}
}

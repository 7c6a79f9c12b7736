package checksum

import (
	"encoding/binary"
	stdadler "hash/adler32"
	"testing"
)

const m16 = 0x00FF00FF00FF00FF

func hsum16(x uint64) uint64 {
	y := (x & 0x0000FFFF0000FFFF) + ((x >> 16) & 0x0000FFFF0000FFFF)
	return (y + (y >> 32)) & 0xFFFFFFFF
}

// adlerUpdate2: 16-byte chunks, 16-bit lanes, sub-blocks of 23 chunks.
func adlerUpdate2(s1, s2 uint32, p []byte) (uint32, uint32) {
	const sub = 23
	for len(p) >= 16 {
		chunks := len(p) / 16
		if chunks > 1<<16 {
			chunks = 1 << 16
		}
		n := chunks * 16
		blk := p[:n:n]
		p = p[n:]
		var sumA, sumQ, weighted uint64
		for len(blk) >= 16 {
			s := min(len(blk)/16, sub)
			var ae1, ao1, ae2, ao2, qe1, qo1, qe2, qo2 uint64
			for k := 0; k < s; k++ {
				v1 := binary.LittleEndian.Uint64(blk[16*k:])
				v2 := binary.LittleEndian.Uint64(blk[16*k+8:])
				qe1 += ae1
				qo1 += ao1
				qe2 += ae2
				qo2 += ao2
				ae1 += v1 & m16
				ao1 += (v1 >> 8) & m16
				ae2 += v2 & m16
				ao2 += (v2 >> 8) & m16
			}
			blk = blk[16*s:]
			subA := hsum16(ae1) + hsum16(ao1) + hsum16(ae2) + hsum16(ao2)
			sumQ += hsum16(qe1) + hsum16(qo1) + hsum16(qe2) + hsum16(qo2) + uint64(s)*sumA
			sumA += subA
			// position j weight 16-j; ae1 lanes = positions 0,2,4,6; ao1 = 1,3,5,7; ae2 = 8,10,12,14; ao2 = 9,...
			l := func(x uint64, i uint) uint64 { return (x >> (16 * i)) & 0xFFFF }
			weighted += 16*l(ae1, 0) + 14*l(ae1, 1) + 12*l(ae1, 2) + 10*l(ae1, 3) +
				15*l(ao1, 0) + 13*l(ao1, 1) + 11*l(ao1, 2) + 9*l(ao1, 3) +
				8*l(ae2, 0) + 6*l(ae2, 1) + 4*l(ae2, 2) + 2*l(ae2, 3) +
				7*l(ao2, 0) + 5*l(ao2, 1) + 3*l(ao2, 2) + 1*l(ao2, 3)
		}
		t2 := uint64(s2) + uint64(n)*uint64(s1) + 16*sumQ + weighted
		s1 = uint32((uint64(s1) + sumA) % adlerMod)
		s2 = uint32(t2 % adlerMod)
	}
	for _, b := range p {
		s1 += uint32(b)
		s2 += s1
	}
	return s1 % adlerMod, s2 % adlerMod
}

func TestAdler2(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 17, 367, 368, 369, 5552, 100000, 1 << 20, 3 << 20} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + i>>11)
		}
		bf := make([]byte, n)
		for i := range bf {
			bf[i] = 0xff
		}
		for _, x := range [][]byte{b, bf} {
			s1, s2 := adlerUpdate2(1, 0, x)
			if got, want := s2<<16|s1, stdadler.Checksum(x); got != want {
				t.Fatalf("n=%d got %08x want %08x", n, got, want)
			}
		}
	}
}

func BenchmarkAdlerVariants(b *testing.B) {
	buf := benchBuf()
	for range 3 {
		b.Run("v1", func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			s1, s2 := uint32(1), uint32(0)
			for b.Loop() {
				s1, s2 = adlerUpdate(s1, s2, buf)
			}
		})
		b.Run("v2", func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			s1, s2 := uint32(1), uint32(0)
			for b.Loop() {
				s1, s2 = adlerUpdate2(s1, s2, buf)
			}
		})
	}
}

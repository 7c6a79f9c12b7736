package checksum

import (
	"encoding/binary"
	"hash"
)

// A faster pure-Go Adler-32.
//
// hash/adler32 walks one byte at a time, so every byte waits for the
// previous s1 and s2 additions (a serial chain of ~2 adds per byte). Here
// 8 bytes are loaded at once and spread into four 64-bit words holding two
// 32-bit lanes each (SWAR): lane sums A and running prefix sums Q have no
// cross-byte dependency, so the CPU executes them in parallel. The weights
// Adler-32 needs are recovered from A and Q once per block, and the
// modulo is taken once per block instead of once per 5552 bytes.
//
// For bytes b_i (i = 8c+j) of a block of n = 8C bytes:
//
//	s1' = s1 + Σ b_i
//	s2' = s2 + n·s1 + Σ (n-i)·b_i
//	    = s2 + n·s1 + 8·Σ_c (C-1-c)·chunk_c + Σ_j (8-j)·A_j
//
// where chunk_c is the byte sum of 8-byte chunk c, A_j the sum of bytes at
// position j of every chunk, and Σ_c (C-1-c)·chunk_c is the sum over
// chunks of the total before that chunk, i.e. the lanes of Q.

const (
	adlerMod = 65521
	// adlerBlockIters bounds one block: Q lanes reach 255·C·(C-1)/2, which
	// must stay below 2^32 (C < 5800).
	adlerBlockIters = 4096
	laneMask        = 0x000000FF000000FF
)

// adlerGeneric folds p into the Adler-32 state (s1, s2), both < 65521
// (adlerUpdate where no vector version runs).
func adlerGeneric(s1, s2 uint32, p []byte) (uint32, uint32) {
	for len(p) >= 8 {
		iters := len(p) / 8
		if iters > adlerBlockIters {
			iters = adlerBlockIters
		}
		n := iters * 8
		blk := p[:n:n]
		p = p[n:]
		var a0, a1, a2, a3, q0, q1, q2, q3 uint64
		for len(blk) >= 16 {
			v := binary.LittleEndian.Uint64(blk)
			q0 += a0
			q1 += a1
			q2 += a2
			q3 += a3
			a0 += v & laneMask
			a1 += (v >> 8) & laneMask
			a2 += (v >> 16) & laneMask
			a3 += (v >> 24) & laneMask
			v = binary.LittleEndian.Uint64(blk[8:])
			q0 += a0
			q1 += a1
			q2 += a2
			q3 += a3
			a0 += v & laneMask
			a1 += (v >> 8) & laneMask
			a2 += (v >> 16) & laneMask
			a3 += (v >> 24) & laneMask
			blk = blk[16:]
		}
		if len(blk) == 8 {
			v := binary.LittleEndian.Uint64(blk)
			q0 += a0
			q1 += a1
			q2 += a2
			q3 += a3
			a0 += v & laneMask
			a1 += (v >> 8) & laneMask
			a2 += (v >> 16) & laneMask
			a3 += (v >> 24) & laneMask
		}
		// Lane j of word k holds byte position k (low) or k+4 (high).
		lo := func(x uint64) uint64 { return x & 0xFFFFFFFF }
		hi := func(x uint64) uint64 { return x >> 32 }
		sumA := lo(a0) + hi(a0) + lo(a1) + hi(a1) + lo(a2) + hi(a2) + lo(a3) + hi(a3)
		sumQ := lo(q0) + hi(q0) + lo(q1) + hi(q1) + lo(q2) + hi(q2) + lo(q3) + hi(q3)
		weighted := 8*lo(a0) + 7*lo(a1) + 6*lo(a2) + 5*lo(a3) +
			4*hi(a0) + 3*hi(a1) + 2*hi(a2) + 1*hi(a3)
		t2 := uint64(s2) + uint64(n)*uint64(s1) + 8*sumQ + weighted
		s1 = uint32((uint64(s1) + sumA) % adlerMod)
		s2 = uint32(t2 % adlerMod)
	}
	for _, b := range p { // < 8 bytes
		s1 += uint32(b)
		s2 += s1
	}
	return s1 % adlerMod, s2 % adlerMod
}

// adler32 implements hash.Hash32 with the same output as hash/adler32.
type adler32 struct{ s1, s2 uint32 }

func newAdler32() *adler32 { return &adler32{s1: 1} }

func (d *adler32) Write(p []byte) (int, error) {
	d.s1, d.s2 = adlerUpdate(d.s1, d.s2, p)
	return len(p), nil
}
func (d *adler32) Sum32() uint32 { return d.s2<<16 | d.s1 }
func (d *adler32) Sum(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, d.Sum32())
}
func (d *adler32) Reset()         { d.s1, d.s2 = 1, 0 }
func (d *adler32) Size() int      { return 4 }
func (d *adler32) BlockSize() int { return 8 }

var _ hash.Hash32 = (*adler32)(nil)

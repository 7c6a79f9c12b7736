package checksum

// CRC32C combination: the crc32c of a concatenation A‖B from the crc32c
// of A, that of B and B's length, without the bytes (zlib's
// crc32_combine). A writer that already sums its pieces (the frames of an
// erasure-coded stripe) gets the crc32c of the whole stream from them
// instead of a second pass over every byte. The arithmetic is in GF(2)
// modulo the reflected Castagnoli polynomial: appending n zero bytes to
// a message multiplies its (unconditioned) crc by x^(8n).

const castagnoliPoly = 0x82F63B78 // reflected

// gfMul multiplies a and b modulo the polynomial (bit 31 is x^0).
func gfMul(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// x2n[k] is x^(2^k) modulo the polynomial.
var x2n = func() (t [64]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = gfMul(p, p)
	}
	return
}()

// CRC32CShift is the operator that CRC32CCombine applies for a second
// part of n bytes: x^(8n) modulo the polynomial. Callers combining many
// parts of one length compute it once.
func CRC32CShift(n int64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n > 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = gfMul(x2n[k&63], p)
		}
	}
	return p
}

// CRC32CCombine is the crc32c of A‖B given crcA, crcB and shift =
// CRC32CShift(len(B)).
func CRC32CCombine(crcA, crcB, shift uint32) uint32 { return gfMul(shift, crcA) ^ crcB }

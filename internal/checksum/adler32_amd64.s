//go:build amd64 && !purego

#include "textflag.h"

// func adlerAVX2(p []byte, w *[64]byte, acc *[12]uint64)
TEXT ·adlerAVX2(SB), NOSPLIT, $0-40
	MOVQ p_base+0(FP), SI
	MOVQ p_len+8(FP), CX
	MOVQ w+24(FP), AX
	MOVQ acc+32(FP), DI
	SHRQ $6, CX
	VMOVDQU 0(AX), Y8          // weights 64..33
	VMOVDQU 32(AX), Y9         // weights 32..1
	VPCMPEQW Y10, Y10, Y10
	VPSRLW $15, Y10, Y10       // 16-bit ones
	VPXOR Y11, Y11, Y11        // zero
	VPXOR Y12, Y12, Y12        // byte sums (4 x 64 bits)
	VPXOR Y13, Y13, Y13        // sums of the byte sums before each chunk
	VPXOR Y14, Y14, Y14        // weighted sums, first half (8 x 32 bits)
	VPXOR Y15, Y15, Y15        // weighted sums, second half
	TESTQ CX, CX
	JZ done

loop:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VPADDQ Y12, Y13, Y13
	VPSADBW Y11, Y0, Y2
	VPSADBW Y11, Y1, Y3
	VPADDQ Y2, Y12, Y12
	VPADDQ Y3, Y12, Y12
	VPMADDUBSW Y8, Y0, Y4
	VPMADDUBSW Y9, Y1, Y5
	VPMADDWD Y10, Y4, Y4
	VPMADDWD Y10, Y5, Y5
	VPADDD Y4, Y14, Y14
	VPADDD Y5, Y15, Y15
	ADDQ $64, SI
	DECQ CX
	JNZ loop

done:
	VPADDD Y15, Y14, Y14
	VMOVDQU Y12, 0(DI)
	VMOVDQU Y13, 32(DI)
	VMOVDQU Y14, 64(DI)
	VZEROUPPER
	RET

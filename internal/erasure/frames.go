package erasure

import (
	"encoding/binary"
	"fmt"

	"github.com/kaon-storage/kaon/internal/checksum"
	"github.com/kaon-storage/kaon/internal/kerr"
)

// FrameChecker verifies one shard as it streams past (a stripe copied
// whole to another filesystem): every frame's crc32c, and at the end the
// length a shard of the file's logical size has. It holds at most one
// frame of bytes.
type FrameChecker struct {
	l      Layout
	size   int64 // logical size of the file
	buf    []byte
	n      int   // bytes of the current frame in buf
	frames int64 // complete frames seen
	err    error
}

// NewFrameChecker checks a shard of a file of logical size size.
func NewFrameChecker(l Layout, size int64) (*FrameChecker, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &FrameChecker{l: l, size: size, buf: make([]byte, l.FrameSize())}, nil
}

// Write checks p; it never fails (Err says what was wrong).
func (c *FrameChecker) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 && c.err == nil {
		m := copy(c.buf[c.n:], p)
		c.n += m
		p = p[m:]
		if c.n < len(c.buf) {
			break
		}
		unit := c.l.Unit
		if got, want := checksum.CRC32CSum(c.buf[:unit]), binary.LittleEndian.Uint32(c.buf[unit:]); got != want {
			c.err = kerr.New(kerr.IO, "verify", c.l.String(), fmt.Sprintf("frame %d: crc32c %08x, recorded %08x", c.frames, got, want))
		}
		c.frames++
		c.n = 0
	}
	return total, nil
}

// Err says why the shard seen so far is not a valid shard of the file:
// a frame whose crc32c does not match, or (once all bytes went through)
// a length other than ShardSize of the logical size.
func (c *FrameChecker) Err() error {
	if c.err != nil {
		return c.err
	}
	if got, want := c.frames*c.l.FrameSize()+int64(c.n), c.l.ShardSize(c.size); got != want {
		return kerr.New(kerr.IO, "verify", c.l.String(), fmt.Sprintf("shard holds %d bytes, a file of %d bytes needs %d", got, c.size, want))
	}
	return nil
}
